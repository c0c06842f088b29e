#pragma once
// One registry of kernel cases run over every backend, as ggml's test-backend-ops does: a case is
// an op, its shapes (odd ones included), seeded inputs, per-output tolerances (tests/README.md
// rule 1) and its nominal FLOP and byte counts; a backend is a set of fp32 kernels behind
// KernelBackend. Every case runs on every backend against the fp64 reference (kernels/ref, the
// specification), so a new device (cuda) implements KernelBackend, instantiates the suite over
// its backend (kernel_cases_test.cpp shows how) and inherits every case, and a new case reaches
// every device at once.
//
// Backends: `ref` (the fp64 twin rounded to fp32: checks the harness itself, every bound holds by
// a wide margin) and `cpu` (kernels/cpu). Inputs are fp32; the reference runs on the same values
// widened to fp64. FLOPs and bytes count forward + backward as the case runs them (stated per op
// below; exp, sqrt and division count one each; bytes: each fp32 array read or written once per
// pass); the test records them (gtest properties, --gtest_output=xml) for throughput reports.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/kernels/cpu/attention.hpp"
#include "longseq/kernels/cpu/linear.hpp"
#include "longseq/kernels/cpu/lm_head.hpp"
#include "longseq/kernels/cpu/rmsnorm.hpp"
#include "longseq/kernels/cpu/rope.hpp"
#include "longseq/kernels/cpu/swiglu.hpp"
#include "longseq/kernels/mask.hpp"
#include "longseq/kernels/ref/attention.hpp"
#include "longseq/kernels/ref/cross_entropy.hpp"
#include "longseq/kernels/ref/rmsnorm.hpp"
#include "longseq/kernels/ref/rope.hpp"
#include "longseq/kernels/ref/swiglu.hpp"
#include "model/model_test_util.hpp"

namespace longseq::test {

/// The fp32 kernels a device provides, with the contracts of kernels/ref (outputs overwritten).
class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  virtual std::string name() const = 0;
  /// Whether the backend implements `op` (a KernelCase::op) yet: a device instantiates only the
  /// cases of the ops it has (ggml's supports_op), so a missing kernel is a case not listed, not a
  /// skipped or failed one. The host backends implement every op.
  virtual bool supports(const std::string& op) const {
    (void)op;
    return true;
  }
  /// out [T, C], rstd [T].
  virtual void rmsnorm_forward(const float* x, const float* w, int64_t t, int64_t c, float eps,
                               float* out, float* rstd) = 0;
  /// dx [T, C], dw [C]; rstd is this backend's own forward output (a backend may recompute it).
  virtual void rmsnorm_backward(const float* dout, const float* x, const float* w,
                                const float* rstd, int64_t t, int64_t c, float eps, float* dx,
                                float* dw) = 0;
  virtual void swiglu_forward(const float* gate, const float* up, int64_t n, float* out) = 0;
  virtual void swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n,
                               float* dgate, float* dup) = 0;
  /// x, y [T, H, D]; tokens with pos < 0 are padding (copied unchanged).
  virtual void rope_forward(const float* x, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                            double theta, float* y) = 0;
  virtual void rope_backward(const float* dy, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                             double theta, float* dx) = 0;
  /// A linear layer without bias (nn.Linear's layout): y [T, N] = x [T, K] w^T, w [N, K].
  virtual void linear_forward(const float* x, const float* w, int64_t t, int64_t k, int64_t n,
                              float* y) = 0;
  /// dx [T, K] = dy [T, N] w and dw [N, K] = dy^T x, both overwritten.
  virtual void linear_backward(const float* dy, const float* x, const float* w, int64_t t,
                               int64_t k, int64_t n, float* dx, float* dw) = 0;
  /// One query block against one key block, with kernels/ref/attention.hpp's layouts and mask
  /// (a predicate over the global positions in qt / kt): q [Tq, Hq, D], k and v [Tk, Hkv, D]
  /// (query head h uses kv head h / (Hq / Hkv)); o [Tq, Hq, D] = softmax(scale q k^T + mask) v,
  /// lse [Tq, Hq] its natural-log logsumexp. A row that sees no key gets o = 0, lse = -inf.
  virtual void attention_forward(const float* q, const float* k, const float* v,
                                 const kernels::Tokens& qt, const kernels::Tokens& kt,
                                 const kernels::Mask& mask, float scale,
                                 const kernels::ref::AttnDims& dims, float* o, float* lse) = 0;
  /// dq [Tq, Hq, D], dk and dv [Tk, Hkv, D] (overwritten): the gradients of sum(o * dout). o and
  /// lse are this backend's own attention_forward outputs (the (O, LSE) contract: a backward may
  /// use lse and delta = rowsum(dout * o) instead of renormalising the scores).
  virtual void attention_backward(const float* q, const float* k, const float* v, const float* o,
                                  const float* lse, const float* dout, const kernels::Tokens& qt,
                                  const kernels::Tokens& kt, const kernels::Mask& mask, float scale,
                                  const kernels::ref::AttnDims& dims, float* dq, float* dk,
                                  float* dv) = 0;
  /// LM head + cross-entropy, forward and backward in one call (kernels/ref/cross_entropy.hpp):
  /// hidden [T, C], weight [V, C], labels [T] (ignore_index: no loss, no gradient). *loss_sum is
  /// the sum of logsumexp(logits[t]) - logits[t, labels[t]] over the non-ignored tokens (fp64),
  /// *count their number; dhidden [T, C] and dweight [V, C] (overwritten) are the gradients of
  /// grad_scale * loss_sum. token_tile and vocab_tile are tiling a backend may use (token rows
  /// per pass, vocabulary entries per online-logsumexp step; <= 0: its default): the results may
  /// depend on them only through rounding.
  virtual void lm_head_ce(const float* hidden, const float* weight, const int32_t* labels,
                          int64_t t, int64_t c, int64_t v, int32_t ignore_index, double grad_scale,
                          int64_t token_tile, int64_t vocab_tile, double* loss_sum, int64_t* count,
                          float* dhidden, float* dweight) = 0;
  /// Merges the attention partial (o_other, lse_other) into (o, lse) in place
  /// (kernels/ref/attention.hpp's merge_partials): o, o_other [T, H, D], lse, lse_other [T, H]. A
  /// side with lse = -inf is not read (its o may hold NaN).
  virtual void merge_partials(float* o, float* lse, const float* o_other, const float* lse_other,
                              int64_t t, int64_t h, int64_t d) = 0;
  /// delta [T, H] = rowsum(dout * o) over D (kernels/ref/attention.hpp's attention_d), overwritten.
  virtual void attention_delta(const float* dout, const float* o, int64_t t, int64_t h, int64_t d,
                               float* delta) = 0;
};

