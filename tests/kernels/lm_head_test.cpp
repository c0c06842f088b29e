// Fused and unfused LM head + cross-entropy against kernels/ref (fp64), whose own gradients are
// checked by finite differences in tests/kernels/ref_ops_test.cpp. The fused path on every
// backend at odd sizes is the lm_head_ce cases of kernel_cases.hpp. Hidden states standard normal,
// weights normal(0, 0.5), labels uniform with ignored rows. Tolerances: loss sum 1e-6 relative
// (per-row losses are O(5), summed in fp64); dhidden and dweight 1e-6 + 1e-4 |ref| (sums of V or
// T fp32 products of softmax probabilities). The one-hot sign error printed in BurstEngine's
// Algorithm 3 would move every label's gradient by 2 * grad_scale and fail these by far.
#include "longseq/kernels/cpu/lm_head.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/kernels/ref/cross_entropy.hpp"
#include "model/model_test_util.hpp"

namespace {

namespace lm = longseq::kernels::cpu;
namespace kr = longseq::kernels::ref;
namespace lt = longseq::test;

struct Problem {
  int64_t t, c, v;
  std::vector<float> hidden, weight;
  std::vector<int32_t> labels;
  Problem(int64_t t_, int64_t c_, int64_t v_, uint64_t seed) : t(t_), c(c_), v(v_) {
    hidden = lt::normal_f(t * c, seed);
    weight = lt::normal_f(v * c, seed + 1, 0.5);
    labels.resize(t);
    std::vector<int32_t> r(t);
    longseq::core::fill_randint(r.data(), t, seed + 2, static_cast<int32_t>(v));
    for (int64_t i = 0; i < t; ++i) labels[i] = (i % 5 == 3) ? lm::kIgnoreIndex : r[i];
  }
};

void check_against_ref(const Problem& p, bool fused, lm::LmHeadOptions o, double scale_count) {
  const lm::LmHeadDims d{p.t, p.c, p.v};
  auto hd = lt::widen(p.hidden), wd = lt::widen(p.weight);
  kr::LmHeadDims rd{p.t, p.c, p.v};
  const auto ref = kr::lm_head_ce_forward(hd.data(), wd.data(), p.labels.data(), rd);
  const double scale = 1.0 / scale_count;
  std::vector<double> rdh(p.t * p.c), rdw(p.v * p.c);
  kr::lm_head_ce_backward(hd.data(), wd.data(), p.labels.data(), rd, scale, rdh.data(), rdw.data());
  std::vector<float> dh(p.t * p.c, 7.0f), dw(p.v * p.c, 0.25f);
  const auto got = fused ? lm::lm_head_ce_fused(p.hidden.data(), p.weight.data(), p.labels.data(),
                                                d, scale, dh.data(), dw.data(), o)
                         : lm::lm_head_ce_unfused(p.hidden.data(), p.weight.data(), p.labels.data(),
                                                  d, scale, dh.data(), dw.data(), o);
  const std::string tag = std::string(fused ? "fused" : "unfused") + " tile " +
                          std::to_string(o.token_tile) + "x" + std::to_string(o.vocab_tile);
  EXPECT_EQ(got.count, ref.count) << tag;
  EXPECT_NEAR(got.sum, ref.sum, 1e-6 * std::fabs(ref.sum)) << tag;
  lt::expect_close(dh, rdh, 1e-6, 1e-4, tag + " dhidden");
  for (auto& x : rdw) x += 0.25;  // dweight accumulates
  lt::expect_close(dw, rdw, 1e-6, 1e-4, tag + " dweight");
}

TEST(LmHead, FusedMatchesReferenceForEveryTiling) {
  Problem p(37, 16, 53, 100);
  for (int64_t bs : {1, 8, 37, 64})
    for (int64_t bv : {1, 7, 53, 4096}) {
      lm::LmHeadOptions o;
      o.token_tile = bs;
      o.vocab_tile = bv;
      o.exec = longseq::core::Exec::cpu(2);
      check_against_ref(p, true, o, 29.0);
    }
}

TEST(LmHead, UnfusedMatchesReference) {
  Problem p(37, 16, 53, 200);
  check_against_ref(p, false, {}, 29.0);
}

TEST(LmHead, GlobalCountScaleAndAllIgnoredRows) {
  // A rank whose tokens are all ignored contributes zero gradient and zero loss, never NaN.
  Problem p(6, 4, 9, 300);
  for (auto& l : p.labels) l = lm::kIgnoreIndex;
  std::vector<float> dh(6 * 4, 1.0f), dw(9 * 4, 0.0f);
  auto r = lm::lm_head_ce_fused(p.hidden.data(), p.weight.data(), p.labels.data(), {6, 4, 9},
                                1.0 / 100, dh.data(), dw.data(), {});
  EXPECT_EQ(r.count, 0);
  EXPECT_EQ(r.sum, 0.0);
  for (float x : dh) EXPECT_EQ(x, 0.0f);
  for (float x : dw) EXPECT_EQ(x, 0.0f);
  // With a global count from elsewhere, the scale is that count, not the local one.
  Problem q(20, 8, 11, 400);
  check_against_ref(q, true, {}, 1000.0);
}

TEST(LmHead, FusedAndUnfusedAgreeAndThreadsDoNotChangeBits) {
  Problem p(70, 24, 300, 500);
  const lm::LmHeadDims d{p.t, p.c, p.v};
  std::vector<float> a(p.t * p.c), b(p.t * p.c), wa(p.v * p.c, 0.0f), wb(p.v * p.c, 0.0f);
  lm::LmHeadOptions o1, o2;
  o1.token_tile = o2.token_tile = 16;
  o1.exec = longseq::core::Exec::cpu(1);
  o2.exec = longseq::core::Exec::cpu(2);
  auto r1 = lm::lm_head_ce_fused(p.hidden.data(), p.weight.data(), p.labels.data(), d, 0.01,
                                 a.data(), wa.data(), o1);
  auto r2 = lm::lm_head_ce_fused(p.hidden.data(), p.weight.data(), p.labels.data(), d, 0.01,
                                 b.data(), wb.data(), o2);
  EXPECT_EQ(r1.sum, r2.sum);
  EXPECT_EQ(a, b);
  EXPECT_EQ(wa, wb);
  std::vector<float> c(p.t * p.c), wc(p.v * p.c, 0.0f);
  auto r3 = lm::lm_head_ce_unfused(p.hidden.data(), p.weight.data(), p.labels.data(), d, 0.01,
                                   c.data(), wc.data(), o1);
  EXPECT_NEAR(r3.sum, r1.sum, 1e-6 * std::fabs(r1.sum));
  lt::expect_close(c, a, 1e-7, 1e-4, "unfused vs fused dhidden");
  lt::expect_close(wc, wa, 1e-7, 1e-4, "unfused vs fused dweight");
}

TEST(LmHead, RefusesLabelsOutsideVocabulary) {
  std::vector<int32_t> labels = {1, 2, 9};
  try {
    lm::count_targets(labels.data(), 3, 9);
    ADD_FAILURE() << "label 9 accepted";
  } catch (const longseq::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 9 at row 2 outside the vocabulary [0, 9)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
