// The training loop end to end on tiny shapes (preset "tiny": 2 layers, hidden 32, 4 query / 2
// key-value heads, vocabulary 257, sequences of 64 tokens of data/kjv-genesis-exodus.txt).
//
// 1. A distributed step equals the single-rank step: for every attention algorithm, balance
//    layout, checkpoint policy and loss path at world 2 and 4, the loss and the full gradient
//    (ZeRO-3 reduce-scattered, gathered back) of step 0 match world 1 (burst, no checkpointing,
//    fused loss). Tolerance: loss 1e-5 relative; gradient |g - g1| <= 1e-5 max|g1| + 1e-4 |g1|
//    elementwise: the fp32 attention merges partials in a different order per layout and the
//    ZeRO-3 reduce-scatter sums ranks in ring order (observed: <= 1.3e-7 max|g1|, printed per
//    case). Errors of a real bug are O(1e-2 max|g|): dropping the label of each rank's first
//    token gives 5e-2, restoring only half of seq-selective's saved rows 8e-2.
// 2. Checkpoint policies give the same gradients as each other at world 4 (same tolerance; in
//    practice bit-identical except seq-selective's recomputed rows), seq-selective at several
//    fractions and layouts included.
// 3. Resume equals uninterrupted training bit for bit (parameters and losses), at world 2.
// 4. Bad configurations are refused with the values named (presets: config_test.cpp).
// 5. The loss falls over a few steps.
#include "longseq/train/trainer.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "longseq/core/error.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/train/data.hpp"
#include "train_test_util.hpp"

namespace {

namespace tr = longseq::train;
using longseq::core::Error;

tr::TrainConfig tiny() {
  return longseq::testing::tiny_config();
}

struct Baseline {
  tr::TrainSummary s;
  float gmax = 0;
};

const Baseline& baseline() {
  static const Baseline b = [] {
    Baseline x;
    tr::TrainConfig c = tiny();
    c.world = 1;
    x.s = tr::train(c);
    for (float g : x.s.grads) x.gmax = std::max(x.gmax, std::fabs(g));
    return x;
  }();
  return b;
}

void expect_same_step(const tr::TrainConfig& c, const std::string& what) {
  const Baseline& b = baseline();
  const tr::TrainSummary s = tr::train(c);
  ASSERT_EQ(s.steps.size(), 1u) << what;
  EXPECT_NEAR(s.steps[0].loss, b.s.steps[0].loss, 1e-5 * b.s.steps[0].loss) << what;
  ASSERT_EQ(s.grads.size(), b.s.grads.size()) << what;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < s.grads.size(); ++i) {
    const double err = std::fabs(s.grads[i] - b.s.grads[i]);
    worst = std::max(worst, err);
    if (err > 1e-5 * b.gmax + 1e-4 * std::fabs(b.s.grads[i]) && bad++ < 3)
      ADD_FAILURE() << what << ": grad[" << i << "] " << s.grads[i] << " vs single-rank "
                    << b.s.grads[i];
  }
  EXPECT_GT(b.gmax, 1e-3f);  // the comparison is not vacuous
  std::printf("  %-28s loss %.7f (single %.7f)  max|dg| %.2e = %.2e max|g|\n", what.c_str(),
              s.steps[0].loss, b.s.steps[0].loss, worst, worst / b.gmax);
}

TEST(Trainer, DistributedStepEqualsSingleRankForEveryAlgorithm) {
  struct Case {
    int world, nodes;
    const char* algo;
  };
  for (const Case& k :
       {Case{2, 1, "ring"}, Case{2, 1, "burst"}, Case{4, 1, "ring"}, Case{4, 1, "burst"},
        Case{4, 2, "double-ring"}, Case{4, 2, "double-ring:ring"}, Case{4, 1, "double-ring:2:ring"},
        Case{4, 1, "startrail:2"}, Case{2, 1, "ulysses"}, Case{4, 1, "usp:2"}}) {
    tr::TrainConfig c = tiny();
    c.world = k.world;
    c.nodes = k.nodes;
    c.algo = k.algo;
    expect_same_step(c, std::string(k.algo) + " world " + std::to_string(k.world));
  }
}