namespace kernel_cases_detail {

inline std::vector<float> narrow(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// The specification of the linear layer (kernels/ref has no twin for a matrix product: the
// spec is the sum itself, as in tests/kernels/linear_test.cpp), in fp64. When `*_abs` is given it
// also receives each output's sum of |terms|, the scale of the rounding bound (linear_case).
inline void linear_ref_forward(const double* x, const double* w, int64_t t, int64_t k, int64_t n,
                               double* y, double* y_abs = nullptr) {
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, a = 0;
      for (int64_t e = 0; e < k; ++e) {
        s += x[i * k + e] * w[j * k + e];
        a += std::fabs(x[i * k + e] * w[j * k + e]);
      }
      y[i * n + j] = s;
      if (y_abs) y_abs[i * n + j] = a;
    }
}
inline void linear_ref_backward(const double* dy, const double* x, const double* w, int64_t t,
                                int64_t k, int64_t n, double* dx, double* dw,
                                double* dx_abs = nullptr, double* dw_abs = nullptr) {
  std::fill(dx, dx + t * k, 0.0);
  std::fill(dw, dw + n * k, 0.0);
  if (dx_abs) std::fill(dx_abs, dx_abs + t * k, 0.0);
  if (dw_abs) std::fill(dw_abs, dw_abs + n * k, 0.0);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t e = 0; e < k; ++e) {
        dx[i * k + e] += dy[i * n + j] * w[j * k + e];
        dw[j * k + e] += dy[i * n + j] * x[i * k + e];
        if (dx_abs) dx_abs[i * k + e] += std::fabs(dy[i * n + j] * w[j * k + e]);
        if (dw_abs) dw_abs[j * k + e] += std::fabs(dy[i * n + j] * x[i * k + e]);
      }
}

// The fp64 twin, rounded to fp32.
class RefBackend final : public KernelBackend {
 public:
  std::string name() const override { return "ref"; }
  void rmsnorm_forward(const float* x, const float* w, int64_t t, int64_t c, float eps, float* out,
                       float* rstd) override {
    std::vector<double> o(t * c), r(t);
    kernels::ref::rmsnorm_forward(wide(x, t * c).data(), wide(w, c).data(), t, c, eps, o.data(),
                                  r.data());
    copy(o, out);
    copy(r, rstd);
  }
  void rmsnorm_backward(const float* dout, const float* x, const float* w, const float*, int64_t t,
                        int64_t c, float eps, float* dx, float* dw) override {
    std::vector<double> a(t * c), b(c);
    kernels::ref::rmsnorm_backward(wide(dout, t * c).data(), wide(x, t * c).data(),
                                   wide(w, c).data(), t, c, eps, a.data(), b.data());
    copy(a, dx);
    copy(b, dw);
  }
  void swiglu_forward(const float* g, const float* u, int64_t n, float* out) override {
    std::vector<double> o(n);
    kernels::ref::swiglu_forward(wide(g, n).data(), wide(u, n).data(), n, o.data());
    copy(o, out);
  }
  void swiglu_backward(const float* dout, const float* g, const float* u, int64_t n, float* dg,
                       float* du) override {
    std::vector<double> a(n), b(n);
    kernels::ref::swiglu_backward(wide(dout, n).data(), wide(g, n).data(), wide(u, n).data(), n,
                                  a.data(), b.data());
    copy(a, dg);
    copy(b, du);
  }
  void rope_forward(const float* x, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                    double theta, float* y) override {
    std::vector<double> o(t * h * d);
    kernels::ref::rope_forward(wide(x, t * h * d).data(), pos, t, h, d, theta, o.data());
    copy(o, y);
  }
  void rope_backward(const float* dy, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                     double theta, float* dx) override {
    std::vector<double> o(t * h * d);
    kernels::ref::rope_backward(wide(dy, t * h * d).data(), pos, t, h, d, theta, o.data());
    copy(o, dx);
  }
  void linear_forward(const float* x, const float* w, int64_t t, int64_t k, int64_t n,
                      float* y) override {
    std::vector<double> o(t * n);
    linear_ref_forward(wide(x, t * k).data(), wide(w, n * k).data(), t, k, n, o.data());
    copy(o, y);
  }
  void linear_backward(const float* dy, const float* x, const float* w, int64_t t, int64_t k,
                       int64_t n, float* dx, float* dw) override {
    std::vector<double> a(t * k), b(n * k);
    linear_ref_backward(wide(dy, t * n).data(), wide(x, t * k).data(), wide(w, n * k).data(), t, k,
                        n, a.data(), b.data());
    copy(a, dx);
    copy(b, dw);
  }
  void attention_forward(const float* q, const float* k, const float* v, const kernels::Tokens& qt,
                         const kernels::Tokens& kt, const kernels::Mask& mask, float scale,
                         const kernels::ref::AttnDims& dm, float* o, float* lse) override {
    const int64_t nq = dm.tq * dm.hq * dm.d, nk = dm.tk * dm.hkv * dm.d;
    std::vector<double> a(nq), b(dm.tq * dm.hq);
    kernels::ref::attention_forward(wide(q, nq).data(), wide(k, nk).data(), wide(v, nk).data(), qt,
                                    kt, mask, scale, dm, a.data(), b.data());
    copy(a, o);
    copy(b, lse);
  }
  void attention_backward(const float* q, const float* k, const float* v, const float*,
                          const float*, const float* dout, const kernels::Tokens& qt,
                          const kernels::Tokens& kt, const kernels::Mask& mask, float scale,
                          const kernels::ref::AttnDims& dm, float* dq, float* dk,
                          float* dv) override {
    const int64_t nq = dm.tq * dm.hq * dm.d, nk = dm.tk * dm.hkv * dm.d;
    std::vector<double> a(nq), b(nk), c(nk);
    kernels::ref::attention_backward(wide(q, nq).data(), wide(k, nk).data(), wide(v, nk).data(),
                                     wide(dout, nq).data(), qt, kt, mask, scale, dm, a.data(),
                                     b.data(), c.data());
    copy(a, dq);
    copy(b, dk);
    copy(c, dv);
  }
  void lm_head_ce(const float* hidden, const float* weight, const int32_t* labels, int64_t t,
                  int64_t c, int64_t v, int32_t ignore_index, double grad_scale, int64_t, int64_t,
                  double* loss_sum, int64_t* count, float* dhidden, float* dweight) override {
    const auto h = wide(hidden, t * c), w = wide(weight, v * c);
    const kernels::ref::LmHeadDims d{t, c, v};
    const auto r = kernels::ref::lm_head_ce_forward(h.data(), w.data(), labels, d, nullptr, nullptr,
                                                    ignore_index);
    std::vector<double> a(t * c), b(v * c);
    kernels::ref::lm_head_ce_backward(h.data(), w.data(), labels, d, grad_scale, a.data(), b.data(),
                                      ignore_index);
    *loss_sum = r.sum;
    *count = r.count;
    copy(a, dhidden);
    copy(b, dweight);
  }
  void merge_partials(float* o, float* lse, const float* o_other, const float* lse_other, int64_t t,
                      int64_t h, int64_t d) override {
    auto a = wide(o, t * h * d), la = wide(lse, t * h);
    kernels::ref::merge_partials(a.data(), la.data(), wide(o_other, t * h * d).data(),
                                 wide(lse_other, t * h).data(), t, h, d);
    copy(a, o);
    copy(la, lse);
  }
  void attention_delta(const float* dout, const float* o, int64_t t, int64_t h, int64_t d,
                       float* delta) override {
    std::vector<double> r(t * h);
    kernels::ref::attention_d(wide(o, t * h * d).data(), wide(dout, t * h * d).data(), t, h, d,
                              r.data());
    copy(r, delta);
  }

