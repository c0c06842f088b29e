// The MPI backend (OpenMPI): one rank per process. Built when LONGSEQ_WITH_MPI is on; otherwise
// CMake compiles mpi_stub.cpp in its place.
//
// Progress design (docs/comm.md §progress). OpenMPI 4.1 has no asynchronous progress thread of
// its own ("OMPI progress: no" in ompi_info): a rendezvous transfer only moves while some thread
// is inside an MPI call. A rank that posts its sends and then computes would therefore see no
// overlap. So every process runs a progress thread that polls MPI while operations are pending:
// it spins (yielding the core) while a user thread sleeps in wait(), and backs off to sleeps of
// up to 200 us while the rank computes, so polling costs little compute time. After the last
// transfer it keeps polling for kLinger (50 us) before it sleeps.
//
// MPI calls and the progress state (pending probes and requests) belong to whoever holds the
// baton, a mutex: the progress thread takes it for each polling round, and user threads take it
// to post their operations directly and to drive their own waits. One thread at a time is in MPI,
// so MPI_THREAD_SERIALIZED is enough; we ask for MPI_THREAD_MULTIPLE and accept SERIALIZED up.
// Why user threads call MPI themselves: handing each step to the progress thread and sleeping
// until it completes cost 7-9 us per step that blocking MPI calls do not pay (~2 us before the
// progress thread picked the step up, ~4 us to wake the sleeping user thread), 15% of a 1 MiB
// all_gather through shared memory. A waiting user thread instead polls MPI itself for as long as
// that makes progress (kDriveIdle), with the progress thread asleep, so each rank has one thread
// on a core as with raw MPI; only a wait that stalls longer falls back to sleeping while the
// progress thread polls. A user thread that spun without making the MPI calls (tried earlier)
// was slower: it competed for the core with the progress thread doing the transfer.
//
// Receives go through MPI_Improbe + MPI_Imrecv: the matched message's size is known before the
// data moves, so a size mismatch is reported with both sizes (plain MPI_Irecv would only say
// MPI_ERR_TRUNCATE) and the message is still drained.
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
//
// Addressing: every run() dups MPI_COMM_WORLD; groups are not MPI communicators but (world comm,
// group id) pairs: the MPI tag is (channel << 19) | tag with channel = 2*gid + {0 user, 1
// collective} (< 4096). Sub-groups therefore cost no blocking MPI collective, and split runs over
// the same non-blocking machinery as everything else. Channel 0 carries control messages: "done"
// (a rank's function returned) and "fail" (first failure, broadcast to every rank).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>

#include "longseq/comm/group_impl.hpp"
#include "longseq/comm/mpi_backend.hpp"

namespace longseq::comm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTagBits = 19;
static_assert(kMaxTag == 1 << kTagBits);
constexpr uint32_t kMaxChannel = 1u << (31 - kTagBits);
constexpr int kCtrlTag = 0;  // channel 0, tag 0
constexpr size_t kCtrlBytes = 4096;
enum CtrlKind : int32_t { kDone = 1, kFail = 2 };
/// How long the progress thread keeps polling without sleeping after its last progress (see
/// Runtime::loop).
constexpr auto kLinger = std::chrono::microseconds(50);
/// How long a user thread in wait() keeps driving MPI without any progress before it sleeps and
/// leaves polling to the progress thread: several times the gap between the events of one
/// shared-memory step (the peer's single-copy read of a 1 MiB message takes ~40 us), short
/// enough that a rank waiting for a peer that still computes gives up its core quickly.
constexpr auto kDriveIdle = std::chrono::microseconds(200);

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, buf, &len);
  return std::string(buf, static_cast<size_t>(len));
}

void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) core::fail("comm", what, " failed: ", mpi_error_string(rc));
}

Clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string rank_name(int group_rank, int world_rank) {
  return group_rank == world_rank
             ? core::cat("rank ", group_rank)
             : core::cat("rank ", group_rank, " (world rank ", world_rank, ")");
}

/// Process-wide settings and counters of mpi_backend.hpp.
std::atomic<size_t> g_chunk_bytes{kMpiChunkBytes};
std::atomic<uint64_t> g_data_messages{0};