TEST(Trainer, DistributedStepEqualsSingleRankForEveryLayoutPolicyAndLoss) {
  for (const char* balance : {"contiguous", "zigzag", "striped"})
    for (const char* policy : {"none", "full", "selective++", "seq-selective"}) {
      tr::TrainConfig c = tiny();
      c.world = 4;
      c.balance = balance;
      c.checkpoint = policy;
      expect_same_step(c, std::string(balance) + " " + policy);
    }
  // Other seq-selective fractions recompute another share of each rank's rows: same gradients.
  for (double f : {0.25, 0.8})
    for (const char* balance : {"contiguous", "zigzag"}) {
      tr::TrainConfig c = tiny();
      c.world = 4;
      c.balance = balance;
      c.checkpoint = "seq-selective";
      c.seq_selective_fraction = f;
      expect_same_step(c,
                       std::string(balance) + " seq-selective f=" + std::to_string(f).substr(0, 4));
    }
  for (const char* loss : {"fused", "unfused"})
    for (int world : {1, 2}) {
      tr::TrainConfig c = tiny();
      c.world = world;
      c.loss = loss;
      c.seq = 64;
      expect_same_step(c, std::string(loss) + " world " + std::to_string(world));
    }
  // An odd length: the layout pads internally, padding is masked and ignored by the loss.
  tr::TrainConfig a = tiny(), b = tiny();
  a.seq = b.seq = 61;
  b.world = 4;
  const auto sa = tr::train(a), sb = tr::train(b);
  EXPECT_NEAR(sa.steps[0].loss, sb.steps[0].loss, 1e-5 * sa.steps[0].loss);
}

TEST(Trainer, CheckpointPoliciesKeepLessActivationsInTheDocumentedOrder) {
  // none > selective++ > seq-selective > full: seq-selective keeps half of selective++'s
  // attention outputs (zigzag: each rank's later chunk), full keeps block inputs only.
  double kept[4];
  const char* policies[4] = {"none", "selective++", "seq-selective", "full"};
  for (int i = 0; i < 4; ++i) {
    tr::TrainConfig c = tiny();
    c.world = 2;
    c.seq = 128;
    c.checkpoint = policies[i];
    kept[i] = tr::train(c).steps[0].saved_activation_mib;
  }
  for (int i = 0; i + 1 < 4; ++i)
    EXPECT_GT(kept[i], kept[i + 1]) << policies[i] << " vs " << policies[i + 1];
  // Per block: x (C) for every policy; o (Hq D = C) + lse (Hq) for selective++, half of it for
  // seq-selective. Tiny: C = 32, Hq = 4, 64 tokens per rank, 2 layers.
  const double mib = 4.0 / (1024 * 1024) * 64 * 2;
  EXPECT_NEAR(kept[3], mib * 32, 1e-12);
  EXPECT_NEAR(kept[1], mib * (32 + 32 + 4), 1e-12);
  EXPECT_NEAR(kept[2], mib * (32 + (32 + 4) / 2.0), 1e-12);
  // Every rank keeps the same share of its own rows whatever the layout (a split on global
  // positions would leave the later contiguous rank keeping all of them), and the fraction moves
  // it: f = 0.75 keeps a quarter of the attention outputs.
  for (const char* balance : {"contiguous", "striped"}) {
    tr::TrainConfig c = tiny();
    c.world = 2;
    c.seq = 128;
    c.balance = balance;
    c.checkpoint = "seq-selective";
    EXPECT_NEAR(tr::train(c).steps[0].saved_activation_mib, kept[2], 1e-12) << balance;
    c.seq_selective_fraction = 0.75;
    EXPECT_NEAR(tr::train(c).steps[0].saved_activation_mib, mib * (32 + (32 + 4) / 4.0), 1e-12)
        << balance;
  }
}

TEST(Trainer, DocumentMaskEqualsAcrossWorldsAndChangesTheLoss) {
  // A token file of short documents: with --doc-mask a token attends only within its document.
  std::vector<std::string> docs;
  for (int i = 0; i < 12; ++i)
    docs.push_back(std::string(5 + 3 * i, static_cast<char>('a' + i)) + " end.");
  const std::string p = testing::TempDir() + "/longseq_docs_" + std::to_string(::getpid()) + ".tok";
  tr::write_token_file(p, tr::byte_tokenize(docs), tr::kByteVocab, tr::kByteEot);
  tr::TrainConfig a = tiny(), b = tiny(), plain = tiny();
  a.data = b.data = plain.data = p;
  a.doc_mask = b.doc_mask = true;
  b.world = 4;
  b.algo = "ring";
  const auto sa = tr::train(a), sb = tr::train(b), sp = tr::train(plain);
  EXPECT_NEAR(sa.steps[0].loss, sb.steps[0].loss, 1e-5 * sa.steps[0].loss);
  float gmax = 0;
  for (float g : sa.grads) gmax = std::max(gmax, std::fabs(g));
  for (size_t i = 0; i < sa.grads.size(); ++i)
    ASSERT_NEAR(sa.grads[i], sb.grads[i], 1e-5 * gmax + 1e-4 * std::fabs(sa.grads[i])) << i;
  EXPECT_GT(std::fabs(sa.steps[0].loss - sp.steps[0].loss), 1e-4);
  std::remove(p.c_str());
}