 private:
  static std::vector<double> wide(const float* p, int64_t n) { return {p, p + n}; }
  static void copy(const std::vector<double>& v, float* out) {
    for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
  }
};

// kernels/cpu with 2 threads (the row kernels' results do not depend on the thread count: their
// own tests check the bits).
class CpuBackend final : public KernelBackend {
 public:
  std::string name() const override { return "cpu"; }
  void rmsnorm_forward(const float* x, const float* w, int64_t t, int64_t c, float eps, float* out,
                       float* rstd) override {
    kernels::cpu::rmsnorm_forward(x, w, t, c, eps, out, rstd, kThreads);
  }
  void rmsnorm_backward(const float* dout, const float* x, const float* w, const float* rstd,
                        int64_t t, int64_t c, float, float* dx, float* dw) override {
    std::fill(dw, dw + c, 0.0f);  // the fast kernel accumulates dweight
    kernels::cpu::rmsnorm_backward(dout, x, w, rstd, t, c, dx, dw, false, kThreads);
  }
  void swiglu_forward(const float* g, const float* u, int64_t n, float* out) override {
    kernels::cpu::swiglu_forward(g, u, n, out, kThreads);
  }
  void swiglu_backward(const float* dout, const float* g, const float* u, int64_t n, float* dg,
                       float* du) override {
    kernels::cpu::swiglu_backward(dout, g, u, n, dg, du, kThreads);
  }
  void rope_forward(const float* x, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                    double theta, float* y) override {
    std::copy(x, x + t * h * d, y);
    kernels::cpu::RopeTable(pos, t, d, theta).forward(y, h, kThreads);
  }
  void rope_backward(const float* dy, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                     double theta, float* dx) override {
    std::copy(dy, dy + t * h * d, dx);
    kernels::cpu::RopeTable(pos, t, d, theta).backward(dx, h, kThreads);
  }
  void linear_forward(const float* x, const float* w, int64_t t, int64_t k, int64_t n,
                      float* y) override {
    kernels::cpu::linear_forward(x, w, t, k, n, y, false, kThreads);
  }
  void linear_backward(const float* dy, const float* x, const float* w, int64_t t, int64_t k,
                       int64_t n, float* dx, float* dw) override {
    std::fill(dw, dw + n * k, 0.0f);  // the fast kernel accumulates dweight
    kernels::cpu::linear_backward(dy, x, w, t, k, n, dx, false, dw, kThreads);
  }
  // Workspaces are filled with NaN: a kernel that read scratch before writing it would show it.
  void attention_forward(const float* q, const float* k, const float* v, const kernels::Tokens& qt,
                         const kernels::Tokens& kt, const kernels::Mask& mask, float scale,
                         const kernels::ref::AttnDims& dm, float* o, float* lse) override {
    std::vector<float> ws(kernels::cpu::attention_forward_workspace_floats(dm, kThreads), kNaN);
    kernels::cpu::attention_block_forward(q, k, v, qt, kt, mask, scale, dm, kThreads, ws, o, lse);
  }
  void attention_backward(const float* q, const float* k, const float* v, const float* o,
                          const float* lse, const float* dout, const kernels::Tokens& qt,
                          const kernels::Tokens& kt, const kernels::Mask& mask, float scale,
                          const kernels::ref::AttnDims& dm, float* dq, float* dk,
                          float* dv) override {
    std::vector<float> delta(dm.tq * dm.hq);
    kernels::cpu::attention_delta(dout, o, dm.tq, dm.hq, dm.d, kThreads, delta.data());
    std::fill(dq, dq + dm.tq * dm.hq * dm.d, 0.0f);  // the block backward accumulates
    std::fill(dk, dk + dm.tk * dm.hkv * dm.d, 0.0f);
    std::fill(dv, dv + dm.tk * dm.hkv * dm.d, 0.0f);
    std::vector<float> ws(kernels::cpu::attention_backward_workspace_floats(dm, kThreads), kNaN);
    kernels::cpu::attention_block_backward(q, k, v, dout, lse, delta.data(), qt, kt, mask, scale,
                                           dm, kThreads, ws, dq, dk, dv);
  }
  // The fused path (the one training runs).
  void lm_head_ce(const float* hidden, const float* weight, const int32_t* labels, int64_t t,
                  int64_t c, int64_t v, int32_t ignore_index, double grad_scale, int64_t token_tile,
                  int64_t vocab_tile, double* loss_sum, int64_t* count, float* dhidden,
                  float* dweight) override {
    kernels::cpu::LmHeadOptions o;
    o.token_tile = token_tile;
    if (vocab_tile > 0) o.vocab_tile = vocab_tile;
    o.ignore_index = ignore_index;
    o.exec = core::Exec::cpu(kThreads);
    std::fill(dweight, dweight + v * c, 0.0f);  // the fast kernel accumulates dweight
    const auto r = kernels::cpu::lm_head_ce_fused(hidden, weight, labels, {t, c, v}, grad_scale,
                                                  dhidden, dweight, o);
    *loss_sum = r.sum;
    *count = r.count;
  }
  void merge_partials(float* o, float* lse, const float* o_other, const float* lse_other, int64_t t,
                      int64_t h, int64_t d) override {
    kernels::cpu::merge_partials(o, lse, o_other, lse_other, t, h, d, kThreads);
  }
  void attention_delta(const float* dout, const float* o, int64_t t, int64_t h, int64_t d,
                       float* delta) override {
    kernels::cpu::attention_delta(dout, o, t, h, d, kThreads, delta);
  }

