#pragma once
// The per-op account of a training step (issue 19): where a rank's wall time goes, by category.
//
// Exclusive wall time on the calling thread (steady clock). A thread that has an account
// installed (OpAccountInstall) charges every interval to the innermost open OpScope: opening a
// scope charges the interval so far to the enclosing category, closing it charges its own
// interval and resumes the enclosing one. So nested scopes never double count and the categories
// add up to the wall time spent inside outermost scopes; time outside every scope is not charged
// (the step's "other"). Threads with no account installed (OpenMP workers, other commands) pay one
// thread-local load per scope and record nothing. Wall time, not thread-CPU time: the parts must
// add up to the step's wall time, waits and descheduling included.
#include <array>
#include <cstddef>

namespace longseq::core {

enum class Op : int {
  attn_forward,         ///< attention kernels + merges of the forward (exclusive of its waits)
  attn_backward,        ///< attention backward (exclusive of its waits)
  attn_recompute,       ///< attention forward rerun by the backward (checkpoint policies)
  gemm,                 ///< projections and MLP matrix products (kernels::gemm_*_parallel)
  norm_rope_swiglu,     ///< RMSNorm, RoPE, SwiGLU, residual adds, embedding
  lm_head_loss,         ///< final norm + LM head + cross-entropy, forward and backward
  optimizer,            ///< gradient norm, clipping, AdamW
  zero_gather,          ///< ZeRO-3 parameter all-gathers (waits on prefetched ones included)
  zero_reduce_scatter,  ///< ZeRO-3 gradient reduce-scatters (posting, waiting, accumulating)
  comm_wait,            ///< attention's communication waits, loss / norm all-reduces
  count
};
inline constexpr int kNumOps = static_cast<int>(Op::count);

/// metrics.json key of a category ("attn_forward", ..., "comm_wait").
const char* op_name(Op op);

/// Seconds per category.
struct OpTimes {
  std::array<double, kNumOps> s{};
  double& operator[](Op op) { return s[static_cast<size_t>(op)]; }
  double operator[](Op op) const { return s[static_cast<size_t>(op)]; }
  double total() const;
  OpTimes operator-(const OpTimes& o) const;
};

/// Installs `sink` as the calling thread's account for the object's lifetime (restores the
/// previous one after). Scopes open at installation are not charged to it.
class OpAccountInstall {
 public:
  explicit OpAccountInstall(OpTimes* sink);
  ~OpAccountInstall();
  OpAccountInstall(const OpAccountInstall&) = delete;
  OpAccountInstall& operator=(const OpAccountInstall&) = delete;

 private:
  OpTimes* prev_;
};

/// The calling thread's account, or nullptr.
OpTimes* op_account();

/// Charges the scope's lifetime to `op` (exclusive of inner scopes). A weak scope (the GEMM
/// wrapper's) takes over only when no scope is open or the open one is norm_rope_swiglu (a GEMM
/// inside the MLP); inside attention, the LM head or the optimizer it leaves the time where it is.
class OpScope {
 public:
  explicit OpScope(Op op, bool weak = false);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  bool active_ = false;
  int prev_ = -1;
};

/// Moves `seconds` already charged to `from` into `to` (attention's own wait counters: the op
/// measures its waits inside the scope of its compute). Nothing without an account.
void op_transfer(Op from, Op to, double seconds);

}  // namespace longseq::core
