// The linear layer (kernels/cpu/linear, over kernels/gemm) against plain fp64 products (a matrix
// product has no separate fp64 twin in kernels/ref: the spec is the sum itself, written here).
// The fp32 comparison on every backend at odd shapes is the linear cases of kernel_cases.hpp.
// Inputs standard normal, weights normal(0, 0.3). Tolerance 1e-5 + 1e-4 rel (sums of K, N or T
// fp32 products). bf16 compute rounds both operands of every product: its reference is the same
// fp64 sum over the bf16-rounded operands (bf16 products are exact in fp32), same tolerance.
#include "longseq/kernels/cpu/linear.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/gemm_reference.hpp"
#include "longseq/core/dtype.hpp"
#include "model/model_test_util.hpp"

namespace {

namespace kc = longseq::kernels::cpu;
namespace lt = longseq::test;
using longseq::core::DType;

using longseq::test::gemm::linear_reference;
using longseq::test::gemm::rounded;
using Ref = longseq::test::gemm::LinearRef;

TEST(CpuLinear, ForwardBackwardMatchProducts) {
  const int64_t t = 7, k = 12, n = 9;
  auto in = lt::normal_f(t * k, 6), w = lt::normal_f(n * k, 7, 0.3), dout = lt::normal_f(t * n, 8);
  for (DType p : {DType::f32, DType::bf16}) {
    const bool f32 = p == DType::f32;
    const Ref r = f32 ? linear_reference(in, w, dout, t, k, n)
                      : linear_reference(rounded(in), rounded(w), rounded(dout), t, k, n);
    const double tol = 1e-4, atol = 1e-5;
    const std::string tag = f32 ? " f32" : " bf16";
    std::vector<float> out(t * n), din(t * k), dw(n * k, 0.0f);
    kc::linear_forward(in.data(), w.data(), t, k, n, out.data(), false, 2, p);
    kc::linear_backward(dout.data(), in.data(), w.data(), t, k, n, din.data(), false, dw.data(), 2,
                        p);
    lt::expect_close(out, r.out, atol, tol, "linear out" + tag);
    lt::expect_close(din, r.din, atol, tol, "linear din" + tag);
    lt::expect_close(dw, r.dw, atol, tol, "linear dweight" + tag);
  }
}

TEST(CpuLinear, AccumulatesAndSkipsNullInputGradient) {
  const int64_t t = 5, k = 4, n = 3;
  auto in = lt::normal_f(t * k, 9), w = lt::normal_f(n * k, 10, 0.3),
       dout = lt::normal_f(t * n, 11);
  const Ref r = linear_reference(in, w, dout, t, k, n);
  std::vector<float> out(t * n, 2.0f), din(t * k, -1.0f), dw(n * k, 0.5f);
  kc::linear_forward(in.data(), w.data(), t, k, n, out.data(), true, 1);
  kc::linear_backward(dout.data(), in.data(), w.data(), t, k, n, din.data(), true, dw.data(), 1);
  std::vector<double> want_out(r.out), want_din(r.din), want_dw(r.dw);
  for (double& v : want_out) v += 2.0;
  for (double& v : want_din) v -= 1.0;
  for (double& v : want_dw) v += 0.5;
  lt::expect_close(out, want_out, 1e-5, 1e-4, "linear out +=");
  lt::expect_close(din, want_din, 1e-5, 1e-4, "linear din +=");
  lt::expect_close(dw, want_dw, 1e-5, 1e-4, "linear dweight +=");
  // din null: only the weight gradient, accumulated once more.
  kc::linear_backward(dout.data(), in.data(), w.data(), t, k, n, nullptr, false, dw.data(), 1);
  for (size_t i = 0; i < want_dw.size(); ++i) want_dw[i] += r.dw[i];
  lt::expect_close(dw, want_dw, 1e-5, 1e-4, "linear dweight, din null");
}

}  // namespace