 private:
  static constexpr int kThreads = 2;
  static constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
};

}  // namespace kernel_cases_detail

/// The backends of this build every case runs on (a CUDA build's test_cuda adds its own).
inline std::vector<std::shared_ptr<KernelBackend>> host_backends() {
  return {std::make_shared<kernel_cases_detail::RefBackend>(),
          std::make_shared<kernel_cases_detail::CpuBackend>()};
}

/// One output of a case on one backend, with the fp64 reference's value and its tolerance
/// (|got - want| <= atol + rtol |want|). `got` is the backend's fp32 output widened (exactly), or
/// an fp64 value where the contract returns one (the LM head's loss sum).
struct CaseOutput {
  std::string name;
  std::vector<double> got, want;
  double atol = 0, rtol = 0;

  CaseOutput(std::string name_, const std::vector<float>& got_, std::vector<double> want_,
             double atol_, double rtol_)
      : name(std::move(name_)),
        got(got_.begin(), got_.end()),
        want(std::move(want_)),
        atol(atol_),
        rtol(rtol_) {}
  CaseOutput(std::string name_, std::vector<double> got_, std::vector<double> want_, double atol_,
             double rtol_)
      : name(std::move(name_)),
        got(std::move(got_)),
        want(std::move(want_)),
        atol(atol_),
        rtol(rtol_) {}
};

struct KernelCase {
  std::string op, shape;        ///< e.g. "rmsnorm", "t7_c33" (the test's name)
  double flops = 0, bytes = 0;  ///< nominal, forward + backward
  std::function<std::vector<CaseOutput>(KernelBackend&)> run;
};

// How gtest names a parameter in a failure message.
inline void PrintTo(const KernelBackend& b, std::ostream* os) {
  *os << b.name();
}
inline void PrintTo(const KernelCase& c, std::ostream* os) {
  *os << c.op << " " << c.shape;
}

