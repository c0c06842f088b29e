// The fast RMSNorm (kernels/cpu/rmsnorm) against its fp64 twin (kernels/ref/rmsnorm), whose own
// gradients are checked by finite differences in ref_ops_test.cpp and against PyTorch in
// kernels.ref_torch. Inputs standard normal, shapes tiny. Tolerances (|out - ref| <= atol +
// rtol |ref|): out, dx, dweight 1e-5 + 1e-5 rel, rstd 1e-6 + 1e-6 rel (sums of C fp32 products
// accumulated in fp64, a few hundred fp32 ulps of the outputs' size).
#include "longseq/kernels/cpu/rmsnorm.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "longseq/kernels/ref/rmsnorm.hpp"
#include "model/model_test_util.hpp"

namespace {

namespace kc = longseq::kernels::cpu;
namespace kr = longseq::kernels::ref;
namespace lt = longseq::test;

TEST(CpuRmsNorm, MatchesReference) {
  const int64_t t = 6, c = 24;
  const float eps = 1e-5f;
  std::vector<float> x = lt::normal_f(t * c, 3), w = lt::normal_f(c, 4),
                     dout = lt::normal_f(t * c, 5);
  std::vector<float> out(t * c), rstd(t), dx(t * c), dw(c, 0.0f);
  kc::rmsnorm_forward(x.data(), w.data(), t, c, eps, out.data(), rstd.data(), 2);
  kc::rmsnorm_backward(dout.data(), x.data(), w.data(), rstd.data(), t, c, dx.data(), dw.data(),
                       false, 2);
  auto xd = lt::widen(x), wd = lt::widen(w), dd = lt::widen(dout);
  std::vector<double> ro(t * c), rr(t), rdx(t * c), rdw(c);
  kr::rmsnorm_forward(xd.data(), wd.data(), t, c, eps, ro.data(), rr.data());
  kr::rmsnorm_backward(dd.data(), xd.data(), wd.data(), t, c, eps, rdx.data(), rdw.data());
  lt::expect_close(out, ro, 1e-5, 1e-5, "rmsnorm out");
  lt::expect_close(rstd, rr, 1e-6, 1e-6, "rmsnorm rstd");
  lt::expect_close(dx, rdx, 1e-5, 1e-5, "rmsnorm dx");
  lt::expect_close(dw, rdw, 1e-5, 1e-5, "rmsnorm dweight");
  // accumulate mode adds
  std::vector<float> dx2(t * c, 1.0f);
  std::vector<float> dw2(c, 0.0f);
  kc::rmsnorm_backward(dout.data(), x.data(), w.data(), rstd.data(), t, c, dx2.data(), dw2.data(),
                       true, 1);
  for (int64_t i = 0; i < t * c; ++i) EXPECT_NEAR(dx2[i], dx[i] + 1.0f, 1e-6);
}

// Above the OpenMP threshold (2^16 elements) the rows are split over threads; the bits must not
// depend on the thread count.
TEST(CpuRmsNorm, ThreadsDoNotChangeBits) {
  const int64_t t = 300, c = 256;
  auto x = lt::normal_f(t * c, 6), w = lt::normal_f(c, 7), dout = lt::normal_f(t * c, 8);
  std::vector<float> o1(t * c), o2(t * c), r1(t), r2(t), d1(t * c), d2(t * c), w1(c, 0.0f),
      w2(c, 0.0f);
  kc::rmsnorm_forward(x.data(), w.data(), t, c, 1e-6f, o1.data(), r1.data(), 1);
  kc::rmsnorm_forward(x.data(), w.data(), t, c, 1e-6f, o2.data(), r2.data(), 2);
  kc::rmsnorm_backward(dout.data(), x.data(), w.data(), r1.data(), t, c, d1.data(), w1.data(),
                       false, 1);
  kc::rmsnorm_backward(dout.data(), x.data(), w.data(), r2.data(), t, c, d2.data(), w2.data(),
                       false, 2);
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(r1, r2);
  EXPECT_EQ(d1, d2);
  EXPECT_EQ(w1, w2);
}

}  // namespace
