// The fast RMSNorm (kernels/cpu/rmsnorm): what is particular to it. Its agreement with the fp64
// twin (kernels/ref/rmsnorm), on every backend, is the rmsnorm cases of kernel_cases.hpp; the
// twin's own gradients are checked by finite differences in ref_ops_test.cpp and against PyTorch
// in kernels.ref_torch.
#include "longseq/kernels/cpu/rmsnorm.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "model/model_test_util.hpp"

namespace {

namespace kc = longseq::kernels::cpu;
namespace lt = longseq::test;

// Accumulate mode adds dx to what the buffer holds.
TEST(CpuRmsNorm, AccumulateAddsToDx) {
  const int64_t t = 6, c = 24;
  std::vector<float> x = lt::normal_f(t * c, 3), w = lt::normal_f(c, 4),
                     dout = lt::normal_f(t * c, 5);
  std::vector<float> out(t * c), rstd(t), dx(t * c), dw(c, 0.0f);
  kc::rmsnorm_forward(x.data(), w.data(), t, c, 1e-5f, out.data(), rstd.data(), 2);
  kc::rmsnorm_backward(dout.data(), x.data(), w.data(), rstd.data(), t, c, dx.data(), dw.data(),
                       false, 2);
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
