#pragma once
// The backend interface behind Group (internal to comm/ and its tests).
//
// A backend implements posting of point-to-point operations on a channel and the construction of
// sub-groups; everything else (collectives, split, topology helpers, byte accounting) is written
// once in terms of those, so every backend counts bytes and reports errors identically.
//
// Channels: every group has a group id `gid` agreed by its members (split computes it); its user
// traffic runs on channel 2*gid and its collective traffic on 2*gid+1, so a collective can never
// match a user message. gid 0 is reserved (the MPI backend's control messages).
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "longseq/comm/group.hpp"

namespace longseq::comm {

enum class Channel : uint32_t { user = 0, collective = 1 };

/// Atomic form of Stats' counters.
struct AtomicTraffic {
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> messages{0};
  void add(uint64_t b) {
    bytes.fetch_add(b, std::memory_order_relaxed);
    messages.fetch_add(1, std::memory_order_relaxed);
  }
  Traffic load() const { return {bytes.load(), messages.load()}; }
  void reset() {
    bytes.store(0);
    messages.store(0);
  }
};
struct AtomicStats {
  AtomicTraffic sent_intra, sent_inter, recv_intra, recv_inter;
  void count_send(bool intra, uint64_t bytes) { (intra ? sent_intra : sent_inter).add(bytes); }
  void count_recv(bool intra, uint64_t bytes) { (intra ? recv_intra : recv_inter).add(bytes); }
  Stats load(int rank, int node) const;
  void reset();
};

/// State of one rank shared by all its groups in one world: the next free group id (split's
/// agreement needs it per rank, not per group) and the rank-wide traffic totals.
struct RankState {
  std::atomic<uint32_t> next_gid{2};
  AtomicStats totals;
  int world_rank = 0;
  int world_node = 0;
};

/// One collective call of Group as a backend with collectives of its own receives it (nccl:
/// ncclAllGather, ...). Pointers and counts are Group's arguments (group.hpp); all_to_all_v's
/// counts and displacements are in elements, P each.
struct CollectiveCall {
  enum class Kind : uint8_t {
    all_gather,
    reduce_scatter,
    all_reduce,
    all_to_all,
    all_to_all_v,
    broadcast,
    barrier
  };
  Kind kind = Kind::barrier;
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;
  core::DType dt = core::DType::u8;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  std::span<const size_t> send_counts, send_displs, recv_counts, recv_displs;
};

/// One send or receive as posted (GroupImpl::record_posts), for tests of the pair-order rule.
struct PostRecord {
  Channel channel = Channel::user;
  bool send = false;
  int peer = 0;  ///< group rank
  int tag = 0;
  size_t bytes = 0;
};

class GroupImpl {
 public:
  /// `world_ranks[i]` is the world rank of group rank i (backends address by world rank).
  GroupImpl(std::vector<int> world_ranks, int rank, Topology topology, uint32_t gid,
            std::shared_ptr<RankState> rank_state, double timeout_s);
  virtual ~GroupImpl();
  GroupImpl(const GroupImpl&) = delete;
  GroupImpl& operator=(const GroupImpl&) = delete;