TEST(Trainer, DataParallelReplicasSplitSequencesAndShareZero) {
  // dp 2 x cp 2 must equal dp 2 x cp 1: the same two sequences, gradients averaged over both.
  tr::TrainConfig a = tiny(), b = tiny();
  a.world = 2;
  a.dp = 2;
  b.world = 4;
  b.dp = 2;
  const auto sa = tr::train(a), sb = tr::train(b);
  EXPECT_NEAR(sa.steps[0].loss, sb.steps[0].loss, 1e-5 * sa.steps[0].loss);
  float gmax = 0;
  for (float g : sa.grads) gmax = std::max(gmax, std::fabs(g));
  for (size_t i = 0; i < sa.grads.size(); ++i)
    ASSERT_NEAR(sa.grads[i], sb.grads[i], 1e-5 * gmax + 1e-4 * std::fabs(sa.grads[i])) << i;
  // and differs from one replica alone (the second sequence counts)
  EXPECT_NE(sa.steps[0].loss, baseline().s.steps[0].loss);
}

// --grad-accum K: K micro-batches per replica, gradients added into the ZeRO-3 shards, one
// optimizer step. dp 1 x K 2 reads the sequences dp 2 x K 1 reads (step s: numbers 2s, 2s + 1), so
// two steps of each give the same losses and the same second-step gradients (after one optimizer
// step: a second step per micro-batch would show in both), up to the order of the sums (the
// reduce-scatter adds the replicas' gradients, the accumulation adds the micro-batches' into the
// shard): at world 1, at world 2 as context ranks (cp 2), and with dp 2 x K 2 against dp 4.
TEST(Trainer, GradientAccumulationEqualsMoreReplicas) {
  auto config = [](int world, int dp, int k) {
    tr::TrainConfig c = tiny();
    c.steps = 2;
    c.world = world;
    c.dp = dp;
    c.grad_accum = k;
    return c;
  };
  const auto replicas = tr::train(config(2, 2, 1));
  const auto four = tr::train(config(4, 4, 1));
  const struct {
    tr::TrainConfig c;
    const tr::TrainSummary& want;
    const char* what;
  } cases[] = {{config(1, 1, 2), replicas, "world 1, K 2 vs dp 2"},
               {config(2, 1, 2), replicas, "cp 2, K 2 vs dp 2"},
               {config(4, 2, 2), four, "dp 2 x cp 2, K 2 vs dp 4"}};
  for (const auto& [c, want, what] : cases) {
    const auto got = tr::train(c);
    ASSERT_EQ(got.steps.size(), 2u) << what;
    for (size_t s = 0; s < 2; ++s) {
      EXPECT_NEAR(got.steps[s].loss, want.steps[s].loss, 1e-5 * want.steps[s].loss) << what;
      // dp x K sequences of seq tokens per step, over the world's ranks
      EXPECT_NEAR(got.steps[s].tokens_per_sec * got.steps[s].seconds,
                  64.0 * c.dp * c.grad_accum / c.world, 1e-9)
          << what;
    }
    // The second step's gradients are compared as a whole, not element by element. Adam's first
    // update is about lr * sign(g), so a gradient within rounding of zero, whose sign the order of
    // the sums decides, moves its parameter by a whole lr; the next gradients then differ in a few
    // elements by up to 3e-5 of the largest (cp 2 against dp 2 with the AVX2 kernels; 1e-5 with
    // AVX-512), while the norm of the difference stays under 7e-6 of the gradient's. A real
    // mistake moves every parameter: 1.5 x lr puts it at 0.2.
    ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
    double diff2 = 0, norm2 = 0;
    for (size_t i = 0; i < want.grads.size(); ++i) {
      const double d = double(got.grads[i]) - want.grads[i];
      diff2 += d * d;
      norm2 += double(want.grads[i]) * want.grads[i];
    }
    EXPECT_LE(std::sqrt(diff2), 1e-4 * std::sqrt(norm2)) << what;
  }
  // Not vacuous: one micro-batch alone (world 1, K 1) trains on other sequences.
  EXPECT_GT(std::fabs(tr::train(config(1, 1, 1)).steps[1].loss - replicas.steps[1].loss), 1e-4);
  tr::TrainConfig bad = tiny();
  bad.grad_accum = 0;
  EXPECT_NE(longseq::testing::refusal(bad).find("--grad-accum 0"), std::string::npos)
      << longseq::testing::refusal(bad);
}

