// longseq eval (train/eval.hpp):
// 1. the loss of the distributed evaluation equals world 1 under odd worlds, every balance layout
//    and several algorithms, overall and per position bucket;
// 2. it is the loss the trainer reports for the same parameters on the same sequence (a run
//    started from the checkpoint with a vanishing learning rate: its step-0 loss is a forward of
//    the loaded weights);
// 3. the CLI writes the Contract of issue 16: OUT/eval.json {"loss", "perplexity", "tokens",
//    "positions": [{"start", "end", "loss"}]} and OUT/loss_by_position.svg;
// 4. bad input is refused by name.
#include "longseq/train/eval.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "longseq/core/safetensors.hpp"
#include "longseq/train/checkpoint.hpp"
#include "train_test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace tr = longseq::train;
using longseq::testing::error_of;
using longseq::testing::temp_path;
using longseq::testing::tiny_config;

// A tiny model trained for two steps (so that its loss is not uniform), saved once.
const std::string& checkpoint() {
  static const std::string dir = [] {
    const std::string root = temp_path("eval", "ckpt");
    fs::remove_all(root);
    tr::TrainConfig c = tiny_config();
    c.steps = 2;
    c.out = root;
    c.save_every = 0;
    tr::train(c);
    return root;
  }();
  return dir;
}

tr::EvalConfig base(int64_t seq) {
  tr::EvalConfig e;
  e.checkpoint = checkpoint();
  e.data = std::string(LONGSEQ_SOURCE_DIR) + "/data/kjv-genesis-exodus.txt";
  e.seq = seq;
  e.sequences = 2;
  e.buckets = 7;
  e.threads = 1;
  return e;
}

void expect_same(const tr::EvalResult& a, const tr::EvalResult& b, const std::string& what) {
  EXPECT_NEAR(a.loss, b.loss, 1e-5 * b.loss) << what;
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.positions.size(), b.positions.size()) << what;
  for (size_t i = 0; i < b.positions.size(); ++i) {
    EXPECT_EQ(a.positions[i].start, b.positions[i].start);
    EXPECT_EQ(a.positions[i].end, b.positions[i].end);
    EXPECT_NEAR(a.positions[i].loss, b.positions[i].loss, 1e-5 * b.positions[i].loss)
        << what << " bucket " << i;
  }
}

TEST(Eval, DistributedEqualsOneRank) {
  const tr::EvalResult one = tr::evaluate(base(97));
  EXPECT_EQ(one.tokens, 2 * 96);
  EXPECT_NEAR(one.perplexity, std::exp(one.loss), 1e-9 * one.perplexity);
  ASSERT_EQ(one.positions.size(), 7u);
  EXPECT_EQ(one.positions.front().start, 0);
  EXPECT_EQ(one.positions.back().end, 97);
  for (const auto& [world, algo, balance] :
       {std::tuple{3, "burst", "zigzag"}, std::tuple{2, "ring", "striped"},
        std::tuple{3, "ring", "contiguous"}, std::tuple{2, "ulysses", "zigzag"}}) {
    tr::EvalConfig e = base(97);
    e.world = world;
    e.algo = algo;
    e.balance = balance;
    expect_same(tr::evaluate(e), one,
                std::string(algo) + " " + balance + " world " + std::to_string(world));
  }
}

TEST(Eval, EqualsTheTrainersLossOnTheSameWeights) {
  tr::EvalConfig e = base(64);
  e.sequences = 1;
  const tr::EvalResult r = tr::evaluate(e);
  tr::TrainConfig c = tiny_config();
  c.init_from = checkpoint() + "/checkpoint";
  c.model = tr::read_hf_config(c.init_from);
  c.optim.lr = 1e-30;
  c.optim.min_lr = 0;
  const double train_loss = tr::train(c).steps[0].loss;  // step 0 trains sequence 0
  EXPECT_NEAR(r.loss, train_loss, 1e-5 * train_loss);
  // and the bucketed losses are the per-position mean, weighted back to the total
  double total = 0;
  for (const auto& b : r.positions) total += b.loss * static_cast<double>(b.tokens);
  EXPECT_NEAR(total / static_cast<double>(r.tokens), r.loss, 1e-9 * r.loss);
}

TEST(Eval, CliWritesTheContract) {
  const std::string out = temp_path("eval", "cli");
  fs::remove_all(out);
  std::string log;
  const int rc = longseq::testing::run(std::string(LONGSEQ_CLI) + " eval --checkpoint " +
                                           checkpoint() + " --data " + LONGSEQ_SOURCE_DIR +
                                           "/data/kjv-genesis-exodus.txt --seq 45 --world 3 --algo "
                                           "ring --balance striped --mask causal "
                                           "--sequences 2 --buckets 4 --threads 1 --out " +
                                           out,
                                       log);
  ASSERT_EQ(rc, 0) << log;
  const nlohmann::json j = nlohmann::json::parse(longseq::core::read_file(out + "/eval.json"));
  for (const char* k : {"loss", "perplexity", "tokens", "positions"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["tokens"], 2 * 44);
  ASSERT_EQ(j["positions"].size(), 4u);
  for (const auto& b : j["positions"])
    for (const char* k : {"start", "end", "loss"}) EXPECT_TRUE(b.contains(k)) << k;
  EXPECT_EQ(j["positions"][3]["end"], 45);
  const std::string svg = longseq::core::read_file(out + "/loss_by_position.svg");
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  fs::remove_all(out);
}

TEST(Eval, RefusesBadInputByName) {
  tr::EvalConfig e = base(64);
  e.checkpoint = temp_path("eval", "nowhere");
  EXPECT_NE(error_of([&] { tr::evaluate(e); }).find("neither it nor its checkpoint/"),
            std::string::npos);
  e = base(1);
  EXPECT_NE(error_of([&] { tr::evaluate(e); }).find("--seq 1 must be >= 2"), std::string::npos);
  e = base(64);
  e.algo = "ulysses";
  e.world = 3;
  EXPECT_NE(error_of([&] { tr::evaluate(e); }).find("over 3 ranks"), std::string::npos);
}

}  // namespace