namespace kernel_cases_detail {

// RMSNorm over [T, C], inputs standard normal. FLOPs 4TC forward (square, sum, scale by rstd and
// weight) + 10TC backward; bytes 4 (2TC + C + T) + 4 (3TC + 2C + T). Tolerances: out, dx, dweight
// 1e-5 + 1e-5 rel, rstd 1e-6 + 1e-6 rel (sums of C fp32 products accumulated in fp64, a few
// hundred fp32 ulps of the outputs' size).
inline KernelCase rmsnorm_case(int64_t t, int64_t c, uint64_t seed) {
  const double tc = static_cast<double>(t * c);
  KernelCase k{"rmsnorm", core::cat("t", t, "_c", c), 14 * tc, 4 * (5 * tc + 3 * c + 2 * t),
               nullptr};
  k.run = [=](KernelBackend& b) {
    const float eps = 1e-5f;
    auto x = normal_f(t * c, seed), w = normal_f(c, seed + 1), dout = normal_f(t * c, seed + 2);
    std::vector<float> out(t * c), rstd(t), dx(t * c), dw(c);
    b.rmsnorm_forward(x.data(), w.data(), t, c, eps, out.data(), rstd.data());
    b.rmsnorm_backward(dout.data(), x.data(), w.data(), rstd.data(), t, c, eps, dx.data(),
                       dw.data());
    std::vector<double> ro(t * c), rr(t), rdx(t * c), rdw(c);
    kernels::ref::rmsnorm_forward(widen(x).data(), widen(w).data(), t, c, eps, ro.data(),
                                  rr.data());
    kernels::ref::rmsnorm_backward(widen(dout).data(), widen(x).data(), widen(w).data(), t, c, eps,
                                   rdx.data(), rdw.data());
    return std::vector<CaseOutput>{{"out", out, ro, 1e-5, 1e-5},
                                   {"rstd", rstd, rr, 1e-6, 1e-6},
                                   {"dx", dx, rdx, 1e-5, 1e-5},
                                   {"dweight", dw, rdw, 1e-5, 1e-5}};
  };
  return k;
}

// SwiGLU over n values, gates normal(0, 3) (both tails of the sigmoid), up and dout standard
// normal. FLOPs 4n forward (exp, add, divide, multiply) + 11n backward; bytes 12n + 20n.
// Tolerances: 1e-6 + 1e-6 rel (a few fp32 ulps: one exp and a handful of products per value).
inline KernelCase swiglu_case(int64_t n, uint64_t seed) {
  const double nn = static_cast<double>(n);
  KernelCase k{"swiglu", core::cat("n", n), 15 * nn, 32 * nn, nullptr};
  k.run = [=](KernelBackend& b) {
    auto g = normal_f(n, seed, 3.0), u = normal_f(n, seed + 1), dout = normal_f(n, seed + 2);
    std::vector<float> out(n), dg(n), du(n);
    b.swiglu_forward(g.data(), u.data(), n, out.data());
    b.swiglu_backward(dout.data(), g.data(), u.data(), n, dg.data(), du.data());
    std::vector<double> ro(n), rdg(n), rdu(n);
    kernels::ref::swiglu_forward(widen(g).data(), widen(u).data(), n, ro.data());
    kernels::ref::swiglu_backward(widen(dout).data(), widen(g).data(), widen(u).data(), n,
                                  rdg.data(), rdu.data());
    return std::vector<CaseOutput>{
        {"out", out, ro, 1e-6, 1e-6}, {"dgate", dg, rdg, 1e-6, 1e-6}, {"dup", du, rdu, 1e-6, 1e-6}};
  };
  return k;
}

// RoPE over [T, H, D] at the given global positions (-1: padding), inputs standard normal.
// FLOPs 3THD forward + 3THD backward (two products and a sum per value; the angle table not
// counted); bytes 2 x 8THD + 4TD (the cos / sin table). Tolerances: 1e-5 + 1e-5 rel (angles up to
// 1e6 rad computed in fp64, cos/sin rounded to fp32, O(1) inputs); padding rows exactly the input.
inline KernelCase rope_case(int64_t h, int64_t d, std::vector<int64_t> pos, double theta,
                            uint64_t seed) {
  const int64_t t = static_cast<int64_t>(pos.size());
  const double thd = static_cast<double>(t * h * d);
  KernelCase k{"rope", core::cat("t", t, "_h", h, "_d", d), 6 * thd,
               16 * thd + 4.0 * static_cast<double>(t * d), nullptr};
  k.run = [=](KernelBackend& b) {
    auto x = normal_f(t * h * d, seed);
    std::vector<float> y(t * h * d), g(t * h * d);
    b.rope_forward(x.data(), pos.data(), t, h, d, theta, y.data());
    b.rope_backward(x.data(), pos.data(), t, h, d, theta, g.data());
    std::vector<double> ry(t * h * d), rg(t * h * d);
    kernels::ref::rope_forward(widen(x).data(), pos.data(), t, h, d, theta, ry.data());
    kernels::ref::rope_backward(widen(x).data(), pos.data(), t, h, d, theta, rg.data());
    std::vector<float> pad_got;
    std::vector<double> pad_want;
    for (int64_t i = 0; i < t; ++i)
      if (pos[i] < 0)
        for (int64_t j = i * h * d; j < (i + 1) * h * d; ++j) {
          pad_got.push_back(y[j]);
          pad_want.push_back(x[j]);
        }
    return std::vector<CaseOutput>{{"forward", y, ry, 1e-5, 1e-5},
                                   {"backward", g, rg, 1e-5, 1e-5},
                                   {"padding rows untouched", pad_got, pad_want, 0, 0}};
  };
  return k;
}

// The rounding bound of a sum of L fp32 products in any order, with or without FMA (Higham,
// Accuracy and Stability of Numerical Algorithms, §3.1): |fl(s) - s| <= gamma_L sum |terms|,
// gamma_L = L u / (1 - L u), u = 2^-24; taken at the largest sum of |terms| of the output.
inline double max_of(const std::vector<double>& v) {
  double m = 0;
  for (double a : v) m = std::max(m, a);
  return m;
}
inline double product_sum_bound(int64_t len, const std::vector<double>& abs_sums) {
  const double lu = static_cast<double>(std::max<int64_t>(len, 1)) * 0x1p-24;
  return lu / (1 - lu) * max_of(abs_sums);
}

// Linear layer y = x w^T over x [T, K], w [N, K], x and dy standard normal, w normal(0, 0.3) (as
// tests/kernels/linear_test.cpp). FLOPs 2TKN forward + 4TKN backward; bytes 4 (TK + NK + TN)
// forward + 4 (TN + 2TK + 2NK) backward. Tolerances, from the sizes: each output is a sum of L
// fp32 products (y: L = K, dx: L = N, dw: L = T), so atol = gamma_L max sum |terms|
// (product_sum_bound), rtol 0: the bound any fp32 summation order meets; the fp32 rounding of the
// ref backend (u |y|) is below it. A wrong index or sign moves an output by a whole term, which is
// ~1/L of sum |terms|, far above gamma_L ~ L 6e-8 of it.
inline KernelCase linear_case(int64_t t, int64_t k, int64_t n, uint64_t seed) {
  const double tkn = static_cast<double>(t * k * n);
  KernelCase c{"linear", core::cat("t", t, "_k", k, "_n", n), 6 * tkn,
               4.0 * static_cast<double>(3 * t * k + 3 * n * k + 2 * t * n), nullptr};
  c.run = [=](KernelBackend& b) {
    auto x = normal_f(t * k, seed), w = normal_f(n * k, seed + 1, 0.3),
         dy = normal_f(t * n, seed + 2);
    std::vector<float> y(t * n), dx(t * k), dw(n * k);
    b.linear_forward(x.data(), w.data(), t, k, n, y.data());
    b.linear_backward(dy.data(), x.data(), w.data(), t, k, n, dx.data(), dw.data());
    std::vector<double> ry(t * n), ay(t * n), rdx(t * k), adx(t * k), rdw(n * k), adw(n * k);
    const auto xd = widen(x), wd = widen(w), dyd = widen(dy);
    linear_ref_forward(xd.data(), wd.data(), t, k, n, ry.data(), ay.data());
    linear_ref_backward(dyd.data(), xd.data(), wd.data(), t, k, n, rdx.data(), rdw.data(),
                        adx.data(), adw.data());
    return std::vector<CaseOutput>{{"y", y, ry, product_sum_bound(k, ay), 0},
                                   {"dx", dx, rdx, product_sum_bound(n, adx), 0},
                                   {"dweight", dw, rdw, product_sum_bound(t, adw), 0}};
  };
  return c;
}

// Attention of a query block at global positions q0.. against a key block at k0.. (causal or
// full mask, GQA when Hkv < Hq), scale 1/sqrt(D), q, k, v and dout standard normal. FLOPs per head
// and visible (query, key) pair: 4D + 1 forward (S, exp, P V), 10D + 3 backward (S again, exp,
// dP, dS, dQ, dK, dV); bytes 4 (2 TqHqD + 2 TkHkvD + TqHq) forward + 4 (4 TqHqD + 4 TkHkvD +
// 3 TqHq) backward (q, o, dout, dq; k, v, dk, dv; lse and delta). Tolerances: o, lse 5e-6 +
// 5e-6 rel; dq, dk, dv 2e-5 + 2e-5 rel (those of tests/kernels/cpu_attention_test.cpp, which the
// same kernels meet at D = 64, Tk = 600: longer sums than any case here). From the sizes: a score
// is a D-term fp32 dot product times 1/sqrt(D), rounded by ~u sqrt(D) <= 3e-7 at D <= 24 (u =
// 2^-24; random-walk estimate: the worst-case gamma_D bound, ~u D^1.5 = 7e-6 at D = 24, no real
// input attains); the softmax turns it into a relative error of the weights, so o (|o| <~ 3) and
// lse (|lse| <~ 8, itself rounded to fp32, u |lse| <= 5e-7) carry <~ 1e-6, 5x below the bound; the
// gradients chain three more products (dP, dS, then dq, dk, dv over Tk or Tq terms), ~4x that.
// Measured worst over these cases (AVX2 and portable variants): 0.06 of the bound for o, 0.03 for
// the gradients; a wrong mask entry, GQA head or tile merge moves outputs by O(0.1). Rows that see
// no key: lse exactly -inf (a 0/1 flag compared exactly), o and gradients 0 within the bounds.
inline KernelCase attention_case(bool causal, int64_t tq, int64_t tk, int64_t hq, int64_t hkv,
                                 int64_t d, int64_t q0, int64_t k0, uint64_t seed) {
  std::vector<int64_t> qpos(tq), kpos(tk);
  for (int64_t i = 0; i < tq; ++i) qpos[i] = q0 + i;
  for (int64_t j = 0; j < tk; ++j) kpos[j] = k0 + j;
  kernels::Mask mask;
  mask.causal = causal;
  double pairs = 0;
  for (int64_t i = 0; i < tq; ++i)
    for (int64_t j = 0; j < tk; ++j) pairs += kernels::visible(mask, qpos[i], kpos[j], 0, 0);
  const kernels::ref::AttnDims dm{tq, tk, hq, hkv, d};
  const double nq = static_cast<double>(tq * hq * d), nk = static_cast<double>(tk * hkv * d),
               rows = static_cast<double>(tq * hq);
  const std::string at = q0 == 0 && k0 == 0 ? std::string() : core::cat("_qpos", q0, "_kpos", k0);
  KernelCase c{"attention",
               core::cat(causal ? "causal" : "full", "_tq", tq, "_tk", tk, "_hq", hq, "_hkv", hkv,
                         "_d", d, at),
               static_cast<double>(hq) * pairs * static_cast<double>(14 * d + 4),
               4 * (6 * nq + 6 * nk + 4 * rows), nullptr};
  c.run = [=](KernelBackend& b) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    auto q = normal_f(tq * hq * d, seed), k = normal_f(tk * hkv * d, seed + 1),
         v = normal_f(tk * hkv * d, seed + 2), dout = normal_f(tq * hq * d, seed + 3);
    const kernels::Tokens qt{qpos.data(), nullptr}, kt{kpos.data(), nullptr};
    std::vector<float> o(q.size()), lse(tq * hq), dq(q.size()), dk(k.size()), dv(v.size());
    b.attention_forward(q.data(), k.data(), v.data(), qt, kt, mask, scale, dm, o.data(),
                        lse.data());
    b.attention_backward(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), qt, kt,
                         mask, scale, dm, dq.data(), dk.data(), dv.data());
    std::vector<double> ro(q.size()), rlse(tq * hq), rdq(q.size()), rdk(k.size()), rdv(v.size());
    const auto qd = widen(q), kd = widen(k), vd = widen(v), dd = widen(dout);
    kernels::ref::attention_forward(qd.data(), kd.data(), vd.data(), qt, kt, mask, scale, dm,
                                    ro.data(), rlse.data());
    kernels::ref::attention_backward(qd.data(), kd.data(), vd.data(), dd.data(), qt, kt, mask,
                                     scale, dm, rdq.data(), rdk.data(), rdv.data());
    // Rows that see no key: lse = -inf exactly (compared as a 0/1 flag); the others within
    // tolerance.
    std::vector<float> lse_got, empty_got;
    std::vector<double> lse_want, empty_want;
    for (size_t i = 0; i < rlse.size(); ++i) {
      const bool want_empty = std::isinf(rlse[i]) && rlse[i] < 0;
      empty_got.push_back(std::isinf(lse[i]) && lse[i] < 0 ? 1.0f : 0.0f);
      empty_want.push_back(want_empty ? 1.0 : 0.0);
      if (!want_empty) {
        lse_got.push_back(lse[i]);
        lse_want.push_back(rlse[i]);
      }
    }
    return std::vector<CaseOutput>{
        {"o", o, ro, 5e-6, 5e-6},
        {"lse", lse_got, lse_want, 5e-6, 5e-6},
        {"lse -inf exactly where no key is visible", empty_got, empty_want, 0, 0},
        {"dq", dq, rdq, 2e-5, 2e-5},
        {"dk", dk, rdk, 2e-5, 2e-5},
        {"dv", dv, rdv, 2e-5, 2e-5}};
  };
  return c;
}