TEST(Trainer, ResumeIsBitIdenticalToUninterruptedTraining) {
  namespace fs = std::filesystem;
  const std::string root = testing::TempDir() + "/longseq_resume_" + std::to_string(::getpid());
  fs::remove_all(root);
  tr::TrainConfig full = tiny();
  full.world = 2;
  full.steps = 4;
  full.checkpoint = "seq-selective";
  const auto straight = tr::train(full);

  tr::TrainConfig first = full;
  first.stop_after = 2;
  first.out = root + "/a";
  first.save_every = 0;
  tr::train(first);
  ASSERT_TRUE(fs::exists(root + "/a/checkpoint/model.safetensors"));
  ASSERT_TRUE(fs::exists(root + "/a/checkpoint/optimizer.safetensors"));
  ASSERT_TRUE(fs::exists(root + "/a/metrics.json"));
  tr::TrainConfig second = full;
  second.resume = root + "/a";
  second.out = root + "/b";
  const auto resumed = tr::train(second);
  ASSERT_EQ(resumed.first_step, 2);
  ASSERT_EQ(resumed.steps.size(), 2u);
  EXPECT_EQ(resumed.steps[0].loss, straight.steps[2].loss);
  EXPECT_EQ(resumed.steps[1].loss, straight.steps[3].loss);
  ASSERT_EQ(resumed.params.size(), straight.params.size());
  EXPECT_TRUE(resumed.params == straight.params) << "parameters differ after resume";
  fs::remove_all(root);
}

TEST(Trainer, LossFalls) {
  for (const char* precision : {"fp32", "bf16"}) {
    tr::TrainConfig c = tiny();
    c.precision = precision;
    c.steps = 12;
    c.seq = 128;
    c.world = 2;
    c.keep_params = false;
    c.optim.lr = 1e-2;
    c.optim.warmup = 2;
    c.checkpoint = "seq-selective";
    const auto s = tr::train(c);
    ASSERT_EQ(s.steps.size(), 12u);
    EXPECT_LT(s.steps.back().loss, s.steps.front().loss - 1.0)
        << precision << ": " << s.steps.front().loss << " -> " << s.steps.back().loss;
    for (const auto& r : s.steps) {
      EXPECT_TRUE(std::isfinite(r.loss));
      EXPECT_GT(r.tokens_per_sec, 0);
      EXPECT_GE(r.comm_wait_s, 0);
    }
  }
}

using longseq::testing::refusal;

TEST(Trainer, RefusesBadConfigurationsNamingValues) {
  auto expect = [](tr::TrainConfig c, const std::string& want) {
    const std::string msg = refusal(c);
    EXPECT_NE(msg.find(want), std::string::npos) << "got: " << msg;
  };
  tr::TrainConfig c = tiny();
  c.world = 4;
  c.dp = 3;
  expect(c, "--dp 3 must divide --world 4");
  c = tiny();
  c.world = 4;
  c.algo = "double-ring";
  expect(c, "--algo double-ring needs the 4 context ranks");
  c.algo = "double-ring:3";
  expect(c, "needs the inner ring size 3 to divide world 4");
  c = tiny();
  c.checkpoint = "some";
  expect(c, "--checkpoint 'some'");
  c = tiny();
  c.loss = "fast";
  expect(c, "--loss 'fast'");
  c = tiny();
  c.world = 4;
  c.algo = "startrail:3";
  expect(c, "startrail:3");
  c = tiny();
  c.world = 4;
  c.seq = 6;
  expect(c, "--seq 6 must be at least 2 tokens per rank");
  c = tiny();
  c.model.kv_heads = 3;
  expect(c, "heads 4 not divisible by kv_heads 3");
  c = tiny();
  c.data = "/nonexistent/tokens.bin";
  expect(c, "/nonexistent/tokens.bin");
  c = tiny();
  c.resume = "/nonexistent/run";
  expect(c, "--resume /nonexistent/run");
  c = tiny();
  c.optim.lr = -1;
  expect(c, "--lr -1");
  c = tiny();
  c.steps = 0;
  expect(c, "[train] --steps 0 must be >= 1");
  c = tiny();
  c.ffn_chunk = -2;
  expect(c, "[train] --ffn-chunk -2 must be >= 0 (0: all tokens)");
  c = tiny();
  c.link = "inter=fast";
  expect(c, "inter=fast");
}

}  // namespace
