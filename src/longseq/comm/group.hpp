#pragma once
// Group: the communicator every distributed part of longseq is written against (design.md §4).
//
// A Group is a small value type (a shared pointer to a backend's GroupImpl): copying it is cheap
// and every copy names the same communicator. Backends: `local` (ranks are threads of one
// process, comm/launch.hpp run_local), `mpi` (one rank per OpenMPI process) and `nccl` (one rank
// per process and GPU; its isend/irecv take device memory, comm/nccl_backend.hpp). Sub-groups come
// from split(), intra_group() and inter_group().
//
// Legend: P = size(), r = rank(), "count" is in elements of the dtype, "bytes" in bytes. Ranks
// passed to a Group are ranks *of that group*.
//
// Point to point: isend/irecv post and return at once (they never block); the Request completes
// when the data has arrived in the receiver's memory (and, for the local backend with a link
// model, no earlier than the modelled transfer time). Messages between one (src, dst, tag) are
// matched in posting order (MPI's non-overtaking rule); the tag tells apart several transfers
// between the same pair in one step (K and V, or Q, dQ, dO, D, LSE). A receive must name the same
// byte count as its send: a mismatch fails both sides with an error naming both sizes.
// start_exchange posts all sends and receives of one step together, so no schedule can deadlock
// on the order of its operations.
//
// The pair-order rule (what replaces tags on a tagless transport: the nccl backend, whose
// isend/irecv ignore the tag). For every ordered pair of ranks (a -> b) of a group, the sends a
// posts to b, in a's posting order, must equal message for message and byte count for byte
// count the receives b posts from a, in b's posting order. Then matching by posting order alone
// gives the matching tags give, and tags carry no information. A rank that posts its steps in
// order (a schedule's step s before s+1, a collective's step before its next) satisfies it when
// both ends list each step's messages to one another in the same order and post each message at
// the same step. Every attention schedule does (tests/attention/pair_order_test.cpp), and so does
// every collective of collectives.cpp called one at a time (tests/comm/pair_order_test.cpp).
// Collectives posted together and advanced by test() do not: which one's next step a rank posts
// first depends on its calls, so they rely on their slot tags; a tagless backend therefore runs
// its own collectives, ordered by call (GroupImpl::native_collectives).
//
// Collectives: every rank of the group calls them in the same order with matching counts; the
// caller allocates the outputs. They run ring / tree algorithms over the same point-to-point
// layer, so their bytes are counted exactly like user traffic (docs/comm.md lists the counts).
// iall_gather, ireduce_scatter and iall_to_all post the same algorithms and return a Request;
// the blocking forms are post + wait. A posted collective's buffers must stay valid (and its
// input unchanged) until its wait returns. Its first step is in flight at return; a ring's later
// steps start from test() and wait() on it (a caller computing between post and wait calls test()
// now and then; a ring of 2 ranks has one step). Ranks may wait for their posted collectives in
// any order: a wait first completes the collectives posted before it on the same group (a
// blocking collective too), so no order of waits can deadlock. Up to 8 collectives may be in
// flight on one group at once (blocking ones included): the 9th throws. Every rank must wait for
// each one it posted.
//
// Memory: buffers are host memory on every backend. The local backend also takes device memory
// (a GPU buffer of a registered core::DeviceMemory backend, found per message by core::locate):
// its messages and the copy-only collectives then copy through that backend, while
// reduce_scatter and all_reduce, which add on the host, throw naming the buffer's device. The
// mpi backend refuses device memory when a message is posted; nccl moves device memory itself
// (nccl_backend.hpp).
//
// Errors: a rank that throws inside comm::run, or a wait that exceeds the group's timeout
// (default 300 s), fails the whole world: every pending and future wait on every rank throws
// RankFailed naming the first failing rank and its message, instead of hanging.
//
// Thread safety: isend/irecv/start_exchange/stats may be called from several threads of one rank
// at once. Collectives and split on one group must be called by one thread at a time per rank
// (they are ordered operations). A Request may be waited on by one thread.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "longseq/comm/topology.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/error.hpp"

namespace longseq::comm {

class GroupImpl;

enum class ReduceOp : uint8_t { sum, max };

/// Largest user tag + 1 (tags are in [0, kMaxTag)); the MPI backend packs the group id into the
/// upper bits of the MPI tag.
inline constexpr int kMaxTag = 1 << 19;

/// Thrown by every wait of every rank once one rank has failed. what() is
/// "[comm] rank R failed: <first failure's message>".
class RankFailed : public core::Error {
 public:
  RankFailed(int rank, const std::string& message);
  /// World rank of the first failure.
  int failed_rank() const { return rank_; }
  /// The failing rank's own message (without the "rank R failed" prefix).
  const std::string& reason() const { return reason_; }

