#pragma once
// Schedules: pure functions from (rank, world, topology, layout, mask, algorithm, pass) to the
// plan one executor runs (design.md §5). No communication, no compute: tests check them for
// every world up to 64, and the planner costs them.
//
// The model. Every rank owns one *bundle*: the shard that circulates (K,V in the forward and in
// ring's backward; Q, dO, D, LSE in burst's backward). A bundle spreads from its origin along a
// route tree: the flat ring is a path r, r+1, ..., r+P-1; the double ring is an outer path across
// nodes (same local rank) with an inner path inside every node. Rank r *visits* bundle j at step
// t(r, j) and computes the non-empty chunk pairs it owes for it. Branches whose subtree needs
// nothing are pruned, so a step whose chunk pairs are all empty posts no transfer.
// Backward passes also carry a gradient part (dK,dV for ring; dQ for burst). Gradients are summed
// along *chains* (the computing ranks of one inner path, in visit order); each chain's last rank
// sends its partial sum home, where the origin adds it to its own gradient. A rank computes its
// contribution into a fresh slot, and only at the next step adds the partial that arrived
// meanwhile and forwards the sum: the one-step warm-up of BurstEngine Figure 5, so gradient
// transfers overlap the next compute instead of stalling it.
//
// Timing is logical. At step s a rank (1) waits for the requests whose wait_step is s, (2) adds
// received gradient partials, (3) posts all transfers whose post_step is s in one grouped call,
// (4) computes the work of step s. Every request is posted at a step strictly before the step at
// which either side waits for it, so by induction over steps no schedule can deadlock.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "longseq/attention/algorithm.hpp"
#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/comm/topology.hpp"

namespace longseq::attention {

enum class Pass : uint8_t { forward, backward };

/// The topology a ring-family schedule runs on: the group's own, except for a double ring with
/// an explicit inner ring size I (double-ring:I), whose inner rings are blocks of I consecutive
/// ranks whatever the nodes are. Throws core::Error naming the values when I does not divide the
/// group size.
comm::Topology schedule_topology(const Algorithm& algo, const comm::Topology& group);

enum class Part : uint8_t { data, grad };

/// One point-to-point transfer as seen from one side.
struct Xfer {
  bool send = false;
  int peer = -1;
  int origin = -1;  ///< bundle origin rank
  Part part = Part::data;
  int slot = -1;  ///< data or grad slot (by part) read from / written into
  int post_step = 0;
  int wait_step = 0;
  int tag() const { return origin * 2 + static_cast<int>(part); }
};

/// A chunk pair to compute: q chunk index of the query side's rank, kv chunk index of the key side.
struct SubPair {
  int qc = 0, kc = 0;
  PairKind kind = PairKind::partial;
};

/// The compute of one step: this rank with bundle `origin` (held in data slot `slot`).
/// Forward and ring-backward: queries are local, keys come from the bundle. Burst backward:
/// queries come from the bundle, keys are local. grad_slot: where a backward step writes its
/// contribution to the bundle's gradient (-1: the bundle is our own, write straight home).
struct Work {
  int step = 0;
  int origin = -1;
  int slot = -1;
  int grad_slot = -1;
  std::vector<SubPair> pairs;
};

/// At `step` (after waits), add grad slot `from` into grad slot `into` (-1: into our own gradient).
struct Accumulate {
  int step = 0;
  int from = -1;
  int into = -1;
};

/// Everything one rank does in one pass.
struct RankSchedule {
  int rank = 0;
  int num_steps = 0;       ///< steps 0 .. num_steps-1 (the last ones may have only waits)
  int data_slots = 0;      ///< buffers of one bundle's data part
  int grad_slots = 0;      ///< buffers of one bundle's gradient part (backward only)
  int own_slot = -1;       ///< data slot the executor packs this rank's own bundle into at step 0
  std::vector<Work> work;  ///< by step, at most one per step
  std::vector<Xfer> xfers;
  std::vector<Accumulate> accumulates;
};

/// The plan of `rank`. Pure: the same arguments give the same schedule on every rank.
RankSchedule make_schedule(int rank, const comm::Topology& topo, const Layout& layout,
                           const PairTable& pairs, Algorithm algo, Pass pass);

/// Which side of a (q rank, kv rank) pair the bundle is, for `algo` and `pass`.
inline bool bundle_is_query(Algorithm algo, Pass pass) {
  return pass == Pass::backward && algo.backward == Backward::q;
}

}  // namespace longseq::attention
