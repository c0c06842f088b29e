// The per-op account of a training step (issue 19): metrics.json's "ops" has every category,
// non-negative, adding up with "other" to the step's seconds; the categories the configuration
// exercises are nonzero.
#include <gtest/gtest.h>

#include "longseq/train/run.hpp"
#include "train_test_util.hpp"

namespace tr = longseq::train;
namespace core = longseq::core;
using core::Op;

TEST(OpAccountTrain, CategoriesAreNonNegativeAndAddUpToTheStep) {
  for (const char* precision : {"fp32", "bf16"}) {
    for (int world : {1, 2}) {
      tr::TrainConfig c = longseq::testing::tiny_config();
      c.precision = precision;
      c.steps = 2;
      c.seq = 256;
      c.world = world;
      c.keep_params = false;
      c.checkpoint = "seq-selective";
      const tr::TrainSummary s = tr::train(c);
      ASSERT_EQ(s.steps.size(), 2u);
      for (const tr::StepRecord& r : s.steps) {
        SCOPED_TRACE(std::string(precision) + " world " + std::to_string(world));
        const nlohmann::json j = tr::record_json(r);
        ASSERT_TRUE(j.contains("ops"));
        double sum = 0;
        for (int i = 0; i < core::kNumOps; ++i) {
          const char* name = core::op_name(static_cast<Op>(i));
          ASSERT_TRUE(j["ops"].contains(name)) << name;
          // A category is a sum of intervals of the steady clock, less attention's own waits
          // (measured inside them): never below zero beyond rounding.
          EXPECT_GE(j["ops"][name].get<double>(), -1e-9) << name;
          sum += j["ops"][name].get<double>();
        }
        ASSERT_TRUE(j["ops"].contains("other"));
        const double other = j["ops"]["other"].get<double>();
        EXPECT_GE(other, 0.0);
        EXPECT_NEAR(sum + other, r.seconds, 1e-9 * r.seconds + 1e-12);
        // Every category this configuration runs took time.
        for (Op op : {Op::attn_forward, Op::attn_backward, Op::attn_recompute, Op::gemm,
                      Op::norm_rope_swiglu, Op::lm_head_loss, Op::optimizer, Op::zero_gather,
                      Op::zero_reduce_scatter, Op::comm_wait})
          EXPECT_GT(r.ops[op], 0.0) << core::op_name(op);
      }
    }
  }
}
