// The fast RoPE (kernels/cpu/rope): what is particular to it. Its agreement with the fp64 twin
// (kernels/ref/rope) on global positions up to 1e6 and padding rows, on every backend, is the rope
// cases of kernel_cases.hpp; the twin's own gradient is checked by finite differences in
// ref_ops_test.cpp and against PyTorch in kernels.ref_torch.
// Tolerance below: the rope cases', scaled by the attention factor. Scaled frequencies (yarn,
// llama3, ...) are model-level and tested in tests/model/rope_scaling_test.cpp.
#include "longseq/kernels/cpu/rope.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/kernels/ref/rope.hpp"
#include "model/model_test_util.hpp"

namespace {

namespace kc = longseq::kernels::cpu;
namespace kr = longseq::kernels::ref;
namespace lt = longseq::test;

// Explicit frequencies with an attention factor: cos and sin scale by it, so the rotated vector
// does (the twin's output times the factor, for the same frequencies as theta).
TEST(CpuRope, ExplicitFrequenciesAndAttentionFactor) {
  const int64_t t = 4, h = 2, d = 6;
  std::vector<int64_t> pos = {3, 0, 500000, -1};
  std::vector<double> inv(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) inv[i] = std::pow(500000.0, -2.0 * double(i) / double(d));
  auto x = lt::normal_f(t * h * d, 12);
  std::vector<float> y = x;
  kc::RopeTable(pos.data(), t, inv, 1.25).forward(y.data(), h, 1);
  auto xd = lt::widen(x);
  std::vector<double> ry(t * h * d);
  kr::rope_forward(xd.data(), pos.data(), t, h, d, 500000.0, ry.data());
  for (int64_t i = 0; i < 3 * h * d; ++i) ry[i] *= 1.25;  // padding row (last) stays as is
  lt::expect_close(y, ry, 1.25e-5, 1e-5, "rope forward, factor 1.25");
}

TEST(CpuRope, RefusesOddHeadDimAndBadTheta) {
  std::vector<int64_t> pos = {0};
  for (auto [d, theta, want] : {std::tuple{int64_t{7}, 1e4, "rope head dim 7 must be even"},
                                std::tuple{int64_t{8}, 0.0, "rope theta must be > 0, got 0"}}) {
    try {
      kc::RopeTable(pos.data(), 1, d, theta);
      ADD_FAILURE() << "accepted d " << d << " theta " << theta;
    } catch (const longseq::core::Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[kernels]"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