 private:
  int rank_;
  std::string reason_;
};

/// Completion handle of one posted send or receive. Default-constructed: already complete.
/// Move-only in spirit but copyable (copies share the state); wait on it from one thread.
class Request {
 public:
  /// Backend state of one operation.
  class Impl {
   public:
    virtual ~Impl() = default;
    /// Blocks until complete; throws core::Error / RankFailed on failure or timeout.
    virtual void wait() = 0;
    /// wait() as one of several of wait_all(); `more_follow` says more waits come right after,
    /// so a backend may leave the other pending operations to them.
    virtual void wait_in_batch(bool more_follow) {
      (void)more_follow;
      wait();
    }
    /// Non-blocking; true once complete; throws like wait(). May do progress work (the local
    /// backend's copy) in the calling thread.
    virtual bool test() = 0;
  };

  Request() = default;
  explicit Request(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

  /// Blocks until the operation completes. Returns at once when already complete. Throws
  /// core::Error (size mismatch, peer returned) or RankFailed (world failed, timeout).
  void wait();
  /// Non-blocking completion check (throws like wait()).
  bool test();

 private:
  friend void wait_all(std::span<Request> requests);
  std::shared_ptr<Impl> impl_;
};

/// Waits for every request, in order; the first failure propagates.
void wait_all(std::span<Request> requests);

/// One send of a grouped step: `bytes` from `data` to group rank `peer` with `tag`.
struct SendSpec {
  int peer = 0;
  const void* data = nullptr;
  size_t bytes = 0;
  int tag = 0;
};
/// One receive of a grouped step: `bytes` into `data` from group rank `peer` with `tag`.
struct RecvSpec {
  int peer = 0;
  void* data = nullptr;
  size_t bytes = 0;
  int tag = 0;
};

/// Bytes and messages over one link class.
struct Traffic {
  uint64_t bytes = 0;
  uint64_t messages = 0;
};

/// Counters of one rank in one group (or, from rank_stats(), summed over every group of the rank).
/// A message is counted once at posting: by its sender under sent_*, by its receiver under
/// recv_*; intra when the peer is on the same node, inter otherwise. Sends to oneself are local
/// copies and are not counted.
struct Stats {
  int rank = 0;  ///< rank in the group the counters belong to
  int node = 0;  ///< node of that rank
  Traffic sent_intra, sent_inter, recv_intra, recv_inter;

  uint64_t bytes_sent() const { return sent_intra.bytes + sent_inter.bytes; }
  uint64_t messages_sent() const { return sent_intra.messages + sent_inter.messages; }
  uint64_t bytes_received() const { return recv_intra.bytes + recv_inter.bytes; }
  /// {"rank":0,"node":0,"sent":{"intra":{"bytes":..,"messages":..},"inter":{..}},"recv":{..}}
  nlohmann::json to_json() const;
};
/// {"ranks":[per-rank to_json...],"total":{"sent":{"intra":..,"inter":..}}} of a gather_stats().
nlohmann::json stats_to_json(std::span<const Stats> per_rank);

namespace detail {
template <class R>
using range_value = std::remove_cv_t<std::ranges::range_value_t<R>>;
template <class R>
concept ByteRange = std::ranges::contiguous_range<R> && std::ranges::sized_range<R>;
template <class R>
concept TypedRange = ByteRange<R> && requires {
  core::dtype_of<range_value<R>>();
};
template <class R>
size_t byte_size(const R& r) {
  return std::ranges::size(r) * sizeof(range_value<R>);
}
}  // namespace detail

class Group {
 public:
  /// Color for split() that leaves the rank out of every sub-group (MPI_UNDEFINED).
  static constexpr int kUndefined = -1;

  /// An invalid group (what split() with kUndefined returns). Only valid() may be called on it.
  Group() = default;
  explicit Group(std::shared_ptr<GroupImpl> impl);

  bool valid() const { return impl_ != nullptr; }
  int rank() const;
  int size() const;
  /// "local", "mpi" or "nccl".
  std::string_view backend() const;
  /// Seconds a wait may block without progress before the world fails.
  double timeout_seconds() const;