// Rounding bounds of the LM head's fp32 results, to first order in u = 2^-24, from the sizes
// and the data (the reference's logits z, lse and dlogits g = grad_scale (softmax - onehot)):
//   a logit carries dz <= gamma_C Z, Z = max sum_c |h w| (product_sum_bound);
//   a probability exp(z - lse) carries relative error eps_p <= 2 dz + u (L + 6): z and lse are
//   each off by dz, rounding lse and z - lse to fp32 (L = max |lse| + max |z - lse|), the
//   exponential (~2u), the grad_scale product and the one-hot subtraction;
//   dhidden = sum_v g w (V terms) and dweight = sum_t g h (T terms) are then within
//   (gamma_L + eps_p) sum |terms|, at the largest sum |terms| of the output;
//   the loss sum (fp64) within n (2 dz + u (max |lse| + 3)): each of the n counted rows is
//   lse - z_label, with lse's exponentials summed in fp64 and lse rounded to fp32.
// These hold for any summation order (a GPU's included) with every rounding at its worst, so the
// errors measured sit far inside them: 0.0006 to 0.04 of the bound.
struct LmHeadBounds {
  double loss = 0, dhidden = 0, dweight = 0;
};
inline LmHeadBounds lm_head_bounds(const std::vector<double>& h, const std::vector<double>& w,
                                   const std::vector<int32_t>& labels, int64_t t, int64_t c,
                                   int64_t v, int32_t ignore_index, double grad_scale) {
  std::vector<double> z(t * v), zabs(t * v), lse(t), g(t * v, 0.0);
  kernels::ref::lm_head_ce_forward(h.data(), w.data(), labels.data(), {t, c, v}, nullptr,
                                   lse.data(), ignore_index);
  linear_ref_forward(h.data(), w.data(), t, c, v, z.data(), zabs.data());
  double lmax = 0, dmax = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < t; ++i) {
    lmax = std::max(lmax, std::fabs(lse[i]));
    for (int64_t j = 0; j < v; ++j) dmax = std::max(dmax, std::fabs(z[i * v + j] - lse[i]));
    if (labels[i] == ignore_index) continue;
    ++n;
    for (int64_t j = 0; j < v; ++j)
      g[i * v + j] = grad_scale * (std::exp(z[i * v + j] - lse[i]) - (j == labels[i] ? 1 : 0));
  }
  const double u = 0x1p-24, dz = product_sum_bound(c, zabs);
  const double eps_p = 2 * dz + u * (lmax + dmax + 6);
  std::vector<double> dh(t * c), dw(v * c), dh_abs(t * c), dw_abs(v * c);
  linear_ref_backward(g.data(), h.data(), w.data(), t, c, v, dh.data(), dw.data(), dh_abs.data(),
                      dw_abs.data());
  return {static_cast<double>(n) * (2 * dz + u * (lmax + 3)),
          product_sum_bound(v, dh_abs) + eps_p * max_of(dh_abs),
          product_sum_bound(t, dw_abs) + eps_p * max_of(dw_abs)};
}

