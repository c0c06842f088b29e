#pragma once
// Cost of one distributed-attention layer (forward, backward, and the recomputation a checkpoint
// policy asks for) on a modelled cluster.
//
// One kind of model (`PassCost::model` = "schedule") for every algorithm: the executor's own
// make_schedule() plans of all ranks, replayed by the simulator (simulator.hpp), collective steps
// (StarTrail's team all-gathers, Ulysses' all-to-alls) included. Messages, bytes per link class,
// overlap and idle time all come from the schedule; nothing about what a schedule does is
// re-derived here (the papers' volume formulas are tests: tests/attention/startrail_test.cpp,
// ulysses_test.cpp, tests/plan/paper_validation_test.cpp).
//
// Legend: P ranks, L = layout.local_len() tokens per rank, Hq/Hkv heads, D head dim,
// e = Hardware::dtype_bytes. Part sizes in elements, per bundle (the executor's; R rows = the
// bundle's pieces x L, heads the rank's slice):
//   forward and ring-backward data  2*R*Hkv*D (K,V)      ring-backward grad  2*R*Hkv*D (dK,dV)
//   burst-backward data  2*R*Hq*D + 2*R*Hq (Q,dO + D,LSE) burst-backward grad R*Hq*D (dQ)
// FLOPs are mask-aware and counted per visible (q, k) pair: forward 4*Hq*D (QK^T and PV),
// backward 10*Hq*D (QK^T recomputed, dV, dP, dQ, dK).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/attention/schedule.hpp"
#include "longseq/plan/hardware.hpp"
#include "longseq/plan/simulator.hpp"

