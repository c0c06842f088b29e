// bf16 compute with fp32 master weights (TrainConfig::precision "bf16").
//
// What bf16 means here (model/transformer.hpp): every matrix product and attention run on
// bf16-rounded operands with fp32 accumulation; ZeRO-3 gathers parameters in bf16; master
// weights, gradients, AdamW moments, norms and the residual stream stay fp32.
//
// 1. A bf16 step is close to the fp32 step (loss within 1%, gradient within 5% in norm) and not
//    equal to it (so bf16 really runs), on the tiny preset.
// 2. A distributed bf16 step equals the single-rank bf16 step for the ring family and every
//    checkpoint policy, within 1% of the gradient's norm: the bf16 operands are the same on every
//    rank (positions, not ranks, decide the values), but the fp32 attention merges partials in a
//    layout-dependent order and an fp32 ulp can flip a later bf16 rounding (relative 2^-8 on that
//    element), so bit equality is not expected. A real bug (a dropped label, a lost row) moves the
//    gradient by O(5%) of its norm (trainer_test.cpp's calibration).
// 3. ZeRO-3 gathers in bf16: half the bytes, and the gathered values are the master weights
//    rounded to bf16.
// 4. Bad precisions and seq-selective fractions are refused by name. (The loss falling in bf16 is
//    Trainer.LossFalls.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/model/config.hpp"
#include "longseq/train/trainer.hpp"
#include "longseq/train/zero.hpp"
#include "train_test_util.hpp"

namespace {

namespace tr = longseq::train;

tr::TrainConfig tiny() {
  return longseq::testing::tiny_config();
}

double norm(const std::vector<float>& g) {
  double s = 0;
  for (float x : g) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

// ||a - b|| / ||b||
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    s += d * d;
  }
  return std::sqrt(s) / norm(b);
}

const tr::TrainSummary& single_bf16() {
  static const tr::TrainSummary s = [] {
    tr::TrainConfig c = tiny();
    c.precision = "bf16";
    return tr::train(c);
  }();
  return s;
}

TEST(Precision, Bf16StepIsCloseToFp32ButNotEqual) {
  const tr::TrainSummary f = tr::train(tiny());
  const tr::TrainSummary& h = single_bf16();
  ASSERT_EQ(f.steps.size(), 1u);
  ASSERT_EQ(h.steps.size(), 1u);
  EXPECT_NEAR(h.steps[0].loss, f.steps[0].loss, 1e-2 * f.steps[0].loss);
  const double d = rel_diff(h.grads, f.grads);
  std::printf("  bf16 vs fp32: loss %.6f vs %.6f, gradient relative difference %.3e\n",
              h.steps[0].loss, f.steps[0].loss, d);
  EXPECT_LT(d, 5e-2);
  EXPECT_GT(d, 1e-4);  // bf16 rounding is visible: the option is not a no-op
  EXPECT_NE(h.steps[0].loss, f.steps[0].loss);
}

TEST(Precision, DistributedBf16StepEqualsSingleRankBf16) {
  struct Case {
    int world, nodes;
    const char* algo;
    const char* balance;
    const char* policy;
  };
  for (const Case& k :
       {Case{2, 1, "ring", "zigzag", "none"}, Case{2, 1, "burst", "striped", "full"},
        Case{4, 1, "burst", "zigzag", "seq-selective"},
        Case{4, 1, "ring", "contiguous", "selective++"},
        Case{4, 2, "double-ring", "zigzag", "seq-selective"},
        Case{4, 1, "ulysses", "zigzag", "seq-selective"}}) {
    tr::TrainConfig c = tiny();
    c.precision = "bf16";
    c.world = k.world;
    c.nodes = k.nodes;
    c.algo = k.algo;
    c.balance = k.balance;
    c.checkpoint = k.policy;
    const tr::TrainSummary s = tr::train(c);
    const std::string what = std::string(k.algo) + " " + k.balance + " " + k.policy + " world " +
                             std::to_string(k.world);
    ASSERT_EQ(s.steps.size(), 1u) << what;
    EXPECT_NEAR(s.steps[0].loss, single_bf16().steps[0].loss, 1e-3 * single_bf16().steps[0].loss)
        << what;
    const double d = rel_diff(s.grads, single_bf16().grads);
    std::printf("  %-40s gradient vs single-rank bf16: %.3e\n", what.c_str(), d);
    EXPECT_LT(d, 1e-2) << what;
  }
}

