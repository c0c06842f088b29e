#pragma once
// One run()'s world of the MPI backend and the operations posted on it (internal to comm/mpi/;
// runtime.hpp lists the rooms).
//
// Addressing: every run() dups MPI_COMM_WORLD; groups are not MPI communicators but (world comm,
// group id) pairs: the MPI tag is (channel << 19) | tag with channel = 2*gid + {0 user, 1
// collective} (< 4096). Sub-groups therefore cost no blocking MPI collective, and split runs over
// the same non-blocking machinery as everything else. Channel 0 carries control messages: "done"
// (a rank's function returned) and "fail" (first failure, broadcast to every rank).
#include <mpi.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "longseq/comm/group_impl.hpp"
#include "longseq/comm/mpi/runtime.hpp"
#include "longseq/comm/topology.hpp"

namespace longseq::comm::mpi_impl {

/// Bytes of the message at `offset` of a transfer of `total` bytes split at `chunk` (request.cpp,
/// "Messages of any size"): a full chunk, or the shorter final message.
inline size_t message_bytes(size_t total, size_t offset, size_t chunk) {
  return std::min(total - offset, chunk);
}

/// One posted send or receive. Fields before the chunk bookkeeping are immutable after posting.
struct MpiOp {
  bool is_send = false;
  int me_g = 0, me_w = 0, peer_g = 0, peer_w = 0, tag = 0, mtag = 0;
  const void* sbuf = nullptr;
  void* rbuf = nullptr;
  size_t bytes = 0;
  size_t chunk = kMpiChunkBytes;  // the world's chunk limit
  // Chunk bookkeeping (baton holder only). An op completes once all_out holds and nothing is
  // in flight, with first_error if any message failed.
  size_t offset = 0;        // receive: bytes of the sender's messages matched so far
  bool mismatch = false;    // receive: a matched message had another size than expected
  bool all_out = false;     // every message posted (send) or the final one matched (receive)
  int in_flight = 0;        // MPI requests on the caller's buffer not yet complete
  bool settled = false;     // complete() was called
  std::string first_error;  // the first failure among the messages
  void note_error(std::string e) {
    if (first_error.empty()) first_error = std::move(e);
  }

  bool done = false;  // guarded by the world's mutex
  /// A thread sleeps on the world's condition variable for this op (guarded by the mutex).
  bool sleeper = false;
  std::string error;  // guarded by the world's mutex

  std::string describe() const {
    return is_send ? core::cat("a send of ", bytes, " bytes to ", rank_name(peer_g, peer_w),
                               " (tag ", tag, ")")
                   : core::cat("a receive of ", bytes, " bytes from ", rank_name(peer_g, peer_w),
                               " (tag ", tag, ")");
  }
};

/// One run()'s world: a dup of MPI_COMM_WORLD, its failure state and its pending receives.
class MpiWorld : public std::enable_shared_from_this<MpiWorld> {
 public:
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  Topology topology;
  double timeout_s = 300.0;
  size_t chunk_bytes = kMpiChunkBytes;  // the same on every rank (run_mpi_world checks)

  std::mutex mu;
  std::condition_variable cv;
  bool failed = false;
  int failed_rank = -1;
  std::string failure;
  std::vector<char> done_from;
  int done_count = 0;

  // Baton holder only: receives not yet matched, per (source world rank, MPI tag), in
  // posting order (MPI's non-overtaking rule makes the first probe match the first receive).
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<MpiOp>>> probes;
  bool retired = false;
  std::vector<char> ctrl_buf = std::vector<char>(kCtrlBytes);
  MPI_Request ctrl_req = MPI_REQUEST_NULL;  // a copy of the handle, for MPI_Cancel at retirement

  /// Records the first failure; with `broadcast`, tells every other rank.
  void fail(int who, const std::string& message, bool broadcast);

  /// Progress thread: unmatched receives will never be matched; complete them as failed. A
  /// receive with messages already landing in its buffer completes once they have landed.
  void cancel_probes();

  /// Baton holder: completes `op` once all its messages are out and none is in flight.
  void settle(MpiOp& op);

  /// Wakes the world's sleepers only when one sleeps for this op. wait_all() sleeps on one
  /// request of a step while the others complete; waking it for each of them (as notify_all on
  /// every completion did) put the user thread on a core for nothing just when the progress
  /// thread needed it for the rest of the step (a few us per step at 1 MiB on 2 cores).
  void complete(MpiOp& op, std::string error);

  /// Progress thread: sends a control message to every other rank.
  void send_ctrl(int32_t kind, const std::string& text);

  /// Progress thread: (re)posts the control receive.
  void post_ctrl_recv();

  void on_ctrl(const MPI_Status& st);

 private:
  /// Progress-thread work from either side: run it now when on the progress thread.
  static void drop_or_submit(const std::function<void()>& fn);
};

// ---- request.cpp ----------------------------------------------------------------------------

/// With the baton: tracks one started message of `op`; the op completes when its last message
/// does ("send failed: ..." / "receive failed: ..." on an MPI error).
void track_op(MPI_Request req, const std::shared_ptr<MpiWorld>& world,
              const std::shared_ptr<MpiOp>& op);
/// With the baton: starts posted operations (sends go to MPI_Isend, receives wait for a probe).
void start_ops(const std::shared_ptr<MpiWorld>& world,
               const std::vector<std::shared_ptr<MpiOp>>& ops);
/// The Request that completes with `op` (its wait drives MPI on the calling thread).
Request make_request(std::shared_ptr<MpiWorld> world, std::shared_ptr<MpiOp> op);

// ---- group.cpp ------------------------------------------------------------------------------

/// The group of `world_ranks` of `world` (group id `gid`; the world group has gid 1).
std::shared_ptr<GroupImpl> make_group(std::shared_ptr<MpiWorld> world, std::vector<int> world_ranks,
                                      int rank, Topology topology, uint32_t gid,
                                      std::shared_ptr<RankState> rs);

}  // namespace longseq::comm::mpi_impl