/// Bytes of the message at `offset` of a transfer of `total` bytes split at `chunk` (see the top
/// of the file): a full chunk, or the shorter final message.
size_t message_bytes(size_t total, size_t offset, size_t chunk) {
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

class MpiWorld;

/// Process-wide MPI state and the progress thread.
class Runtime {
 public:
  static Runtime& get() {
    static Runtime rt;
    return rt;
  }
  static std::atomic<bool>& initialized_flag() {
    static std::atomic<bool> flag{false};
    return flag;
  }

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Runs `cmd` on the progress thread (in submission order).
  void submit(std::function<void()> cmd) {
    {
      std::lock_guard<std::mutex> lk(qmu_);
      queue_.push_back(std::move(cmd));
    }
    qcv_.notify_one();
  }
  /// submit() and wait for it; rethrows what `cmd` threw.
  void run_sync(const std::function<void()>& cmd) {
    std::mutex m;
    std::condition_variable cv;
    bool finished = false;
    std::exception_ptr err;
    submit([&] {
      try {
        cmd();
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lk(m);
      finished = true;
      cv.notify_one();
    });
    std::unique_lock<std::mutex> lk(m);
    cv.wait(lk, [&] { return finished; });
    if (err) std::rethrow_exception(err);
  }
  /// Wakes the progress thread. Taking qmu_ first orders the wake-up after the thread's check
  /// of pending work (made under qmu_) or before it: an operation posted directly, between its
  /// check and its sleep, would otherwise wait up to 2 ms for its next round.
  void wake() {
    { std::lock_guard<std::mutex> lk(qmu_); }
    qcv_.notify_one();
  }

  // ---- progress-thread side (call only from commands and completion handlers) --------------
  /// Tracks `req`; `on_done(status)` runs on the progress thread when it completes.
  /// `background` requests (control receives) do not keep the thread polling fast.
  void add_active(MPI_Request req, std::function<void(const MPI_Status&)> on_done, bool background,
                  bool is_recv) {
    incoming_.push_back({req, std::move(on_done), background, is_recv});
  }
  void add_world(const std::shared_ptr<MpiWorld>& w) { worlds_.push_back(w); }
  /// Stops matching for `w` and cancels its control receive. A world that ended well frees its
  /// communicator. A failed world keeps it until MPI_Finalize: messages of the failed run may
  /// still be in flight (sends nobody will receive, "fail" notices), and were the communicator
  /// freed, the next run's MPI_Comm_dup could reuse its context id, so such a late message would
  /// be matched in the new world -- and, taking the first place in ob1's per-peer sequence,
  /// leave that world's real message of the same peer unmatched forever (the "4-byte message
  /// never matched" flake of docs/comm.md).
  void retire_world(const std::shared_ptr<MpiWorld>& w, bool failed);
  void remove_world(const MpiWorld* w) {
    worlds_.erase(
        std::remove_if(worlds_.begin(), worlds_.end(), [&](const auto& p) { return p.get() == w; }),
        worlds_.end());
  }

  /// Number of user threads blocked in wait(): while positive, poll without sleeping.
  std::atomic<int> waiters{0};

  /// Runs `fn` holding the baton (on this thread) when the baton is free right now, after the
  /// commands queued before it (so a thread's operations start in the order it posted them);
  /// false when another thread holds the baton.
  template <class F>
  bool try_with_baton(F&& fn) {
    Baton b(baton_, std::try_to_lock);
    if (!b.held()) return false;
    run_commands();
    fn();
    return true;
  }

  /// A user thread's wait: polls MPI on this thread until `done()`, until kDriveIdle passes
  /// without progress or until `deadline` (other traffic may progress forever). True when
  /// `done()` held; the progress thread sleeps meanwhile and is woken at the end when operations
  /// are still pending, unless `more_follow` (the caller waits again right away: wait_all's next
  /// request).
  template <class Pred>
  bool drive(Pred&& done, bool more_follow, Clock::time_point deadline) {
    drivers_.fetch_add(1);
    bool pending = true;
    Clock::time_point last = Clock::now();
    bool ok = false;
    // A round can throw (a command's MPI error): the count must still drop and the progress
    // thread wake, or it would sleep for good.
    struct Leave {
      Runtime& rt;
      const bool& ok;
      const bool& pending;
      bool more_follow;
      ~Leave() {
        rt.drivers_.fetch_sub(1);
        // Operations still pending (a stalled wait, or another request of this step): the
        // progress thread polls for them again.
        if (!ok || (pending && !more_follow)) rt.wake();
      }
    } leave{*this, ok, pending, more_follow};
    for (;;) {
      bool progressed;
      {
        Baton b(baton_);
        progressed = progress_round();
        pending = user_pending();
      }
      if (done()) {
        ok = true;
        break;
      }
      const Clock::time_point now = Clock::now();
      if (now >= deadline) break;
      if (progressed) {
        last = now;
      } else if (now - last > kDriveIdle) {
        break;
      } else {
        std::this_thread::yield();
      }
    }
    return ok;
  }

 private:
  struct Active {
    MPI_Request req;
    std::function<void(const MPI_Status&)> on_done;
    bool background;
    bool is_recv;
  };

  Runtime() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                "MPI_Init_thread");
      // One progress thread makes every MPI call after init: SERIALIZED is enough.
      core::require(provided >= MPI_THREAD_SERIALIZED, "comm", "MPI provides thread level ",
                    provided, "; the progress thread needs MPI_THREAD_SERIALIZED or better");
      owns_mpi_ = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    void* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    core::require(flag && *static_cast<int*>(ub) >= INT_MAX, "comm", "MPI_TAG_UB is ",
                  flag ? *static_cast<int*>(ub) : 0,
                  "; longseq packs group ids into tags and "
                  "needs 2^31-1 (OpenMPI's value)");
    thread_ = std::thread([this] { loop(); });
    initialized_flag() = true;
  }

  ~Runtime() {
    {
      std::lock_guard<std::mutex> lk(qmu_);
      stop_ = true;
    }
    qcv_.notify_one();
    thread_.join();
    // Receives left by a failed world (control receives, unmatched user receives) are cancelled
    // so MPI_Finalize does not wait for them; sends left behind are the peers' to drain.
    for (Active& a : incoming_) active_.push_back(std::move(a));
    for (Active& a : active_)
      if (a.is_recv && a.req != MPI_REQUEST_NULL) {
        MPI_Cancel(&a.req);
        MPI_Wait(&a.req, MPI_STATUS_IGNORE);
      }
    if (owns_mpi_) MPI_Finalize();
  }

  /// Holds the baton for a scope and marks this thread as its holder meanwhile
  /// (MpiWorld::drop_or_submit runs work inline then).
  class Baton {
   public:
    explicit Baton(std::mutex& m) : lk_(m) { holds_baton() = true; }
    Baton(std::mutex& m, std::try_to_lock_t t) : lk_(m, t) { holds_baton() = lk_.owns_lock(); }
    ~Baton() { holds_baton() = false; }
    Baton(const Baton&) = delete;
    Baton& operator=(const Baton&) = delete;
    bool held() const { return lk_.owns_lock(); }

   private:
    std::unique_lock<std::mutex> lk_;
  };

 public:
  static bool& holds_baton() {
    static thread_local bool flag = false;
    return flag;
  }

 private:
  void loop();
  /// With the baton: runs the queued commands, matches probes, tests requests. True on progress.
  bool progress_round();
  /// With the baton: runs the queued commands in submission order. True when there were any.
  bool run_commands();
  /// With the baton: user operations (not control receives) are still in flight.
  bool user_pending() const;
  bool poll_probes();
  bool test_active();

  int rank_ = 0, size_ = 1;
  bool owns_mpi_ = false;
  std::mutex baton_;
  /// User threads in drive(): while positive the progress thread sleeps.
  std::atomic<int> drivers_{0};
  std::thread thread_;
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::vector<std::function<void()>> queue_;
  bool stop_ = false;
  // Baton holder only:
  std::vector<Active> active_, incoming_;
  std::vector<MPI_Request> reqs_;
  std::vector<std::shared_ptr<MpiWorld>> worlds_;
  std::vector<MPI_Comm> failed_comms_;  // communicators of failed worlds, kept until finalize
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
  void fail(int who, const std::string& message, bool broadcast) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (failed) return;
      failed = true;
      failed_rank = who;
      failure = message;
    }
    cv.notify_all();
    auto self = shared_from_this();
    auto drop = [self, broadcast] {
      self->cancel_probes();  // their buffers may be gone once the waits have thrown
      if (broadcast) self->send_ctrl(kFail, self->failure);
    };
    drop_or_submit(drop);
  }

  /// Progress thread: unmatched receives will never be matched; complete them as failed. A
  /// receive with messages already landing in its buffer completes once they have landed.
  void cancel_probes() {
    for (auto& [key, q] : probes)
      for (auto& op : q) {
        op->note_error("cancelled: the run failed");
        op->all_out = true;
        settle(*op);
      }
    probes.clear();
  }

  /// Baton holder: completes `op` once all its messages are out and none is in flight.
  void settle(MpiOp& op) {
    if (op.settled || !op.all_out || op.in_flight > 0) return;
    op.settled = true;
    complete(op, std::move(op.first_error));
  }

  /// Wakes the world's sleepers only when one sleeps for this op. wait_all() sleeps on one
  /// request of a step while the others complete; waking it for each of them (as notify_all on
  /// every completion did) put the user thread on a core for nothing just when the progress
  /// thread needed it for the rest of the step (a few us per step at 1 MiB on 2 cores).
  void complete(MpiOp& op, std::string error) {
    bool wake;
    {
      std::lock_guard<std::mutex> lk(mu);
      wake = op.sleeper;
      op.done = true;
      op.error = std::move(error);
    }
    if (wake) cv.notify_all();
  }

  /// Progress thread: sends a control message to every other rank.
  void send_ctrl(int32_t kind, const std::string& text) {
    auto buf = std::make_shared<std::vector<char>>(8 + std::min(text.size(), kCtrlBytes - 8));
    const int32_t head[2] = {kind, rank};
    std::memcpy(buf->data(), head, 8);
    std::memcpy(buf->data() + 8, text.data(), buf->size() - 8);
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      MPI_Request req;
      if (MPI_Isend(buf->data(), static_cast<int>(buf->size()), MPI_BYTE, p, kCtrlTag, comm,
                    &req) == MPI_SUCCESS)
        Runtime::get().add_active(
            req, [buf](const MPI_Status&) {}, false, false);
    }
  }

  /// Progress thread: (re)posts the control receive.
  void post_ctrl_recv() {
    MPI_Request req;
    mpi_check(MPI_Irecv(ctrl_buf.data(), static_cast<int>(kCtrlBytes), MPI_BYTE, MPI_ANY_SOURCE,
                        kCtrlTag, comm, &req),
              "MPI_Irecv (control)");
    ctrl_req = req;
    auto self = shared_from_this();
    Runtime::get().add_active(
        req, [self](const MPI_Status& st) { self->on_ctrl(st); }, true, true);
  }

  void on_ctrl(const MPI_Status& st) {
    int cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);
    if (cancelled || retired) return;
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    if (count >= 8) {
      int32_t head[2];
      std::memcpy(head, ctrl_buf.data(), 8);
      const std::string text(ctrl_buf.data() + 8, static_cast<size_t>(count - 8));
      if (head[0] == kDone) {
        {
          std::lock_guard<std::mutex> lk(mu);
          if (!done_from[static_cast<size_t>(head[1])]) {
            done_from[static_cast<size_t>(head[1])] = 1;
            ++done_count;
          }
        }
        cv.notify_all();
      } else if (head[0] == kFail) {
        fail(head[1], text, false);
      }
    }
    post_ctrl_recv();
  }

 private:
  /// Progress-thread work from either side: run it now when on the progress thread.
  static void drop_or_submit(const std::function<void()>& fn);
};