  /// Collective over this group, MPI_Comm_split semantics: ranks with the same color form a
  /// sub-group, ordered by (key, rank in this group); color kUndefined gets an invalid Group.
  Group split(int color, int key) const;
  /// split(color, key), collective on the first call for `partition` only and cached on this
  /// group afterwards (a sub-group per layer and step would cost a collective each time). Every
  /// rank must pass the same `partition` name for the same split, and a name must always mean
  /// the same colors and keys (e.g. "team:4:teams").
  Group split_cached(std::string_view partition, int color, int key) const;

  // ---- topology ---------------------------------------------------------------------------
  const Topology& topology() const;
  /// Node of this rank.
  int node() const { return topology().node(rank()); }
  /// Ranks of this group on this rank's node (split by node, ordered by rank). Collective on the
  /// first call, cached afterwards (every rank must make that first call).
  Group intra_group() const;
  /// Ranks of this group with the same local rank as this one, one per node, ordered by node
  /// (the outer ring of a double ring). Collective on the first call, cached afterwards.
  Group inter_group() const;
  /// (rank + k) mod P and (rank - k) mod P.
  int ring_next(int k = 1) const;
  int ring_prev(int k = 1) const;

  // ---- point to point ---------------------------------------------------------------------
  /// Posts a send of `bytes` from `data` (which must stay valid and unchanged until the request
  /// completes) to group rank `dst`. Never blocks. tag in [0, kMaxTag).
  Request isend(int dst, const void* data, size_t bytes, int tag = 0) const;
  /// Posts a receive of exactly `bytes` into `data` from group rank `src`. Never blocks.
  Request irecv(int src, void* data, size_t bytes, int tag = 0) const;
  /// Typed forms: any contiguous range (std::vector, std::span, std::array).
  template <detail::ByteRange R>
  Request isend(int dst, const R& data, int tag = 0) const {
    return isend(dst, std::ranges::data(data), detail::byte_size(data), tag);
  }
  template <detail::ByteRange R>
  Request irecv(int src, R&& data, int tag = 0) const {
    return irecv(src, static_cast<void*>(std::ranges::data(data)), detail::byte_size(data), tag);
  }
  /// isend(...).wait() and irecv(...).wait().
  void send(int dst, const void* data, size_t bytes, int tag = 0) const;
  void recv(int src, void* data, size_t bytes, int tag = 0) const;

  /// Grouped step: posts every send and receive before returning (the MPI backend hands them to
  /// its progress thread in one batch). Returns the requests, sends first, in the given order.
  std::vector<Request> start_exchange(std::span<const SendSpec> sends,
                                      std::span<const RecvSpec> recvs) const;
  /// start_exchange + wait_all.
  void exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs) const;

  // ---- collectives (every rank calls them in the same order) ------------------------------
  /// out[P * count]: block q holds rank q's `in[count]`. `in` may be out + r*count (in place).
  /// Ring: P-1 messages of count elements per rank.
  void all_gather(const void* in, void* out, size_t count, core::DType dt) const;
  /// in[P * count]; out[count] = op over ranks of block r of their `in`. Ring: P-1 messages.
  void reduce_scatter(const void* in, void* out, size_t count, core::DType dt,
                      ReduceOp op = ReduceOp::sum) const;
  /// out[count] = op over ranks of in[count]; in == out allowed. Ring reduce-scatter + ring
  /// all-gather over P near-equal blocks: 2(P-1) messages (empty blocks are not sent).
  void all_reduce(const void* in, void* out, size_t count, core::DType dt,
                  ReduceOp op = ReduceOp::sum) const;
  /// in[P * count], out[P * count]: block q of out on rank r is block r of rank q's in. in and
  /// out must not overlap. Posted as one grouped step of P-1 sends and P-1 receives.
  void all_to_all(const void* in, void* out, size_t count, core::DType dt) const;
  /// Posted forms of all_gather, reduce_scatter and all_to_all (same arguments, same results,
  /// same messages): the Request completes when the output is final. A group of size 1 or a
  /// count of 0 completes at once.
  Request iall_gather(const void* in, void* out, size_t count, core::DType dt) const;
  Request ireduce_scatter(const void* in, void* out, size_t count, core::DType dt,
                          ReduceOp op = ReduceOp::sum) const;
  Request iall_to_all(const void* in, void* out, size_t count, core::DType dt) const;
  /// Variable counts (elements): send_counts[q] elements at in + send_displs[q] go to rank q;
  /// recv_counts[q] elements from rank q land at out + recv_displs[q]. Every pair exchanges a
  /// message (possibly empty), so a count disagreeing with the peer's is reported with both.
  void all_to_all_v(const void* in, std::span<const size_t> send_counts,
                    std::span<const size_t> send_displs, void* out,
                    std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                    core::DType dt) const;
  /// data[count] of `root` copied to every rank. Binomial tree: P-1 messages in all.
  void broadcast(void* data, size_t count, core::DType dt, int root) const;
  /// Returns once every rank has entered. Dissemination: ceil(log2 P) empty messages per rank.
  void barrier() const;

