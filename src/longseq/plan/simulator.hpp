#pragma once
// Cluster simulator: replays the schedules of attention/schedule.hpp (the executor's own plans)
// step by step on a modelled cluster, and draws per-rank timelines as SVG.
//
// The replay follows the executor's contract (schedule.hpp "Timing is logical"): at step s a rank
// (1) waits for the transfers whose wait_step is s, (2) posts the transfers whose post_step is s,
// (3) computes the work of step s. A transfer starts when both sides have posted it and the
// sender's outbound port and the receiver's inbound port of its link class are free (one port per
// class per rank: intra-node and inter-node links are separate rails, as BurstEngine §3.1 uses
// them); it takes alpha + bytes / beta of its class. Gradient accumulates are not timed (an
// elementwise add of one part, small against the chunk-pair compute).
//
// Local backend (ReplayModel::wait_copy set): the comm layer copies a message when a rank waits
// for it, so besides the link (which runs from the post), a receive's wait costs the copy after the
// receiver arrives: done = max(link done, arrival + copy latency + bytes / copy bandwidth). The
// receiver is charged (in the executor whichever side waits first copies; every rank receives as
// much as it sends in the ring schedules, so the charge per rank is the same).
//
// Collective steps (RankSchedule::pre before step 0, post after the last step): the members of a
// sub-group start together, at the latest member's time; comm runs all-gather and reduce-scatter
// as rings (n-1 messages to the next member) and all-to-alls as one message to every other
// member. Intra- and inter-node rails run concurrently; collectives get
// ReplayModel::collective_efficiency. The executor waits for every collective step where it runs
// it, so they cost as blocking. StarTrail's initial transfer and its gradients' return are ring
// transfers (Part::side), posted at step 0 and waited block by block: they overlap the compute
// like any ring transfer.
//
// Because every request is posted at a step strictly before either side waits for it, replaying
// all ranks step by step in lock-step order always knows a transfer's completion before a wait
// needs it. Port contention is served in that (step, rank) order, not strictly by time.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "longseq/attention/schedule.hpp"
#include "longseq/plan/hardware.hpp"

namespace longseq::plan {

enum class Activity : uint8_t { compute, intra, inter };

struct Span {
  double begin = 0, end = 0;
  Activity kind = Activity::compute;
  int step = 0;
};

struct RankTimeline {
  std::vector<Span> spans;  ///< compute spans, and the sends of this rank (by link class); empty
                            ///< unless ReplayModel::spans
  double finish = 0;        ///< when the rank's last step is done
  double compute_s = 0;     ///< sum of compute spans
  double flops = 0;
  double wait_copy_s = 0;       ///< local backend: time spent copying received messages at waits
  double collective_s = 0;      ///< in collective steps (waiting for the members included)
  double collective_bytes = 0;  ///< sent in sub-group collectives (not send_recv steps)
  int64_t messages_intra = 0, messages_inter = 0;  ///< sent by this rank
  double bytes_intra = 0, bytes_inter = 0;         ///< sent by this rank
};

struct Timeline {
  std::vector<RankTimeline> ranks;
  double makespan = 0;
  /// The rank with the longest finish (ties: lowest rank).
  int critical_rank() const;
};

/// What the replay needs to know about one pass beyond the schedules themselves. The functions
/// must be pure: replay() asks `bytes` and `same_node` once per transfer (of its send side) and
/// `flops` / `cost_flops` once per work item, all before the replay and rank by rank, not at the
/// moment the replay reaches them.
struct ReplayModel {
  /// Bytes of one transfer of `rank`'s schedule (by its part: data, grad, or the side block).
  std::function<double(int rank, const attention::Xfer&)> bytes;
  /// FLOPs of one step's work on `rank`, and the rate it runs at.
  std::function<double(int rank, const attention::Work&)> flops;
  double flops_per_s = 1;
  /// Optional: the FLOP-equivalent work that sets the step's time (e.g. the pairs the tiled
  /// kernels really compute, Hardware::KernelTiles); unset: `flops`.
  std::function<double(int rank, const attention::Work&)> cost_flops;
  /// Physical placement: do ranks a and b share a node (decides the link class of a transfer).
  std::function<bool(int a, int b)> same_node;
  Link intra, inter;
  /// bandwidth_Bps > 0: the local backend's copy at the wait (see the file comment).
  Link wait_copy;
  /// Bytes of one message of collective step `c` of `rank` for field `f` (a per-peer block).
  /// Unset: the schedules have no collective steps.
  std::function<double(int rank, const attention::Collective& c, attention::Field f)> message_bytes;
  double collective_efficiency = 1;
  /// Record RankTimeline::spans (the drawing's input); off, a cluster-sized replay keeps only the
  /// per-rank totals.
  bool spans = true;
};

/// Replays `schedules` (one per rank, all of the same pass). Throws nothing; a send without its
/// receive is a broken schedule invariant (LONGSEQ_CHECK). Cost: linear in the schedules' items
/// (every transfer and work item is numbered, sorted by step with a counting sort and visited
/// once, in (step, rank, list) order through one array).
Timeline replay(const std::vector<attention::RankSchedule>& schedules, const ReplayModel& model);

/// An SVG drawing of the timelines: one lane per rank with three rows (compute, intra-node sends,
/// inter-node sends); idle time is the gap in the compute row. Self-contained, no scripts.
std::string timeline_svg(const Timeline& t, const std::string& title);

}  // namespace longseq::plan
