// Sends and receives of the MPI backend: starting an operation's messages, tracking them to
// completion, and the Request a rank waits on.
//
// Messages of any size: MPI counts are int, so a transfer above the world's chunk limit
// (kMpiChunkBytes, 1 GiB) goes as floor(bytes / chunk) messages of `chunk` bytes and one final
// message shorter than `chunk` (empty when bytes is a multiple of it), all on the transfer's peer
// and tag and posted back to back, so MPI's non-overtaking rule delivers them in order and no
// other message of that tag can fall in between. The final short message is what ends a transfer:
// the receiver, knowing only its own size, tells from it where the sender's transfer ends, so a
// size mismatch is still reported with both totals and the tag's next message is still matched by
// the next receive. One MpiOp (one Request) tracks all its messages; it completes when every one
// has. Transfers below the limit are one message, exactly as before.
#include "longseq/comm/mpi/runtime.hpp"
#include "longseq/comm/mpi/world.hpp"

namespace longseq::comm::mpi_impl {

void track_op(MPI_Request req, const std::shared_ptr<MpiWorld>& world,
              const std::shared_ptr<MpiOp>& op) {
  ++op->in_flight;
  Runtime::get().add_active(
      req,
      [world, op](const MPI_Status& s) {
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING)
          op->note_error(core::cat(op->is_send ? "send" : "receive",
                                   " failed: ", mpi_error_string(s.MPI_ERROR)));
        LONGSEQ_CHECK(op->in_flight > 0);
        --op->in_flight;
        world->settle(*op);
      },
      false, !op->is_send);
}

namespace {

/// Completion handle of an MpiOp.
class MpiRequest final : public Request::Impl {
 public:
  MpiRequest(std::shared_ptr<MpiWorld> w, std::shared_ptr<MpiOp> op)
      : w_(std::move(w)), op_(std::move(op)) {}
  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;

  /// The last handle of an incomplete receive is gone (its rank is unwinding and will free the
  /// buffer): withdraw it if no message matched it yet; otherwise the message is already on its
  /// way into the buffer, so wait for it to land (at most the timeout). Dropped sends continue:
  /// MPI cannot withdraw them, and their buffers are only read.
  ~MpiRequest() override {
    if (op_->is_send) return;
    try {
      {
        std::lock_guard<std::mutex> lk(w_->mu);
        if (op_->done) return;
      }
      bool withdrawn = false;
      auto w = w_;
      auto op = op_;
      Runtime::get().run_sync([&] {
        auto it = w->probes.find({op->peer_w, op->mtag});
        if (it == w->probes.end()) return;
        auto& q = it->second;
        const auto pos = std::find(q.begin(), q.end(), op);
        // Matched already, or some of its chunks are (offset > 0) and landing in the buffer.
        if (pos == q.end() || op->offset > 0) return;
        q.erase(pos);
        if (q.empty()) w->probes.erase(it);
        withdrawn = true;
      });
      if (withdrawn) return;
      std::unique_lock<std::mutex> lk(w_->mu);
      op_->sleeper = true;
      w_->cv.wait_for(lk, to_duration(w_->timeout_s), [&] { return op_->done; });
    } catch (...) {
      // A destructor must not throw; the world is failing anyway.
    }
  }

  void wait() override { wait_in_batch(false); }

  void wait_in_batch(bool more_follow) override {
    MpiWorld& w = *w_;
    Runtime& rt = Runtime::get();
    std::unique_lock<std::mutex> lk(w.mu);
    if (finish_locked()) return;
    const Clock::time_point deadline = Clock::now() + to_duration(w.timeout_s);
    lk.unlock();
    const bool done = rt.drive(
        [&] {
          std::lock_guard<std::mutex> g(w.mu);
          return op_->done || w.failed;
        },
        more_follow, deadline);
    lk.lock();
    if (done) {
      finish_locked();
      return;
    }
    // The wait stalled (the peer is late): sleep until the progress thread completes it.
    struct Waiter {
      Runtime& rt;
      explicit Waiter(Runtime& r) : rt(r) {
        rt.waiters.fetch_add(1);
        rt.wake();
      }
      ~Waiter() { rt.waiters.fetch_sub(1); }
    } waiter(rt);
    op_->sleeper = true;
    while (!op_->done && !w.failed) {
      if (w.cv.wait_until(lk, deadline) == std::cv_status::timeout && !op_->done && !w.failed) {
        lk.unlock();
        timeout("waited for");
      }
    }
    finish_locked();
  }

  bool test() override {
    MpiWorld& w = *w_;
    std::unique_lock<std::mutex> lk(w.mu);
    if (finish_locked()) return true;
    Runtime::get().wake();
    const Clock::time_point now = Clock::now();
    if (first_test_ == Clock::time_point{}) first_test_ = now;
    if (now - first_test_ > to_duration(w.timeout_s)) {
      lk.unlock();
      timeout("tested");
    }
    return false;
  }

 private:
  /// With the world's mutex held: true when complete; throws the op's error or the failure.
  bool finish_locked() {
    if (op_->done && op_->error.empty()) return true;
    if (w_->failed) throw RankFailed(w_->failed_rank, w_->failure);
    if (op_->done) throw core::Error("comm", op_->error);
    return false;
  }
  [[noreturn]] void timeout(const char* verb) {
    const std::string msg = core::cat("[comm] timed out after ", w_->timeout_s, " s: rank ",
                                      w_->rank, " ", verb, " ", op_->describe());
    w_->fail(w_->rank, msg, true);
    std::lock_guard<std::mutex> lk(w_->mu);
    throw RankFailed(w_->failed_rank, w_->failure);
  }

  std::shared_ptr<MpiWorld> w_;
  std::shared_ptr<MpiOp> op_;
  Clock::time_point first_test_{};
};

}  // namespace

Request make_request(std::shared_ptr<MpiWorld> world, std::shared_ptr<MpiOp> op) {
  return Request(std::make_shared<MpiRequest>(std::move(world), std::move(op)));
}

void start_ops(const std::shared_ptr<MpiWorld>& world,
               const std::vector<std::shared_ptr<MpiOp>>& ops) {
  bool failed;
  {
    std::lock_guard<std::mutex> lk(world->mu);
    failed = world->failed;
  }
  if (world->retired || failed) {
    for (const auto& op : ops) world->complete(*op, "posted after the run failed or ended");
    return;
  }
  for (const auto& op : ops) {
    if (!op->is_send) {
      world->probes[{op->peer_w, op->mtag}].push_back(op);
      continue;
    }
    // Every message of the transfer, back to back (top of this file).
    static char empty;
    const char* src = static_cast<const char*>(op->sbuf);
    for (size_t off = 0;;) {
      const size_t n = message_bytes(op->bytes, off, op->chunk);
      MPI_Request req;
      const int rc = MPI_Isend(n ? src + off : &empty, static_cast<int>(n), MPI_BYTE, op->peer_w,
                               op->mtag, world->comm, &req);
      if (rc != MPI_SUCCESS) {
        op->note_error(core::cat("MPI_Isend failed: ", mpi_error_string(rc)));
        break;
      }
      g_data_messages.fetch_add(1, std::memory_order_relaxed);
      track_op(req, world, op);
      off += n;
      if (n < op->chunk) break;
    }
    op->all_out = true;
    world->settle(*op);
  }
}

}  // namespace longseq::comm::mpi_impl