  /// Typed forms (element type f32, bf16, f64, i32, i64, u8) with size checks.
  template <detail::TypedRange In, detail::TypedRange Out>
  void all_gather(const In& in, Out&& out) const {
    check_typed<In, Out>("all_gather", std::ranges::size(in) * size(), std::ranges::size(out));
    all_gather(std::ranges::data(in), std::ranges::data(out), std::ranges::size(in),
               core::dtype_of<detail::range_value<In>>());
  }
  template <detail::TypedRange In, detail::TypedRange Out>
  void reduce_scatter(const In& in, Out&& out, ReduceOp op = ReduceOp::sum) const {
    check_typed<In, Out>("reduce_scatter", std::ranges::size(out) * size(), std::ranges::size(in));
    reduce_scatter(std::ranges::data(in), std::ranges::data(out), std::ranges::size(out),
                   core::dtype_of<detail::range_value<In>>(), op);
  }
  template <detail::TypedRange In, detail::TypedRange Out>
  void all_reduce(const In& in, Out&& out, ReduceOp op = ReduceOp::sum) const {
    check_typed<In, Out>("all_reduce", std::ranges::size(in), std::ranges::size(out));
    all_reduce(std::ranges::data(in), std::ranges::data(out), std::ranges::size(in),
               core::dtype_of<detail::range_value<In>>(), op);
  }
  /// In place: data = op over ranks of data.
  template <detail::TypedRange R>
  void all_reduce(R&& data, ReduceOp op = ReduceOp::sum) const {
    all_reduce(std::ranges::data(data), std::ranges::data(data), std::ranges::size(data),
               core::dtype_of<detail::range_value<R>>(), op);
  }
  template <detail::TypedRange In, detail::TypedRange Out>
  void all_to_all(const In& in, Out&& out) const {
    check_typed<In, Out>("all_to_all", std::ranges::size(in), std::ranges::size(out));
    core::require(std::ranges::size(in) % size() == 0, "comm", "all_to_all of ",
                  std::ranges::size(in), " elements over ", size(), " ranks");
    all_to_all(std::ranges::data(in), std::ranges::data(out), std::ranges::size(in) / size(),
               core::dtype_of<detail::range_value<In>>());
  }
  template <detail::TypedRange R>
  void broadcast(R&& data, int root) const {
    broadcast(std::ranges::data(data), std::ranges::size(data),
              core::dtype_of<detail::range_value<R>>(), root);
  }

  // ---- byte accounting --------------------------------------------------------------------
  /// This rank's counters in this group (traffic of sub-groups is not included).
  Stats stats() const;
  /// Zeroes this rank's counters of this group (not collective).
  void reset_stats() const;
  /// This rank's counters summed over every group of its world (world and all sub-groups) since
  /// the world started or reset_rank_stats(); `rank`/`node` are the world rank and node.
  Stats rank_stats() const;
  void reset_rank_stats() const;
  /// Collective: every rank's stats() of this group, indexed by rank (gathering does not count).
  std::vector<Stats> gather_stats() const;

  /// The backend object (for backends and tests).
  GroupImpl& impl() const;

 private:
  template <class In, class Out>
  static void check_typed(const char* what, size_t expected, size_t got) {
    static_assert(std::is_same_v<detail::range_value<In>, detail::range_value<Out>>,
                  "input and output element types must match");
    core::require(expected == got, "comm", what, ": output/input of ", got, " elements, expected ",
                  expected);
  }

  // The one implementation of each collective: posted forms pass wait_now = false, blocking
  // ones true (the caller waits at once, so a backend may leave progress to that wait).
  Request post_all_gather(const void* in, void* out, size_t count, core::DType dt,
                          bool wait_now) const;
  Request post_reduce_scatter(const void* in, void* out, size_t count, core::DType dt, ReduceOp op,
                              bool wait_now) const;
  Request post_all_to_all(const void* in, void* out, size_t count, core::DType dt,
                          bool wait_now) const;

  std::shared_ptr<GroupImpl> impl_;
};

}  // namespace longseq::comm