/// With the baton: tracks one started message of `op`; the op completes when its last message
/// does ("send failed: ..." / "receive failed: ..." on an MPI error).
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

void Runtime::retire_world(const std::shared_ptr<MpiWorld>& w, bool failed) {
  if (w->retired) return;
  w->retired = true;
  w->cancel_probes();
  remove_world(w.get());
  if (w->ctrl_req != MPI_REQUEST_NULL) {
    MPI_Request copy = w->ctrl_req;
    MPI_Cancel(&copy);  // completes through MPI_Testsome as cancelled; on_ctrl ignores it
  }
  if (failed) {
    failed_comms_.push_back(w->comm);  // never freed: see the declaration
  } else {
    MPI_Comm_free(&w->comm);
  }
}

void MpiWorld::drop_or_submit(const std::function<void()>& fn) {
  if (Runtime::holds_baton())
    fn();
  else
    Runtime::get().submit(fn);
}

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

/// With the baton: starts posted operations (sends go to MPI_Isend, receives wait for a probe).
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
    // Every message of the transfer, back to back (top of the file).
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

class MpiGroupImpl final : public GroupImpl {
 public:
  MpiGroupImpl(std::shared_ptr<MpiWorld> world, std::vector<int> world_ranks, int rank,
               Topology topology, uint32_t gid, std::shared_ptr<RankState> rs)
      : GroupImpl(std::move(world_ranks), rank, std::move(topology), gid, std::move(rs),
                  world->timeout_s),
        world_(std::move(world)) {
    core::require(2 * gid + 1 < kMaxChannel, "comm", "group id ", gid, " exceeds the ",
                  kMaxChannel / 2, " groups the MPI tag space can address per run");
  }

