// The fast SwiGLU (kernels/cpu/swiglu): what is particular to it. Its agreement with the fp64 twin
// (kernels/ref/swiglu), on every backend, is the swiglu cases of kernel_cases.hpp; the twin's own
// gradients are checked by finite differences in ref_ops_test.cpp and against PyTorch in
// kernels.ref_torch.
#include "longseq/kernels/cpu/swiglu.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "model/model_test_util.hpp"

namespace {

namespace kc = longseq::kernels::cpu;
namespace lt = longseq::test;

// The aliasing the MLP relies on: dgate over gate, dup over up.
TEST(CpuSwiglu, BackwardMayOverwriteItsInputs) {
  const int64_t n = 64;
  auto g = lt::normal_f(n, 10, 3.0), u = lt::normal_f(n, 11), dout = lt::normal_f(n, 12);
  std::vector<float> dg(n), du(n);
  kc::swiglu_backward(dout.data(), g.data(), u.data(), n, dg.data(), du.data(), 1);
  std::vector<float> ga = g, ua = u;
  kc::swiglu_backward(dout.data(), ga.data(), ua.data(), n, ga.data(), ua.data(), 1);
  EXPECT_EQ(ga, dg);
  EXPECT_EQ(ua, du);
}

}  // namespace