TEST(Precision, ZeroGathersBf16HalfTheBytes) {
  tr::TrainConfig c = tiny();
  const longseq::model::ParamLayout layout(c.model);
  longseq::comm::Options o;
  o.backend = "local";
  o.world = 2;
  longseq::comm::run(o, [&](longseq::comm::Group& g) {
    tr::ShardedState f32(layout, g, 7), b16(layout, g, 7);
    b16.set_gather_dtype(longseq::core::DType::bf16);
    const int u = layout.layer_unit(0);
    const float* pf = f32.acquire(u);
    const float* pb = b16.acquire(u);
    const int64_t n = layout.units()[u].size;
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(pb[i], longseq::core::round_bf16(pf[i])) << "element " << i;
      differ += pb[i] != pf[i];
    }
    EXPECT_GT(differ, n / 2);  // fp32 masters are not bf16 values: the rounding is real
    f32.release(u);
    b16.release(u);
    EXPECT_EQ(2 * b16.gathered_bytes_sent(), f32.gathered_bytes_sent());
    EXPECT_GT(f32.gathered_bytes_sent(), 0);
  });
}

// ZeRO-3 prefetch: a gather posted by prefetch() and completed by acquire() hands out the same
// bits as a blocking acquire, in both precisions; a prefetch left unacquired is dropped by
// zero_grads(), so parameters changed by the optimizer in between are never read stale.
TEST(ZeroPrefetch, PrefetchedUnitEqualsGatheredUnitAndNeverGoesStale) {
  tr::TrainConfig c = tiny();
  const longseq::model::ParamLayout layout(c.model);
  for (int world : {2, 3})
    for (longseq::core::DType dt : {longseq::core::DType::f32, longseq::core::DType::bf16}) {
      longseq::comm::Options o;
      o.backend = "local";
      o.world = world;
      longseq::comm::run(o, [&](longseq::comm::Group& g) {
        tr::ShardedState a(layout, g, 7), b(layout, g, 7);
        a.set_gather_dtype(dt);
        b.set_gather_dtype(dt);
        const int u = layout.layer_unit(1);
        const size_t n = static_cast<size_t>(layout.units()[u].size);
        b.prefetch(u);
        b.prefetch(u);  // a second hint for the same unit is a no-op
        const float* pa = a.acquire(u);
        const float* pb = b.acquire(u);
        EXPECT_EQ(0, std::memcmp(pa, pb, n * sizeof(float)));
        EXPECT_EQ(b.prefetch_hits(), 1);
        a.release(u);
        b.release(u);
        // stale: prefetch, change the shard (as AdamW does), start a new step
        b.prefetch(u);
        for (int64_t i = 0; i < b.shard_size(u); ++i) b.param_shard(u)[i] += 1.0f;
        b.zero_grads();
        const float* fresh = b.acquire(u);
        const float* old = a.acquire(u);
        for (size_t i = 0; i < n; ++i)
          ASSERT_NE(fresh[i], old[i]) << "stale prefetched value at " << i;
        EXPECT_EQ(b.prefetch_hits(), 1);
      });
    }
}

using longseq::testing::refusal;

TEST(Precision, RefusesUnknownPrecisionAndBadFractions) {
  tr::TrainConfig c = tiny();
  c.precision = "fp16";
  EXPECT_NE(refusal(c).find("--precision 'fp16': expected f32 (or fp32) | bf16"), std::string::npos)
      << refusal(c);
  for (double f : {0.0, 1.0, -0.5, 1.5}) {
    c = tiny();
    c.checkpoint = "seq-selective";
    c.seq_selective_fraction = f;
    const std::string msg = refusal(c);
    EXPECT_NE(msg.find("--seq-selective-fraction"), std::string::npos) << msg;
    EXPECT_NE(msg.find("must be in (0, 1)"), std::string::npos) << msg;
  }
}

}  // namespace