  std::string_view backend() const override { return "mpi"; }

  std::shared_ptr<GroupImpl> make_child(std::vector<int> members, int rank, uint32_t gid) override {
    auto [world_ranks, topo] = child_layout(members);
    return std::make_shared<MpiGroupImpl>(world_, std::move(world_ranks), rank, std::move(topo),
                                          gid, rank_state_ptr());
  }

 protected:
  Request post_send(uint32_t channel, int dst, int tag, const void* data, size_t bytes) override {
    std::vector<Request> out;
    const SendSpec s{dst, data, bytes, tag};
    post_batch(channel, std::span<const SendSpec>(&s, 1), {}, out, false);
    return out.front();
  }
  Request post_recv(uint32_t channel, int src, int tag, void* data, size_t bytes) override {
    std::vector<Request> out;
    const RecvSpec r{src, data, bytes, tag};
    post_batch(channel, {}, std::span<const RecvSpec>(&r, 1), out, false);
    return out.front();
  }

  /// Posts the whole step together.
  void post_batch(uint32_t channel, std::span<const SendSpec> sends,
                  std::span<const RecvSpec> recvs, std::vector<Request>& out,
                  bool wait_now) override {
    {
      std::lock_guard<std::mutex> lk(world_->mu);
      if (world_->failed) throw RankFailed(world_->failed_rank, world_->failure);
    }
    std::vector<std::shared_ptr<MpiOp>> ops;
    auto make = [&](bool is_send, int peer, int tag, const void* sbuf, void* rbuf, size_t bytes) {
      auto op = std::make_shared<MpiOp>();
      op->is_send = is_send;
      op->me_g = rank();
      op->me_w = world_rank(rank());
      op->peer_g = peer;
      op->peer_w = world_rank(peer);
      op->tag = tag;
      op->mtag = static_cast<int>((channel << kTagBits) | static_cast<uint32_t>(tag));
      op->sbuf = sbuf;
      op->rbuf = rbuf;
      op->bytes = bytes;
      op->chunk = world_->chunk_bytes;
      ops.push_back(op);
      out.push_back(Request(std::make_shared<MpiRequest>(world_, op)));
    };
    for (const SendSpec& s : sends) make(true, s.peer, s.tag, s.data, nullptr, s.bytes);
    for (const RecvSpec& r : recvs) make(false, r.peer, r.tag, nullptr, r.data, r.bytes);
    // Posted here when the baton is free (the sends start now, not when the progress thread
    // next looks); with `wait_now` the caller's wait drives them, so the sleeping progress thread
    // is not woken for nothing.
    Runtime& rt = Runtime::get();
    if (rt.try_with_baton([&] { start_ops(world_, ops); })) {
      if (!wait_now) rt.wake();
    } else {
      rt.submit([world = world_, ops = std::move(ops)] { start_ops(world, ops); });
    }
  }

