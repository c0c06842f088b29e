#pragma once
// The CUDA backend of the kernel registry (tests/kernels/kernel_cases.hpp): kernels/cuda behind
// KernelBackend, so that every registry case runs on the GPU against the fp64 reference
// (kernel_cases_test.cpp in this folder). Kept in its own file: the registry grows virtuals
// (attention, linear, LM head) that this backend then implements here.
//
// Implements: rmsnorm, swiglu, rope and linear (forward and backward). Not yet (supports() says
// so, and their cases are not instantiated): attention and lm_head_ce, issue "GPU II". Each call
// copies its inputs to GPU 0, runs the kernel on the legacy default stream and copies the outputs
// back (blocking copies on the same stream: ordered). The GPU is activated on first use, never at
// construction, so a build without a GPU can still list the cases (they skip).
#include <algorithm>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.hpp"
#include "kernels/kernel_cases.hpp"
#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/gemm.hpp"
#include "longseq/kernels/cuda/rmsnorm.hpp"
#include "longseq/kernels/cuda/rope.hpp"
#include "longseq/kernels/cuda/swiglu.hpp"

namespace longseq::test {

class CudaBackend final : public KernelBackend {
 public:
  std::string name() const override { return "cuda"; }
  bool supports(const std::string& op) const override {
    return op != "attention" && op != "lm_head_ce";
  }

  void rmsnorm_forward(const float* x, const float* w, int64_t t, int64_t c, float eps, float* out,
                       float* rstd) override {
    const core::Exec ex = gpu_exec();
    auto dx = up(x, t * c), dw = up(w, c);
    core::Buffer<float> dout(n_or_1(t * c), ex.device), dr(n_or_1(t), ex.device);
    kernels::cuda::rmsnorm_forward(dx.data(), dw.data(), t, c, eps, dout.data(), dr.data(), ex);
    down(dout, out, t * c);
    down(dr, rstd, t);
  }
  void rmsnorm_backward(const float* dout, const float* x, const float* w, const float* rstd,
                        int64_t t, int64_t c, float, float* dx, float* dw) override {
    const core::Exec ex = gpu_exec();
    auto dd = up(dout, t * c), dxx = up(x, t * c), dww = up(w, c), dr = up(rstd, t);
    // dweight accumulates: it starts from zero (a new device buffer is zeroed).
    core::Buffer<float> gx(n_or_1(t * c), ex.device), gw(n_or_1(c), ex.device);
    kernels::cuda::rmsnorm_backward(dd.data(), dxx.data(), dww.data(), dr.data(), t, c, gx.data(),
                                    gw.data(), false, ex);
    down(gx, dx, t * c);
    down(gw, dw, c);
  }
  void swiglu_forward(const float* g, const float* u, int64_t n, float* out) override {
    const core::Exec ex = gpu_exec();
    auto dg = up(g, n), du = up(u, n);
    core::Buffer<float> o(n_or_1(n), ex.device);
    kernels::cuda::swiglu_forward(dg.data(), du.data(), n, o.data(), ex);
    down(o, out, n);
  }
  void swiglu_backward(const float* dout, const float* g, const float* u, int64_t n, float* dg,
                       float* du) override {
    const core::Exec ex = gpu_exec();
    auto dd = up(dout, n), dgg = up(g, n), duu = up(u, n);
    core::Buffer<float> a(n_or_1(n), ex.device), b(n_or_1(n), ex.device);
    kernels::cuda::swiglu_backward(dd.data(), dgg.data(), duu.data(), n, a.data(), b.data(), ex);
    down(a, dg, n);
    down(b, du, n);
  }
  void rope_forward(const float* x, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                    double theta, float* y) override {
    const core::Exec ex = gpu_exec();
    auto dy = up(x, t * h * d);
    kernels::cuda::RopeTable(pos, t, d, theta, ex).forward(dy.data(), h, ex);
    down(dy, y, t * h * d);
  }
  void rope_backward(const float* dy, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                     double theta, float* dx) override {
    const core::Exec ex = gpu_exec();
    auto g = up(dy, t * h * d);
    kernels::cuda::RopeTable(pos, t, d, theta, ex).backward(g.data(), h, ex);
    down(g, dx, t * h * d);
  }
  void linear_forward(const float* x, const float* w, int64_t t, int64_t k, int64_t n,
                      float* y) override {
    const core::Exec ex = gpu_exec();
    auto dx = up(x, t * k), dw = up(w, n * k);
    core::Buffer<float> dy(n_or_1(t * n), ex.device);
    kernels::cuda::linear_forward(dx.data(), dw.data(), t, k, n, dy.data(), false, ex);
    down(dy, y, t * n);
  }
  void linear_backward(const float* dy, const float* x, const float* w, int64_t t, int64_t k,
                       int64_t n, float* dx, float* dw) override {
    const core::Exec ex = gpu_exec();
    auto ddy = up(dy, t * n), ddx = up(x, t * k), ddw = up(w, n * k);
    // dweight accumulates: it starts from zero (a new device buffer is zeroed).
    core::Buffer<float> gx(n_or_1(t * k), ex.device), gw(n_or_1(n * k), ex.device);
    kernels::cuda::linear_backward(ddy.data(), ddx.data(), ddw.data(), t, k, n, gx.data(), false,
                                   gw.data(), ex);
    down(gx, dx, t * k);
    down(gw, dw, n * k);
  }
  // No GPU kernels yet (supports() is false, so no case calls these).
  void attention_forward(const float*, const float*, const float*, const kernels::Tokens&,
                         const kernels::Tokens&, const kernels::Mask&, float,
                         const kernels::ref::AttnDims&, float*, float*) override {
    unsupported("attention_forward");
  }
  void attention_backward(const float*, const float*, const float*, const float*, const float*,
                          const float*, const kernels::Tokens&, const kernels::Tokens&,
                          const kernels::Mask&, float, const kernels::ref::AttnDims&, float*,
                          float*, float*) override {
    unsupported("attention_backward");
  }
  void lm_head_ce(const float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int32_t,
                  double, int64_t, int64_t, double*, int64_t*, float*, float*) override {
    unsupported("lm_head_ce");
  }

 private:
  [[noreturn]] static void unsupported(const char* op) {
    core::check_failed(__FILE__, __LINE__, "supports(op)",
                       core::cat("cuda backend: ", op, " has no GPU kernel yet"));
  }
  static size_t n_or_1(int64_t n) { return n > 0 ? static_cast<size_t>(n) : 1; }
  static core::Buffer<float> up(const float* p, int64_t n) {
    return upload(std::vector<float>(p, p + n), "case");
  }
  static void down(const core::Buffer<float>& d, float* out, int64_t n) {
    const std::vector<float> h = download(d, static_cast<size_t>(n));
    std::copy(h.begin(), h.end(), out);
  }
};

}  // namespace longseq::test
