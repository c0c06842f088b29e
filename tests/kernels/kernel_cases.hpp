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
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/rmsnorm.hpp"
#include "longseq/kernels/cpu/rope.hpp"
#include "longseq/kernels/cpu/swiglu.hpp"
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
};

namespace kernel_cases_detail {

inline std::vector<float> narrow(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
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

 private:
  static constexpr int kThreads = 2;
};

}  // namespace kernel_cases_detail

/// The backends of this build every case runs on (a CUDA build's test_cuda adds its own).
inline std::vector<std::shared_ptr<KernelBackend>> host_backends() {
  return {std::make_shared<kernel_cases_detail::RefBackend>(),
          std::make_shared<kernel_cases_detail::CpuBackend>()};
}

/// One output of a case on one backend, with the fp64 reference's value and its tolerance
/// (|got - want| <= atol + rtol |want|).
struct CaseOutput {
  std::string name;
  std::vector<float> got;
  std::vector<double> want;
  double atol = 0, rtol = 0;
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

}  // namespace kernel_cases_detail

/// Every case. The first of each op is the one its per-op test file held before the registry
/// (same shape, seeds and tolerances); the others are odd sizes: one element, lengths that are no
/// multiple of any SIMD width, rows past the OpenMP threshold (2^16 elements).
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
  };
  return cases;
}

}  // namespace longseq::test