 private:
  std::shared_ptr<MpiWorld> world_;
};

/// Progress thread: node of every rank from the host names MPI reports (MPI_Get_processor_name,
/// allgathered): ranks with the same name share a node, and nodes are named by their lowest world
/// rank, then renumbered densely by Topology. Names rather than MPI_COMM_TYPE_SHARED, because the
/// host is what the links are about (scripts/cluster.sh gives every network namespace its own
/// hostname; shared memory is not even used between them).
Topology detect_topology(MPI_Comm comm, int rank, int size) {
  (void)rank;
  std::vector<char> mine(MPI_MAX_PROCESSOR_NAME + 1, '\0');
  int len = 0;
  mpi_check(MPI_Get_processor_name(mine.data(), &len), "MPI_Get_processor_name");
  const size_t width = mine.size();
  std::vector<char> all(width * static_cast<size_t>(size));
  mpi_check(MPI_Allgather(mine.data(), static_cast<int>(width), MPI_CHAR, all.data(),
                          static_cast<int>(width), MPI_CHAR, comm),
            "MPI_Allgather (host names)");
  std::map<std::string, int> first_rank;
  std::vector<int> leaders(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    const std::string name(all.data() + static_cast<size_t>(r) * width);
    leaders[static_cast<size_t>(r)] = first_rank.emplace(name, r).first->second;
  }
  return Topology(leaders);
}

}  // namespace

