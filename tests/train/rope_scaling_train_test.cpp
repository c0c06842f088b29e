// RoPE scaling in training and in checkpoints:
// 1. a training step with scaled RoPE (dynamic, where every rank must use the whole sequence's
//    length; yarn with its attention factor; llama3; linear) is the same at world 1 and at odd
//    worlds under zigzag and striped layouts, and differs from plain RoPE;
// 2. rope_scaling, rope_theta and max_position_embeddings are written to config.json under Hugging
//    Face's keys and read back by --init-from (read_hf_config), legacy `type` included.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "longseq/core/error.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/train/checkpoint.hpp"
#include "train_test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace tr = longseq::train;
namespace lm = longseq::model;
using longseq::testing::temp_path;
using longseq::testing::tiny_config;
using nlohmann::json;

const json kScalings[] = {
    // max_position_embeddings 24 < seq 64: dynamic really rescales (n / M = 64 / 24).
    {{"rope_type", "dynamic"}, {"factor", 2.0}},
    {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}},
    {{"rope_type", "llama3"},
     {"factor", 8.0},
     {"low_freq_factor", 1.0},
     {"high_freq_factor", 4.0},
     {"original_max_position_embeddings", 16}},
    {{"type", "linear"}, {"factor", 3.0}},
};

tr::TrainConfig scaled(const json& rs) {
  tr::TrainConfig c = tiny_config();
  c.model.rope_theta = 500.0;  // short wavelengths, so that 64 positions reach the scaled band
  c.model.max_position_embeddings = 24;
  c.model.rope_scaling = lm::RopeScaling::from_json(rs);
  return c;
}

TEST(RopeScalingTrain, StepEqualsAcrossWorldsAndLayouts) {
  tr::TrainConfig plain = scaled(nullptr);
  const double plain_loss = tr::train(plain).steps[0].loss;
  for (const json& rs : kScalings) {
    const tr::TrainConfig one = scaled(rs);
    const auto s1 = tr::train(one);
    EXPECT_GT(std::fabs(s1.steps[0].loss - plain_loss), 1e-6) << rs.dump() << ": no effect";
    for (const auto& [world, balance, algo] :
         {std::tuple{3, "zigzag", "burst"}, std::tuple{2, "striped", "ring"}}) {
      tr::TrainConfig c = scaled(rs);
      c.world = world;
      c.balance = balance;
      c.algo = algo;
      const auto sp = tr::train(c);
      EXPECT_NEAR(sp.steps[0].loss, s1.steps[0].loss, 1e-5 * s1.steps[0].loss) << rs.dump();
      float gmax = 0;
      for (float g : s1.grads) gmax = std::max(gmax, std::fabs(g));
      ASSERT_EQ(sp.grads.size(), s1.grads.size());
      for (size_t i = 0; i < s1.grads.size(); ++i)
        ASSERT_NEAR(sp.grads[i], s1.grads[i], 1e-5 * gmax + 1e-4 * std::fabs(s1.grads[i]))
            << rs.dump() << " world " << world << " " << balance << " at " << i;
    }
  }
}

TEST(RopeScalingTrain, ConfigJsonCarriesHuggingFaceKeysAndInitFromReadsThem) {
  for (const json& rs : kScalings) {
    const std::string root = temp_path("rope_ckpt", "run");
    fs::remove_all(root);
    tr::TrainConfig c = scaled(rs);
    c.out = root;
    c.save_every = 0;
    tr::train(c);
    const json cj = json::parse(longseq::core::read_file(root + "/checkpoint/config.json"));
    EXPECT_EQ(cj.at("max_position_embeddings"), 24);
    EXPECT_EQ(cj.at("rope_theta"), 500.0);
    for (auto it = rs.begin(); it != rs.end(); ++it)
      EXPECT_EQ(cj.at("rope_scaling").at(it.key()), it.value()) << it.key();
    const lm::LlamaConfig back = tr::read_hf_config(root + "/checkpoint");
    EXPECT_EQ(back.rope_scaling.to_json(), c.model.rope_scaling.to_json());
    EXPECT_EQ(back.max_position_embeddings, 24);
    EXPECT_EQ(back.rope_theta, 500.0);
    // Starting from it: the model (scaling included) is the checkpoint's.
    tr::TrainConfig next = tiny_config();
    next.init_from = root + "/checkpoint";
    next.model = back;
    EXPECT_NO_THROW(tr::train(next));
    fs::remove_all(root);
  }
}

