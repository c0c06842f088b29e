#pragma once
// Time: wall clock on the steady clock (Timer, ScopedTimer), and the calling thread's CPU clock
// (what a kernel costs on a core of its own when the machine is shared: a descheduled thread's
// wall time says nothing about the kernel). The one timer module; nothing redefines these.
#include <chrono>
#include <cstddef>

namespace longseq::core {

/// Seconds since an arbitrary fixed point (steady, monotonic).
inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/// CPU seconds the calling thread has run (CLOCK_THREAD_CPUTIME_ID), from an arbitrary origin.
double thread_cpu_seconds();

/// Starts on construction; elapsed() reads without stopping.
class Timer {
 public:
  Timer() : start_(now_seconds()) {}
  void restart() { start_ = now_seconds(); }
  double elapsed() const { return now_seconds() - start_; }

 private:
  double start_;
};

/// Adds the lifetime of the scope to `*sink` (e.g. per-rank compute or wait seconds).
class ScopedTimer {
 public:
  explicit ScopedTimer(double* sink) : sink_(sink) {}
  ~ScopedTimer() { *sink_ += t_.elapsed(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double* sink_;
  Timer t_;
};

/// Peak resident set size of this process in bytes (VmHWM), 0 when unavailable.
size_t peak_rss_bytes();
/// Current resident set size in bytes (VmRSS), 0 when unavailable.
size_t current_rss_bytes();

}  // namespace longseq::core
