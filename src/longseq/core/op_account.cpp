#include "longseq/core/op_account.hpp"

#include "longseq/core/timer.hpp"

namespace longseq::core {

namespace {
struct State {
  OpTimes* sink = nullptr;
  int current = -1;  // open category, -1: none
  double mark = 0;   // when the open category's current interval began
};
thread_local State tls;

void charge(double now) {
  if (tls.current >= 0) tls.sink->s[static_cast<size_t>(tls.current)] += now - tls.mark;
  tls.mark = now;
}
}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::attn_forward:
      return "attn_forward";
    case Op::attn_backward:
      return "attn_backward";
    case Op::attn_recompute:
      return "attn_recompute";
    case Op::gemm:
      return "gemm";
    case Op::norm_rope_swiglu:
      return "norm_rope_swiglu";
    case Op::lm_head_loss:
      return "lm_head_loss";
    case Op::optimizer:
      return "optimizer";
    case Op::zero_gather:
      return "zero_gather";
    case Op::zero_reduce_scatter:
      return "zero_reduce_scatter";
    case Op::comm_wait:
      return "comm_wait";
    case Op::count:
      break;
  }
  return "?";
}

double OpTimes::total() const {
  double t = 0;
  for (double x : s) t += x;
  return t;
}

OpTimes OpTimes::operator-(const OpTimes& o) const {
  OpTimes r;
  for (size_t i = 0; i < s.size(); ++i) r.s[i] = s[i] - o.s[i];
  return r;
}

OpAccountInstall::OpAccountInstall(OpTimes* sink) : prev_(tls.sink) {
  tls.sink = sink;
  tls.current = -1;
}

OpAccountInstall::~OpAccountInstall() {
  tls.sink = prev_;
  tls.current = -1;
}

OpTimes* op_account() {
  return tls.sink;
}

OpScope::OpScope(Op op, bool weak) {
  if (!tls.sink) return;
  if (weak && tls.current >= 0 && tls.current != static_cast<int>(Op::norm_rope_swiglu)) return;
  active_ = true;
  charge(now_seconds());
  prev_ = tls.current;
  tls.current = static_cast<int>(op);
}

OpScope::~OpScope() {
  if (!active_ || !tls.sink) return;
  charge(now_seconds());
  tls.current = prev_;
}

void op_transfer(Op from, Op to, double seconds) {
  if (!tls.sink) return;
  (*tls.sink)[from] -= seconds;
  (*tls.sink)[to] += seconds;
}

}  // namespace longseq::core
