// Passkey retrieval (train/passkey.hpp): prompts of exactly the asked length with the needle at
// the asked depth, deterministic keys, training data as a token file, and an end-to-end run that
// scores a checkpoint and writes passkey.json and the heat map.
#include "longseq/train/passkey.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "longseq/core/io.hpp"
#include "longseq/train/data.hpp"
#include "train_test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace tr = longseq::train;
using longseq::testing::temp_path;

TEST(Passkey, PromptHasTheLengthAndTheKeyAtTheDepth) {
  const std::string key = tr::passkey_key(1, 300, 2, 0, 5);
  ASSERT_EQ(key.size(), 5u);
  EXPECT_NE(key[0], '0');
  EXPECT_EQ(key, tr::passkey_key(1, 300, 2, 0, 5));
  EXPECT_NE(key, tr::passkey_key(1, 300, 2, 1, 5));
  for (double depth : {0.0, 0.5, 1.0}) {
    const tr::PasskeyCase c = tr::passkey_case(300, depth, key);
    EXPECT_EQ(c.prompt.size(), 300u);
    EXPECT_EQ(c.answer, " " + key);
    EXPECT_EQ(c.prompt.substr(c.prompt.size() - 15), "The pass key is");
    const size_t at = c.prompt.find("The pass key is " + key);
    ASSERT_NE(at, std::string::npos);
    if (depth == 0.0) {
      EXPECT_EQ(at, 0u);
    }
    if (depth == 1.0) {
      EXPECT_GT(at, 150u);
    }
  }
  EXPECT_THROW(tr::passkey_case(40, 0.5, key), longseq::core::Error);
}

TEST(Passkey, RunScoresACheckpointAndDrawsTheMap) {
  const std::string root = temp_path("passkey", "run");
  fs::remove_all(root);
  const std::string data = root + "/passkey.tok";
  fs::create_directories(root);
  tr::write_passkey_data(data, 128, 20, 3, 3);
  const tr::TokenFile f = tr::read_token_file(data);
  EXPECT_EQ(f.tokens.size(), 20u * (128 + 4 + 1 + 1));  // prompt, " key", ".", end of text
  tr::TrainConfig c = longseq::testing::tiny_config();
  c.data = data;
  c.seq = 128;
  c.out = root + "/model";
  c.save_every = 0;
  tr::train(c);
  tr::PasskeyConfig p;
  p.checkpoint = c.out;
  p.lengths = {96, 128};
  p.depths = {0.0, 1.0};
  p.trials = 1;
  p.digits = 3;
  p.world = 2;
  p.threads = 1;
  p.out = root + "/eval";
  const tr::PasskeyResult r = tr::run_passkey(p);
  ASSERT_EQ(r.accuracy.size(), 4u);
  for (double a : r.accuracy) EXPECT_TRUE(a == 0.0 || a == 1.0);
  ASSERT_EQ(r.digit_accuracy.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    // one trial of 3 digits: 0, 1/3, 2/3 or 1, and 1 whenever the whole key is right
    const double d = r.digit_accuracy[i] * 3;
    EXPECT_NEAR(d, std::round(d), 1e-12);
    EXPECT_TRUE(r.digit_accuracy[i] >= 0 && r.digit_accuracy[i] <= 1);
    if (r.accuracy[i] == 1.0) {
      EXPECT_EQ(r.digit_accuracy[i], 1.0);
    }
  }
  const nlohmann::json j = nlohmann::json::parse(longseq::core::read_file(p.out + "/passkey.json"));
  EXPECT_EQ(j.at("cells").size(), 4u);
  EXPECT_TRUE(j.at("digit_accuracy").is_number());
  EXPECT_EQ(j.at("cells")[0].at("digit_accuracy"), r.digit_accuracy[0]);
  EXPECT_NE(longseq::core::read_file(p.out + "/passkey.svg").find("<rect"), std::string::npos);
  EXPECT_NE(longseq::core::read_file(p.out + "/passkey_digits.svg").find("<rect"),
            std::string::npos);
  fs::remove_all(root);
}

}  // namespace
