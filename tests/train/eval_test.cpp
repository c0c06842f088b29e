// longseq eval (train/eval.hpp):
// 1. the loss of the distributed evaluation equals world 1 under odd worlds, every balance layout
//    and several algorithms, overall and per position bucket;
// 2. it is the loss the trainer reports for the same parameters on the same sequence (a run
//    started from the checkpoint with a vanishing learning rate: its step-0 loss is a forward of
//    the loaded weights);
// 3. the CLI writes the Contract of issue 16: OUT/eval.json {"loss", "perplexity", "tokens",
//    "positions": [{"start", "end", "loss"}]} and OUT/loss_by_position.svg;
// 4. bad input is refused by name;
// 5. unusual heads (6 query, 2 kv), every algorithm name, every layout
//    and causal / window / document masks: the same loss as one rank.
#include "longseq/train/eval.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "longseq/core/safetensors.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/data.hpp"
#include "train_test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace tr = longseq::train;
using longseq::testing::error_of;
using longseq::testing::temp_path;
using longseq::testing::tiny_config;
using longseq::testing::train_into;
using longseq::testing::unusual_heads_config;

// A tiny model trained for two steps (so that its loss is not uniform), saved once.
const std::string& checkpoint() {
  static const std::string dir = [] {
    tr::TrainConfig c = tiny_config();
    c.steps = 2;
    return train_into(c, temp_path("eval", "ckpt"));
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

// A model with unusual head counts (6 query heads of 4 dims sharing 2 kv heads),
// trained two steps so that positions differ, evaluated at an odd length under every
// algorithm name, every layout that suits it, and causal, window and document masks.
TEST(Eval, EveryAlgorithmLayoutAndMaskEqualsOneRank) {
  static const std::string ck = [] {
    tr::TrainConfig c = unusual_heads_config();
    c.steps = 2;
    return train_into(c, temp_path("eval", "heads6"));
  }();
  // documents: byte-level text files end every document with end-of-text; two short ones
  const std::string docs = temp_path("eval", "docs.tok");
  longseq::train::write_token_file(
      docs,
      longseq::train::byte_tokenize({"In the beginning God created the heaven and the earth.",
                                     "And the earth was without form, and void;",
                                     "and darkness was upon the face of the deep. And the Spirit"}),
      longseq::train::kByteVocab, longseq::train::kByteEot);
  for (const std::string mask : {"causal", "window:9", "document"}) {
    tr::EvalConfig e = base(61);
    e.checkpoint = ck;
    e.mask = mask;
    e.buckets = 6;
    if (mask == "document") e.data = docs;
    const tr::EvalResult one = tr::evaluate(e);
    ASSERT_EQ(one.positions.size(), 6u);
    for (const auto& [world, algo, balance] :
         {std::tuple{5, "burst", "striped"}, std::tuple{5, "ring", "zigzag"},
          std::tuple{6, "ulysses", "contiguous"}, std::tuple{4, "double-ring:2", "zigzag"},
          std::tuple{4, "double-ring:2:ring", "striped"}, std::tuple{4, "startrail:2", "zigzag"},
          std::tuple{4, "startrail:2:rings", "contiguous"}, std::tuple{4, "usp:2", "striped"},
          std::tuple{6, "usp:2:ring", "zigzag"}, std::tuple{2, "ulysses", "zigzag"}}) {
      e.world = world;
      e.algo = algo;
      e.balance = balance;
      expect_same(tr::evaluate(e), one,
                  mask + " " + algo + " " + balance + " world " + std::to_string(world));
    }
  }
  fs::remove(docs);
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
  const int rc = longseq::testing::run(std::string(LONGSEQ_CLI) + " eval --checkpoint-dir " +
                                           checkpoint() + " --data " + LONGSEQ_SOURCE_DIR +
                                           "/data/kjv-genesis-exodus.txt --seq 45 --world 3 --algo "
                                           "ring --balance striped --mask causal "
                                           "--sequences 2 --buckets 4 --threads 1 --out " +
                                           out,
                                       log);
  ASSERT_EQ(rc, 0) << log;
  const nlohmann::json j = nlohmann::json::parse(longseq::core::read_file(out + "/eval.json"));
  // exactly the Contract's keys and types
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"loss", "perplexity", "positions", "tokens"}));
  EXPECT_TRUE(j["loss"].is_number_float());
  EXPECT_TRUE(j["perplexity"].is_number_float());
  EXPECT_TRUE(j["tokens"].is_number_integer());
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(j["loss"].get<double>()), 1e-9 * 1e3);
  EXPECT_EQ(j["tokens"], 2 * 44);
  ASSERT_EQ(j["positions"].size(), 4u);
  int64_t next = 0;  // the buckets tile [0, 45) in order
  for (const auto& b : j["positions"]) {
    std::vector<std::string> bk;
    for (const auto& [k, v] : b.items()) bk.push_back(k);
    EXPECT_EQ(bk, (std::vector<std::string>{"end", "loss", "start"}));
    EXPECT_TRUE(b["start"].is_number_integer() && b["end"].is_number_integer());
    EXPECT_TRUE(b["loss"].is_number_float());
    EXPECT_EQ(b["start"].get<int64_t>(), next);
    EXPECT_GT(b["end"].get<int64_t>(), next);
    next = b["end"].get<int64_t>();
  }
  EXPECT_EQ(next, 45);
  // the run's settings and the bucket token counts live beside it
  const nlohmann::json run =
      nlohmann::json::parse(longseq::core::read_file(out + "/eval_run.json"));
  EXPECT_EQ(run["config"]["world"], 3);
  EXPECT_EQ(run["loss"], j["loss"]);
  int64_t counted = 0;
  for (const auto& b : run["positions"]) counted += b["tokens"].get<int64_t>();
  EXPECT_EQ(counted, 2 * 44);
  const std::string svg = longseq::core::read_file(out + "/loss_by_position.svg");
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  // The reference line of a uniform guess over the model's vocabulary (tiny: 257 ids).
  EXPECT_NE(svg.find("chance: ln 257 = 5.55"), std::string::npos);
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
  EXPECT_NE(error_of([&] { tr::evaluate(e); }).find("--algo ulysses at --world 3"),
            std::string::npos);
  e = base(64);
  e.balance = "diagonal";
  EXPECT_NE(error_of([&] { tr::evaluate(e); }).find("--balance diagonal"), std::string::npos);
  e = base(64);
  e.balance = "block-striped";
  EXPECT_NE(error_of([&] { tr::evaluate(e); }).find("--balance block-striped needs a block mask"),
            std::string::npos);
  e = base(64);
  e.data = temp_path("eval", "no-such.tok");
  EXPECT_NE(error_of([&] { tr::evaluate(e); }).find("--data " + e.data + ": no such file"),
            std::string::npos);
  e = base(64);
  e.buckets = 0;
  EXPECT_NE(error_of([&] { tr::evaluate(e); }).find("--buckets 0"), std::string::npos);
}

}  // namespace
