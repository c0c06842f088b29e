#pragma once
// Wall-clock timing on the steady clock.
#include <chrono>
#include <cstddef>

namespace longseq::core {

/// Seconds since an arbitrary fixed point (steady, monotonic).
inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

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
