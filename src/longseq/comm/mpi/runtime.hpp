#pragma once
// The MPI backend's process-wide state (internal to comm/mpi/): constants, helpers and Runtime,
// which owns MPI and the progress thread. Built only with LONGSEQ_WITH_MPI (comm/mpi_stub.cpp
// stands in otherwise).
//
// The backend's rooms: runtime.cpp (MPI's life and the mpi_backend.hpp entry points),
// progress.cpp (the progress engine: Runtime's polling rounds, probe matching), world.cpp (one
// run()'s world, its control messages and run_mpi_world), request.cpp (posting and completing
// sends and receives), group.cpp (the GroupImpl over a world).
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
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "longseq/comm/group.hpp"
#include "longseq/comm/mpi_backend.hpp"
#include "longseq/core/error.hpp"

namespace longseq::comm::mpi_impl {

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

std::string mpi_error_string(int rc);
/// Throws core::Error("[comm] <what> failed: <MPI's error string>") unless rc is MPI_SUCCESS.
void mpi_check(int rc, const char* what);
Clock::duration to_duration(double seconds);
/// "rank 3", or "rank 1 (world rank 3)" inside a sub-group.
std::string rank_name(int group_rank, int world_rank);

/// Process-wide settings and counters of mpi_backend.hpp.
extern std::atomic<size_t> g_chunk_bytes;
extern std::atomic<uint64_t> g_data_messages;

class MpiWorld;

/// Process-wide MPI state and the progress thread.
class Runtime {
 public:
  static Runtime& get();
  /// Set once get() has initialised MPI (mpi_initialized()).
  static std::atomic<bool>& initialized_flag();

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

  /// MPI_Init_thread (unless the program initialised MPI itself) and the progress thread.
  Runtime();
  /// Stops the progress thread, cancels leftover receives and finalises MPI when it initialised it.
  ~Runtime();

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
  /// This thread holds the baton (a Baton is alive on it).
  static bool& holds_baton();

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

}  // namespace longseq::comm::mpi_impl