// LM head + cross-entropy over hidden [T, C] standard normal, weight [V, C] normal(0, 0.5),
// labels uniform in [0, V) with every 5th token from the 4th on ignored, grad_scale 1 / count
// (the mean loss). token_tile / vocab_tile: the CPU fused path's tiles (0: its default); a vocab
// tile below V makes the online logsumexp merge across tiles. FLOPs 6TCV (logits, dhidden,
// dweight) + 6TV (logsumexp and softmax: subtract, exp, add / multiply); bytes 4 (2TC + 2VC + T)
// (hidden, weight, labels read; dhidden, dweight written; the [Bs, V] logits tile stays in
// cache). Tolerances: count exact; loss sum, dhidden, dweight atol lm_head_bounds, rtol 0. A lost
// vocabulary tile, a wrong one-hot sign (BurstEngine's printed Algorithm 3) or a missed ignore
// moves them by O(grad_scale), orders above the bounds (~1e-4 grad_scale at most here).
inline KernelCase lm_head_case(int64_t t, int64_t c, int64_t v, int64_t token_tile,
                               int64_t vocab_tile, int32_t ignore_index, uint64_t seed) {
  const double tv = static_cast<double>(t * v);
  const auto tile = [](int64_t n) { return n > 0 ? core::cat(n) : std::string("auto"); };
  const std::string ign =
      ignore_index == kernels::ref::kIgnoreIndex
          ? std::string()
          : core::cat("_ignore", ignore_index < 0 ? "_minus" : "_", std::abs(ignore_index));
  KernelCase k{
      "lm_head_ce",
      core::cat("t", t, "_c", c, "_v", v, "_bs", tile(token_tile), "_bv", tile(vocab_tile), ign),
      6 * tv * static_cast<double>(c) + 6 * tv,
      4.0 * static_cast<double>(2 * t * c + 2 * v * c + t), nullptr};
  k.run = [=](KernelBackend& b) {
    auto h = normal_f(t * c, seed), w = normal_f(v * c, seed + 1, 0.5);
    std::vector<int32_t> labels(t);
    core::fill_randint(labels.data(), t, seed + 2, static_cast<int32_t>(v));
    int64_t n = 0;
    for (int64_t i = 0; i < t; ++i) {
      if (i % 5 == 3) labels[i] = ignore_index;
      n += labels[i] != ignore_index;
    }
    const double gs = 1.0 / static_cast<double>(std::max<int64_t>(n, 1));
    double sum = 0;
    int64_t count = -1;
    std::vector<float> dh(t * c), dw(v * c);
    b.lm_head_ce(h.data(), w.data(), labels.data(), t, c, v, ignore_index, gs, token_tile,
                 vocab_tile, &sum, &count, dh.data(), dw.data());
    const auto hd = widen(h), wd = widen(w);
    const kernels::ref::LmHeadDims d{t, c, v};
    const auto r = kernels::ref::lm_head_ce_forward(hd.data(), wd.data(), labels.data(), d, nullptr,
                                                    nullptr, ignore_index);
    std::vector<double> rdh(t * c), rdw(v * c);
    kernels::ref::lm_head_ce_backward(hd.data(), wd.data(), labels.data(), d, gs, rdh.data(),
                                      rdw.data(), ignore_index);
    const LmHeadBounds tol = lm_head_bounds(hd, wd, labels, t, c, v, ignore_index, gs);
    return std::vector<CaseOutput>{
        {"loss sum", std::vector<double>{sum}, std::vector<double>{r.sum}, tol.loss, 0},
        {"count", std::vector<double>{static_cast<double>(count)},
         std::vector<double>{static_cast<double>(r.count)}, 0, 0},
        {"dhidden", dh, rdh, tol.dhidden, 0},
        {"dweight", dw, rdw, tol.dweight, 0}};
  };
  return k;
}

// Merging two attention partials (O, LSE) of [T, H] rows of D, o and o_other standard normal,
// lse and lse_other normal(0, 3), with every 7 rows one of each regime: this side empty (lse =
// -inf, its o NaN: the contract says it is not read), the other side empty (o_other NaN), both
// empty (o NaN, must become 0), both near 1000 (the stable form's reason: exp(1000) overflows),
// one side dominating by 30 (log1p's reason), and two ordinary rows. FLOPs 3THD + 8TH (two
// products and a sum per value; max, two exps, a division, two products, log1p per row); bytes
// 4 (3THD + 3TH). Tolerances, from first-order rounding (u = 2^-24): each weight w = exp(a - m) /
// (exp(a - m) + exp(b - m)) carries |dw| <= w (u |a - b| + 6u) <= 7u (w |a - b| <= 1/e), so o' =
// wa x + wb y is within 10u max(|x| + |y|), rtol 0; lse' = m + log1p(exp(-|a - b|)) within 4u
// |lse'| + 1e-6 (four roundings of at most |lse'|, the small term's few ulps). Rows with no side
// get lse exactly -inf (a 0/1 flag compared exactly). A swapped weight or a dropped log1p term
// moves o by O(1) and lse by up to log 2.
inline KernelCase merge_case(int64_t t, int64_t h, int64_t d, uint64_t seed) {
  const double rows = static_cast<double>(t * h), n = rows * static_cast<double>(d);
  KernelCase k{"merge_partials", core::cat("t", t, "_h", h, "_d", d), 3 * n + 8 * rows,
               4 * (3 * n + 3 * rows), nullptr};
  k.run = [=](KernelBackend& b) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
    auto o = normal_f(t * h * d, seed), oo = normal_f(t * h * d, seed + 1);
    auto la = normal_f(t * h, seed + 2, 3.0), lb = normal_f(t * h, seed + 3, 3.0);
    double scale = 0;  // max |x| + |y| over the rows both sides fill
    for (int64_t r = 0; r < t * h; ++r) {
      float* x = o.data() + r * d;
      float* y = oo.data() + r * d;
      switch (r % 7) {
        case 1:
          la[r] = -kInf;
          std::fill(x, x + d, kNaN);
          break;
        case 2:
          lb[r] = -kInf;
          std::fill(y, y + d, kNaN);
          break;
        case 3:
          la[r] = lb[r] = -kInf;
          std::fill(x, x + d, kNaN);
          std::fill(y, y + d, kNaN);
          break;
        case 4:
          la[r] += 1000.0f;
          lb[r] = la[r] + 0.25f * lb[r];
          break;
        case 5:
          lb[r] = la[r] - 30.0f;
          break;
        default:
          break;
      }
      if (r % 7 == 0 || r % 7 >= 4)
        for (int64_t j = 0; j < d; ++j)
          scale = std::max(scale, std::fabs(static_cast<double>(x[j])) + std::fabs(y[j]));
    }
    auto ro = widen(o), rl = widen(la);
    kernels::ref::merge_partials(ro.data(), rl.data(), widen(oo).data(), widen(lb).data(), t, h, d);
    b.merge_partials(o.data(), la.data(), oo.data(), lb.data(), t, h, d);
    std::vector<float> lse_got, empty_got;
    std::vector<double> lse_want, empty_want;
    double lmax = 0;
    for (size_t r = 0; r < rl.size(); ++r) {
      const bool want_empty = std::isinf(rl[r]) && rl[r] < 0;
      empty_got.push_back(std::isinf(la[r]) && la[r] < 0 ? 1.0f : 0.0f);
      empty_want.push_back(want_empty ? 1.0 : 0.0);
      if (!want_empty) {
        lse_got.push_back(la[r]);
        lse_want.push_back(rl[r]);
        lmax = std::max(lmax, std::fabs(rl[r]));
      }
    }
    const double u = 0x1p-24;
    return std::vector<CaseOutput>{
        {"o", o, ro, 10 * u * scale, 0},
        {"lse", lse_got, lse_want, 4 * u * lmax + 1e-6, 0},
        {"lse -inf exactly where neither side saw a key", empty_got, empty_want, 0, 0}};
  };
  return k;
}