  virtual std::string_view backend() const = 0;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(world_ranks_.size()); }
  int world_rank(int group_rank) const { return world_ranks_[group_rank]; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  const Topology& topology() const { return topology_; }
  uint32_t gid() const { return gid_; }
  uint32_t channel_id(Channel c) const { return 2 * gid_ + static_cast<uint32_t>(c); }
  double timeout_s() const { return timeout_s_; }
  RankState& rank_state() const { return *rank_state_; }
  const std::shared_ptr<RankState>& rank_state_ptr() const { return rank_state_; }

  /// Validates, counts and posts. Never blocks.
  Request send(Channel c, int dst, int tag, const void* data, size_t bytes);
  Request recv(Channel c, int src, int tag, void* data, size_t bytes);
  /// Validates, counts and posts a whole step together; sends first in `out`. `wait_now` says
  /// the caller waits for these requests right away (after at most a local copy), so a backend
  /// may leave their progress to that wait instead of waking a progress thread.
  void post_step(Channel c, std::span<const SendSpec> sends, std::span<const RecvSpec> recvs,
                 std::vector<Request>& out, bool wait_now = false);
  /// post_step with `wait_now`, then waits for the whole step.
  void run_step(Channel c, std::span<const SendSpec> sends, std::span<const RecvSpec> recvs);

  /// Counts a step's messages as post_step would, without posting them: a backend with native
  /// collectives reports the messages of collectives.cpp's algorithm (docs/comm.md's counts).
  void count_only(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs);

  /// True for a backend whose transport cannot carry collectives.cpp's algorithms (nccl: no
  /// tags, device memory the host cannot reduce): Group's collectives then count their messages
  /// (count_only) and call post_collective instead of posting steps.
  virtual bool native_collectives() const { return false; }
  /// Posts `call`; the Request completes once its output is final (blocking forms wait at once).
  /// Called only when native_collectives().
  virtual Request post_collective(const CollectiveCall& call);

  /// From now on, records every send and receive this rank posts on this group, in posting order
  /// (not sub-groups'). For tests of the pair-order rule (group.hpp); costs a lock per post.
  void record_posts();
  /// The records so far.
  std::vector<PostRecord> posts() const;

  /// Sub-group: `members` are ranks of this group in sub-group order, `rank` this rank's index
  /// among them, `gid` the agreed group id.
  virtual std::shared_ptr<GroupImpl> make_child(std::vector<int> members, int rank,
                                                uint32_t gid) = 0;

  AtomicStats& counters() { return stats_; }
  /// Collectives started on this group (every rank counts the same ones) and, in posting order,
  /// those of this rank not yet complete: collectives.cpp derives their tags from these.
  std::mutex collectives_mu;
  uint64_t collective_seq = 0;
  std::vector<std::pair<const Request::Impl*, std::weak_ptr<Request::Impl>>> collectives_in_flight;
  /// Scratch memory for collectives (grow-only, one collective at a time per group).
  std::byte* scratch(size_t bytes);

  /// Cache for intra_group()/inter_group() and split_cached().
  std::mutex cache_mu;
  std::shared_ptr<GroupImpl> intra_cache, inter_cache;
  std::map<std::string, std::shared_ptr<GroupImpl>, std::less<>> split_cache;

 protected:
  /// World ranks and topology of a child group made of these group ranks (for make_child).
  std::pair<std::vector<int>, Topology> child_layout(const std::vector<int>& members) const {
    std::vector<int> world_ranks, nodes;
    for (int m : members) {
      world_ranks.push_back(world_rank(m));
      nodes.push_back(topology().node(m));
    }
    return {std::move(world_ranks), Topology(nodes)};
  }

  /// Backend posting. `dst`/`src` are group ranks; world_rank() maps them.
  virtual Request post_send(uint32_t channel, int dst, int tag, const void* data, size_t bytes) = 0;
  virtual Request post_recv(uint32_t channel, int src, int tag, void* data, size_t bytes) = 0;
  /// Posts a validated step; the default posts one by one (posting never blocks, so that alone
  /// cannot deadlock) and ignores `wait_now`. The MPI backend overrides it to post the step in
  /// one batch.
  virtual void post_batch(uint32_t channel, std::span<const SendSpec> sends,
                          std::span<const RecvSpec> recvs, std::vector<Request>& out,
                          bool wait_now);

 private:
  void validate(const char* what, int peer, int tag, const void* data, size_t bytes) const;
  void count(bool send, int peer, size_t bytes);
  void record(Channel c, bool send, int peer, int tag, size_t bytes);

  std::vector<int> world_ranks_;
  int rank_;
  Topology topology_;
  uint32_t gid_;
  std::shared_ptr<RankState> rank_state_;
  double timeout_s_;
  AtomicStats stats_;
  std::vector<std::byte> scratch_;
  std::atomic<bool> recording_{false};
  mutable std::mutex records_mu_;
  std::vector<PostRecord> records_;
};

}  // namespace longseq::comm