namespace longseq::plan {

/// The attention problem of one layer: one context-parallel group of `world` ranks, and the
/// `replicas` data-parallel groups of the cluster it is one of.
///
/// Placement: replica d's group holds physical ranks [d * world, (d + 1) * world), nodes are
/// blocks of `gpus_per_node` physical ranks, so a group whose start is not a multiple of
/// gpus_per_node meets the node boundaries at other group ranks than replica 0's. Every replica
/// runs the same schedules, and groups share no rank (so no port), so the cluster's replay is the
/// group's replayed once per distinct placement (start modulo gpus_per_node, up to the boundaries
/// it makes inside the group) and combined in rank order as a replay of all
/// replicas x world ranks would: the same numbers, bit for bit (`whole_world` replays the cluster
/// itself: the reference tests hold the placements against).
struct AttnProblem {
  int64_t n = 0;  ///< global sequence length
  int64_t hq = 0, hkv = 0, d = 0;
  int world = 1;  ///< ranks of one context-parallel group
  int gpus_per_node = 1;
  attention::Balance balance = attention::Balance::zigzag;
  attention::MaskSpec mask;  ///< full, causal or causal+window (no files)
  int replicas = 1;          ///< data-parallel groups of `world` ranks (>= 1)
  /// Replay all replicas x world ranks as one set of schedules (peers renumbered) instead of one
  /// group per placement: the reference, quadratic in the cluster.
  bool whole_world = false;
  /// Ranks that share one host's cores (Hardware::compute_share: a `local` profile's threads);
  /// 0: replicas x world.
  int host_ranks = 0;
  int cluster_ranks() const { return replicas * world; }
  int share_ranks() const { return host_ranks > 0 ? host_ranks : cluster_ranks(); }
};

struct PassCost {
  std::string model;       ///< "schedule" or "formula: <source>"
  double seconds = 0;      ///< wall time of the pass on the critical rank
  double compute_s = 0;    ///< compute time of the critical rank
  double flops = 0;        ///< FLOPs of the busiest rank
  double flops_total = 0;  ///< all ranks
  // Sent per rank, mean over ranks (ranks at node boundaries send more inter-node traffic).
  double messages_intra = 0, messages_inter = 0;
  double bytes_intra = 0, bytes_inter = 0;
  double bytes_inter_max =
      0;  ///< the rank that sends most inter-node bytes (its NIC share is busiest)
  double collective_s = 0;      ///< collective-step time of the critical rank inside `seconds`
  double collective_bytes = 0;  ///< of bytes_intra + bytes_inter: team collectives / all-to-alls
  std::optional<Timeline> timeline;  ///< schedule models only
  double exposed_comm_s() const { return seconds > compute_s ? seconds - compute_s : 0.0; }
};

struct AttentionCost {
  PassCost forward, backward;
  /// Recomputing the attention forward of the first `recompute_fraction` of every rank's local
  /// tokens (BurstEngine's sequence-level selective checkpointing); equals `forward` at 1.0.
  PassCost partial_recompute;
  double recompute_fraction = 0;
  /// Communication buffers one rank holds during a pass (bytes): schedule slots x part sizes,
  /// or StarTrail's gathered team copies.
  double buffer_bytes_forward = 0, buffer_bytes_backward = 0;
  /// Extra activation bytes the algorithm holds beyond the rank's own Q,K,V (StarTrail 3(C-1)A).
  double extra_activation_bytes = 0;
};

/// Throws core::Error naming the values when `algo` cannot run on the problem (heads, C*C | P,
/// inner ring size, ...). The reason text is what `longseq plan` lists for infeasible configs.
void validate_algo(const attention::Algorithm& algo, const AttnProblem& prob);

/// Costs `algo` on `prob`. `recompute_fraction` in [0, 1]: the seq-selective share (0: skipped).
/// `keep_timelines`: keep the simulator timelines in the PassCosts (for SVG output).
AttentionCost cost_attention(const attention::Algorithm& algo, const AttnProblem& prob,
                             const Hardware& hw, double recompute_fraction = 0,
                             bool keep_timelines = false);

/// cost_attention in two halves, for a caller that shares one forward among the algorithms whose
/// forward passes are the same (equal forward_key): cost_forward fills forward,
/// partial_recompute, recompute_fraction, buffer_bytes_forward and extra_activation_bytes;
/// cost_backward fills backward and buffer_bytes_backward. cost_attention(a) is cost_forward(a)
/// then cost_backward(a) on the result, bit for bit.
AttentionCost cost_forward(const attention::Algorithm& algo, const AttnProblem& prob,
                           const Hardware& hw, double recompute_fraction = 0,
                           bool keep_timelines = false);
void cost_backward(const attention::Algorithm& algo, const AttnProblem& prob, const Hardware& hw,
                   AttentionCost& cost, bool keep_timelines = false);
/// `algo` with the default backward variant: the forward schedules (and so cost_forward) do not
/// depend on the backward variant (ring and burst, double-ring:I and double-ring:I:ring,
/// usp:U and usp:U:ring run the same forward).
attention::Algorithm forward_key(const attention::Algorithm& algo);

/// The executor's schedules of an algorithm, one per rank, and the topology they run on
/// (attention::schedule_topology: a double ring's inner rings are blocks of algo.inner ranks, of
/// prob.gpus_per_node when algo.inner is 0; physical placement is gpus_per_node).
struct ScheduleSet {
  comm::Topology topo;
  attention::Layout layout;
  std::vector<attention::RankSchedule> ranks;
};
ScheduleSet make_schedules(const attention::Algorithm& algo, const AttnProblem& prob,
                           attention::Pass pass);

/// Lower bounds of cost_attention(algo, prob, hw, recompute_fraction)'s passes, without
/// schedules (linear in the ranks): each PassCost's seconds, compute_s, bytes_inter and
/// bytes_inter_max (and partial_recompute's) are at most the replayed ones, all other fields 0.
///   compute   the pass's visible pairs over all ranks (closed form per chunk) x FLOPs per pair,
///             divided evenly over the group's ranks at the fastest rate the replay could give
///             a work item (the attention curve's best point; partial tiles at their cost when
///             below 1): the busiest rank computes at least the mean, and the pass lasts at least
///             its compute.
///   transfers where the schedules move whole bundles between ranks and the queries of the
///             ranks of one node are computed by those ranks (the ring family, USP with its
///             Ulysses groups inside nodes, StarTrail's teams placement with teams inside nodes,
///             forward; their data bundles in the backward, StarTrail's excepted), every remote
///             rank whose keys a query of the node sees (backward with circulating queries: whose
///             queries see a key of the node) sends its bundle's L rows into the node at least
///             once, through the node's inbound inter-node ports (one per rank, one transfer at a
///             time, beta each): the pass lasts at least the node's import / (its ranks x beta),
///             and the mean rank sends at least the cluster's import / ranks inter-node bytes.
///             Full and causal masks on any layout, windows on layouts of contiguous chunks;
///             elsewhere this term is 0.
/// Every bound is scaled by (1 - 1e-9) so that rounding in another order of the same sums never
/// lifts it above the replayed double.
AttentionCost attention_lower_bound(const attention::Algorithm& algo, const AttnProblem& prob,
                                    const Hardware& hw, double recompute_fraction = 0);

/// Visible (q, k) pairs of queries [rows of every rank below q_local_limit] (-1: all) over the
/// whole layout: sum over ranks and chunks of the keys each query sees, in closed form per chunk
/// (full, causal, window masks). Double: an upper estimate of 2^53 is not needed for a bound.
double layout_visible_pairs(const attention::Layout& layout, const attention::MaskSpec& mask,
                            int64_t q_local_limit = -1);

/// Visible (q, k) pairs of a query chunk and a key chunk under the mask, counting only query
/// local indices below `q_local_limit` (-1: all). Exact for full, causal and window masks.
int64_t visible_pairs(const attention::Chunk& q, const attention::Chunk& k, int64_t n,
                      const attention::MaskSpec& mask, int64_t q_local_limit = -1);

/// (q, k) pairs the tiled block kernels compute for one chunk pair (Hardware::KernelTiles): tiles
/// of tile_q queries by tile_k keys, classified and trimmed from their position ranges exactly as
/// kernels/cpu/tiles.hpp does; `full` counts pairs of full tiles, `partial` the trimmed
/// rectangles of partial tiles (masked inside). Query local indices from `q_local_limit` on are
/// not computed (-1: all). Full, causal and window masks.
struct TileWork {
  int64_t full = 0, partial = 0;
};
TileWork kernel_tile_work(const attention::Chunk& q, const attention::Chunk& k, int64_t n,
                          const attention::MaskSpec& mask, int64_t tile_q, int64_t tile_k,
                          int64_t q_local_limit = -1);

}  // namespace longseq::plan