// The backward's delta = rowsum(dout * o) over [T, H] rows of D, both standard normal, the output
// poisoned with NaN (overwritten, every row). FLOPs 2THD; bytes 4 (2THD + TH). Tolerance: a sum
// of D fp32 products, product_sum_bound(D, sum |terms|), rtol 0 (as the linear case).
inline KernelCase delta_case(int64_t t, int64_t h, int64_t d, uint64_t seed) {
  const double rows = static_cast<double>(t * h), n = rows * static_cast<double>(d);
  KernelCase k{"attention_delta", core::cat("t", t, "_h", h, "_d", d), 2 * n, 4 * (2 * n + rows),
               nullptr};
  k.run = [=](KernelBackend& b) {
    auto o = normal_f(t * h * d, seed), dout = normal_f(t * h * d, seed + 1);
    std::vector<float> delta(t * h, std::numeric_limits<float>::quiet_NaN());
    b.attention_delta(dout.data(), o.data(), t, h, d, delta.data());
    std::vector<double> want(t * h), abs_sums(t * h, 0.0);
    kernels::ref::attention_d(widen(o).data(), widen(dout).data(), t, h, d, want.data());
    for (int64_t r = 0; r < t * h; ++r)
      for (int64_t j = 0; j < d; ++j)
        abs_sums[r] += std::fabs(static_cast<double>(o[r * d + j]) * dout[r * d + j]);
    return std::vector<CaseOutput>{{"delta", delta, want, product_sum_bound(d, abs_sums), 0}};
  };
  return k;
}

}  // namespace kernel_cases_detail

/// Every case. The first rmsnorm, swiglu and rope case is the one its per-op test file held
/// before the registry (same shape, seeds and tolerances); the first linear and LM head cases
/// take the inputs of linear_test.cpp and lm_head_test.cpp (which keep them, with what is
/// particular to the CPU kernels). The others are odd sizes: one element, lengths that are no
/// multiple of any SIMD width, rows past the OpenMP threshold (2^16 elements), the 128-row GEMM
/// panels or the attention tiles (256 x 512 forward, 256 x 256 backward), blocks at ring offsets.
inline const std::vector<KernelCase>& kernel_cases() {
  using namespace kernel_cases_detail;
  static const std::vector<KernelCase> cases = {
      rmsnorm_case(6, 24, 3),
      rmsnorm_case(1, 1, 20),
      rmsnorm_case(7, 33, 23),
      rmsnorm_case(300, 256, 26),
      swiglu_case(64, 10),
      swiglu_case(1, 30),
      swiglu_case(37, 33),
      swiglu_case(4099, 36),
      rope_case(3, 8, {0, 1, -1, 4097, 1000000, 77}, 10000.0, 9),
      rope_case(1, 2, {0, -1, 3, 999999, 2}, 500000.0, 40),
      rope_case(5, 6, {-1, 12, 0}, 10000.0, 41),
      linear_case(7, 12, 9, 6),
      linear_case(7, 33, 17, 50),
      linear_case(1, 1, 1, 53),
      linear_case(1, 33, 17, 56),
      linear_case(130, 65, 129, 59),
      attention_case(true, 13, 13, 4, 2, 8, 0, 0, 60),
      attention_case(false, 13, 37, 3, 1, 24, 0, 0, 64),
      attention_case(true, 37, 37, 3, 1, 24, 0, 0, 68),
      attention_case(false, 37, 13, 4, 2, 24, 0, 0, 72),
      attention_case(true, 13, 37, 4, 2, 8, 0, 5, 76),
      attention_case(true, 37, 13, 3, 1, 8, 6, 0, 80),
      attention_case(false, 1, 1, 1, 1, 1, 0, 0, 84),
      attention_case(true, 520, 520, 2, 1, 8, 0, 0, 88),
      lm_head_case(37, 16, 53, 8, 7, kernels::ref::kIgnoreIndex, 100),
      lm_head_case(13, 19, 37, 0, 8, kernels::ref::kIgnoreIndex, 110),
      lm_head_case(9, 7, 37, 0, 16, -1, 120),
      lm_head_case(1, 3, 5, 0, 2, kernels::ref::kIgnoreIndex, 130),
      lm_head_case(130, 24, 300, 0, 0, kernels::ref::kIgnoreIndex, 140),
      merge_case(13, 4, 24, 150),
      merge_case(1, 1, 1, 154),
      merge_case(37, 3, 130, 158),
      merge_case(700, 2, 64, 162),
      delta_case(13, 4, 24, 170),
      delta_case(1, 1, 1, 172),
      delta_case(37, 3, 130, 174),
  };
  return cases;
}

/// The registry's check of one case on one backend, the body of every device's TEST_P (as
/// test-backend-ops runs one check over every backend): records the case's FLOPs and bytes, runs
/// it, and holds each output to its tolerance against the fp64 reference.
inline void check_case(KernelBackend& backend, const KernelCase& c) {
  ::testing::Test::RecordProperty("flops", std::to_string(c.flops));
  ::testing::Test::RecordProperty("bytes", std::to_string(c.bytes));
  EXPECT_GT(c.flops, 0);
  EXPECT_GT(c.bytes, 0);
  const std::vector<CaseOutput> outs = c.run(backend);
  ASSERT_FALSE(outs.empty());
  for (const CaseOutput& o : outs) {
    EXPECT_FALSE(o.want.empty()) << o.name;
    record_error(o.got, o.want, o.name);
    expect_close(o.got, o.want, o.atol, o.rtol,
                 backend.name() + " " + c.op + " " + c.shape + " " + o.name);
  }
}

/// gtest's name of a (backend, case) parameter: backend_op_shape.
inline std::string case_name(
    const ::testing::TestParamInfo<std::tuple<std::shared_ptr<KernelBackend>, KernelCase>>& info) {
  const auto& [backend, c] = info.param;
  return backend->name() + "_" + c.op + "_" + c.shape;
}

}  // namespace longseq::test