bool mpi_built() {
  return true;
}
bool mpi_initialized() {
  return Runtime::initialized_flag().load();
}
void mpi_init() {
  Runtime::get();
}
int mpi_world_size() {
  return Runtime::get().size();
}

void mpi_set_chunk_bytes(size_t bytes) {
  core::require(bytes >= 1 && bytes <= static_cast<size_t>(INT_MAX), "comm", "MPI chunk limit of ",
                bytes, " bytes outside [1, ", INT_MAX, "] (MPI counts are int)");
  g_chunk_bytes.store(bytes);
}
size_t mpi_chunk_bytes() {
  return g_chunk_bytes.load();
}
uint64_t mpi_data_messages_sent() {
  return g_data_messages.load();
}

void mpi_wait_all_processes() {
  Runtime::get().run_sync([] {
    MPI_Request req;
    mpi_check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier");
    for (;;) {
      int flag = 0;
      mpi_check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test (barrier)");
      if (flag) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
}

void mpi_abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

void run_mpi_world(const Options& options, const std::function<void(Group&)>& fn) {
  Runtime& rt = Runtime::get();
  core::require(options.world == 0 || options.world == rt.size(), "comm", "--world ", options.world,
                " but mpirun started ", rt.size(), " processes");
  core::require(options.timeout_s > 0.0, "comm", "timeout ", options.timeout_s,
                " s must be positive");
  auto world = std::make_shared<MpiWorld>();
  world->rank = rt.rank();
  world->size = rt.size();
  world->timeout_s = options.timeout_s;
  world->done_from.assign(static_cast<size_t>(rt.size()), 0);
  world->chunk_bytes = mpi_chunk_bytes();
  // Blocking collectives are fine here: no traffic of this world exists yet.
  rt.run_sync([&] {
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &world->comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(world->comm, MPI_ERRORS_RETURN);
    // A receiver splits its expectation at its own limit, so all ranks must use one: the smallest
    // and (negated) largest in one all-reduce. Every rank sees the same result and throws alike.
    const auto mine = static_cast<long long>(world->chunk_bytes);
    long long lim[2] = {mine, -mine};
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, lim, 2, MPI_LONG_LONG, MPI_MIN, world->comm),
              "MPI_Allreduce (chunk limit)");
    if (lim[0] != -lim[1]) {
      MPI_Comm_free(&world->comm);
      core::fail("comm", "MPI chunk limit differs between ranks: ", lim[0], " to ", -lim[1],
                 " bytes (mpi_set_chunk_bytes must be called alike on every rank)");
    }
    world->topology = detect_topology(world->comm, world->rank, world->size);
    world->post_ctrl_recv();
    rt.add_world(world);
  });
  if (options.nodes > 0) world->topology = Topology::declared(world->size, options.nodes);

  auto rs = std::make_shared<RankState>();
  rs->world_rank = world->rank;
  rs->world_node = world->topology.node(world->rank);
  try {
    std::vector<int> ranks(static_cast<size_t>(world->size));
    std::iota(ranks.begin(), ranks.end(), 0);
    Group g(std::make_shared<MpiGroupImpl>(world, ranks, world->rank, world->topology, 1u, rs));
    fn(g);
  } catch (const std::exception& e) {
    world->fail(world->rank, e.what(), true);
  } catch (...) {
    world->fail(world->rank, "unknown exception (not derived from std::exception)", true);
  }

  // Agree on the outcome: success only once every rank's function has returned.
  {
    bool failed;
    {
      std::lock_guard<std::mutex> lk(world->mu);
      failed = world->failed;
    }
    if (!failed) {
      rt.submit([world] { world->send_ctrl(kDone, ""); });
      std::unique_lock<std::mutex> lk(world->mu);
      world->cv.wait(lk, [&] { return world->failed || world->done_count == world->size - 1; });
    }
  }
  std::unique_lock<std::mutex> lk(world->mu);
  if (world->failed) {
    const int who = world->failed_rank;
    const std::string why = world->failure;
    lk.unlock();
    rt.submit([world] { Runtime::get().retire_world(world, true); });
    if (options.abort_on_failure) {
      std::fprintf(stderr, "[comm] rank %d failed: %s\n", who, why.c_str());
      mpi_abort(1);
    }
    throw RankFailed(who, why);
  }
  lk.unlock();
  rt.run_sync([world] { Runtime::get().retire_world(world, false); });
}

}  // namespace longseq::comm