TEST(RopeScalingTrain, AbsentOrNullKeysMeanPlainRopeAndBadValuesAreNamed) {
  const std::string root = temp_path("rope_ckpt", "defaults");
  fs::remove_all(root);
  tr::TrainConfig c = tiny_config();
  c.out = root;
  c.save_every = 0;
  tr::train(c);
  const std::string dir = root + "/checkpoint";
  json cj = json::parse(longseq::core::read_file(dir + "/config.json"));
  cj.erase("max_position_embeddings");
  cj["rope_scaling"] = nullptr;
  longseq::core::write_file_atomic(dir + "/config.json", cj.dump());
  const lm::LlamaConfig m = tr::read_hf_config(dir);
  EXPECT_EQ(m.max_position_embeddings, 0);  // unset, and so not written back
  json without = cj;
  without.erase("rope_scaling");  // null: plain RoPE, written as no key
  EXPECT_EQ(tr::hf_config(m), without);
  EXPECT_FALSE(m.rope_scaling.enabled());
  cj["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 0.5}};
  longseq::core::write_file_atomic(dir + "/config.json", cj.dump());
  const std::string msg = longseq::testing::error_of([&] { tr::read_hf_config(dir); });
  EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("factor must be a number >= 1, got 0.5"), std::string::npos) << msg;
  fs::remove_all(root);
}

}  // namespace

namespace {

// The train flags: --rope-scaling (JSON), --rope-theta and --max-position-embeddings reach the
// checkpoint's config.json; a bad --rope-scaling is refused naming the flag; and the run writes
// train.svg beside metrics.json.
TEST(RopeScalingTrain, CliFlagsReachConfigJson) {
  const std::string out = temp_path("rope_cli", "run");
  fs::remove_all(out);
  std::string log;
  const std::string cmd =
      std::string(LONGSEQ_CLI) + " train --preset tiny --steps 1 --seq 64 --world 2 --threads 1 " +
      "--data " + LONGSEQ_SOURCE_DIR + "/data/kjv-genesis-exodus.txt --quiet " +
      "--rope-theta 50000 --max-position-embeddings 256 " +
      "--rope-scaling "
      "'{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":64}' " +
      "--out " + out;
  ASSERT_EQ(longseq::testing::run(cmd, log), 0) << log;
  const json cj = json::parse(longseq::core::read_file(out + "/checkpoint/config.json"));
  EXPECT_EQ(cj.at("rope_theta"), 50000.0);
  EXPECT_EQ(cj.at("max_position_embeddings"), 256);
  EXPECT_EQ(cj.at("rope_scaling").at("rope_type"), "yarn");
  EXPECT_EQ(cj.at("rope_scaling").at("factor"), 4.0);
  EXPECT_EQ(cj.at("rope_scaling").at("original_max_position_embeddings"), 64);
  EXPECT_NE(longseq::core::read_file(out + "/train.svg").find("<polyline"), std::string::npos);
  // Continuing from it with another scaling (the context-extension recipe) is allowed.
  const std::string out2 = temp_path("rope_cli", "run2");
  fs::remove_all(out2);
  ASSERT_EQ(
      longseq::testing::run(
          std::string(LONGSEQ_CLI) + " train --preset tiny --steps 1 --seq 128 --world 1 " +
              "--threads 1 --quiet --data " + LONGSEQ_SOURCE_DIR +
              "/data/kjv-genesis-exodus.txt --init-from " + out + "/checkpoint " +
              "--max-position-embeddings 512 --rope-scaling '{\"type\":\"linear\",\"factor\":2}' " +
              "--out " + out2,
          log),
      0)
      << log;
  const json c2 = json::parse(longseq::core::read_file(out2 + "/checkpoint/config.json"));
  EXPECT_EQ(c2.at("rope_scaling"), json({{"type", "linear"}, {"factor", 2.0}}));
  EXPECT_EQ(c2.at("rope_theta"), 50000.0);  // kept from the checkpoint
  EXPECT_EQ(c2.at("max_position_embeddings"), 512);
  EXPECT_NE(longseq::testing::run(std::string(LONGSEQ_CLI) +
                                      " train --preset tiny --steps 1 --seq 64 --world 1 " +
                                      "--rope-scaling '{\"rope_type\":\"su\",\"factor\":2}'",
                                  log),
            0);
  EXPECT_NE(log.find("--rope-scaling"), std::string::npos) << log;
  EXPECT_NE(log.find("'su' is not supported"), std::string::npos) << log;
  fs::remove_all(out);
  fs::remove_all(out2);
}

}  // namespace
