// The progress engine of the MPI backend: the progress thread's loop and the polling rounds that
// it, or a user thread driving its own wait, runs with the baton (runtime.hpp tells the design).
//
// Receives go through MPI_Improbe + MPI_Imrecv: the matched message's size is known before the
// data moves, so a size mismatch is reported with both sizes (plain MPI_Irecv would only say
// MPI_ERR_TRUNCATE) and the message is still drained.
#include "longseq/comm/mpi/runtime.hpp"
#include "longseq/comm/mpi/world.hpp"

namespace longseq::comm::mpi_impl {

void Runtime::loop() {
  int idle = 0;
  Clock::time_point last_progress = Clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(qmu_);
      if (stop_ && queue_.empty()) break;
      if (queue_.empty() && drivers_.load() > 0) {
        // A user thread polls MPI for its own wait; polling beside it would only take its core.
        // It wakes this thread when it stops with operations still pending.
        qcv_.wait_for(lk, std::chrono::milliseconds(2));
        if (queue_.empty() && drivers_.load() > 0) continue;
      } else if (queue_.empty() && idle > 0) {
        bool pending;
        {
          lk.unlock();
          std::lock_guard<std::mutex> b(baton_);
          pending = user_pending();
          lk.lock();
        }
        if (!pending && Clock::now() - last_progress >= kLinger) {
          // Only control receives: nothing is in flight, a rare check is enough.
          qcv_.wait_for(lk, std::chrono::milliseconds(2));
        } else if (!pending) {
          // Just finished some traffic: the next step's command usually follows within
          // microseconds (a loop of exchanges posted from the progress thread's queue). Picking
          // it up while still polling saves the ~3 us futex wake-up of submit(); after kLinger
          // the thread sleeps as before.
          lk.unlock();
          std::this_thread::yield();
          lk.lock();
        } else if (waiters.load() > 0 ? idle > 20000 : idle > 64) {
          // Nobody is waiting (the rank computes): back off 10 us, 20 us, ... 200 us.
          const int shift = std::min(idle / 64, 5);
          qcv_.wait_for(lk, std::chrono::microseconds(std::min(10 << shift, 200)));
        } else {
          lk.unlock();
          std::this_thread::yield();
          lk.lock();
        }
      }
      if (stop_ && queue_.empty()) break;
    }
    bool progressed;
    {
      Baton b(baton_);
      progressed = progress_round();
    }
    idle = progressed ? 0 : idle + 1;
    if (progressed) last_progress = Clock::now();
  }
}

bool Runtime::run_commands() {
  std::vector<std::function<void()>> cmds;
  {
    std::lock_guard<std::mutex> lk(qmu_);
    cmds.swap(queue_);
  }
  for (auto& c : cmds) c();
  return !cmds.empty();
}

bool Runtime::progress_round() {
  bool progressed = run_commands();
  progressed |= poll_probes();
  progressed |= test_active();
  return progressed;
}

bool Runtime::user_pending() const {
  return std::any_of(active_.begin(), active_.end(),
                     [](const Active& a) { return !a.background; }) ||
         std::any_of(incoming_.begin(), incoming_.end(),
                     [](const Active& a) { return !a.background; }) ||
         std::any_of(worlds_.begin(), worlds_.end(),
                     [](const auto& w) { return !w->probes.empty(); });
}

bool Runtime::poll_probes() {
  bool any = false;
  for (const auto& wp : worlds_) {
    MpiWorld& w = *wp;
    for (auto it = w.probes.begin(); it != w.probes.end();) {
      auto& q = it->second;
      while (!q.empty()) {
        int flag = 0;
        MPI_Message msg;
        MPI_Status st;
        const int rc = MPI_Improbe(it->first.first, it->first.second, w.comm, &flag, &msg, &st);
        std::shared_ptr<MpiOp> op = q.front();
        if (rc != MPI_SUCCESS) {
          q.pop_front();
          op->note_error(core::cat("MPI_Improbe failed: ", mpi_error_string(rc)));
          op->all_out = true;
          w.settle(*op);
          any = true;
          continue;
        }
        if (!flag) break;
        any = true;
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        const auto got = static_cast<size_t>(count);
        MPI_Request req;
        // The op stays at the front of its queue until the sender's final (short) message is
        // matched: the tag's next receive must not take a chunk of this transfer.
        if (!op->mismatch && got == message_bytes(op->bytes, op->offset, op->chunk)) {
          static char empty;
          char* dst = static_cast<char*>(op->rbuf) + op->offset;
          const int rc2 = MPI_Imrecv(got ? dst : &empty, count, MPI_BYTE, &msg, &req);
          if (rc2 == MPI_SUCCESS) {
            track_op(req, wp, op);
          } else {
            op->note_error(core::cat("MPI_Imrecv failed: ", mpi_error_string(rc2)));
          }
        } else {
          // Drain the message so the sender completes; the receive fails with both sizes once
          // the sender's final message tells its total.
          op->mismatch = true;
          auto sink = std::make_shared<std::vector<char>>(std::max(got, size_t{1}));
          if (MPI_Imrecv(sink->data(), count, MPI_BYTE, &msg, &req) == MPI_SUCCESS)
            add_active(
                req, [sink](const MPI_Status&) {}, false, true);
        }
        op->offset += got;
        if (got < op->chunk) {
          q.pop_front();
          if (op->mismatch)
            op->note_error(core::cat("message size mismatch: ", rank_name(op->peer_g, op->peer_w),
                                     " sends ", op->offset, " bytes to ",
                                     rank_name(op->me_g, op->me_w), " (tag ", op->tag,
                                     "), which posted a receive of ", op->bytes, " bytes"));
          op->all_out = true;
          w.settle(*op);
        }
      }
      it = q.empty() ? w.probes.erase(it) : std::next(it);
    }
  }
  return any;
}

bool Runtime::test_active() {
  for (Active& a : incoming_) active_.push_back(std::move(a));
  incoming_.clear();
  if (active_.empty()) return false;
  reqs_.resize(active_.size());
  for (size_t i = 0; i < active_.size(); ++i) reqs_[i] = active_[i].req;
  std::vector<int> idx(active_.size());
  std::vector<MPI_Status> st(active_.size());
  int out = 0;
  MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &out, idx.data(), st.data());
  if (out == MPI_UNDEFINED || out <= 0) return false;
  std::vector<std::function<void(const MPI_Status&)>> done;
  std::vector<MPI_Status> done_st;
  for (int k = 0; k < out; ++k) {
    const auto i = static_cast<size_t>(idx[static_cast<size_t>(k)]);
    done.push_back(std::move(active_[i].on_done));
    done_st.push_back(st[static_cast<size_t>(k)]);
    active_[i].req = MPI_REQUEST_NULL;
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](const Active& a) { return a.req == MPI_REQUEST_NULL; }),
                active_.end());
  for (size_t k = 0; k < done.size(); ++k) done[k](done_st[k]);
  return true;
}

}  // namespace longseq::comm::mpi_impl
