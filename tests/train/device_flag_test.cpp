// --device (train/device.hpp): what the flag accepts and what it refuses, on any machine.
//
// A GPU run itself is tests/cuda/train_test.cpp. Here: the words (cpu, cuda, cuda:N; anything
// else named in the error), the combinations a GPU run does not take yet (several ranks, the
// unfused loss), each refused before any data is read, and a GPU asked of a machine or build
// without one refused naming the device, never a crash or a silent CPU run.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "longseq/core/error.hpp"
#include "longseq/train/device.hpp"
#include "longseq/train/trainer.hpp"
#include "train_test_util.hpp"

namespace {

namespace tr = longseq::train;

std::string error_of(const tr::TrainConfig& c) {
  try {
    c.parse();
  } catch (const longseq::core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceFlag, ReadsTheWordsAndRefusesOthersByName) {
  tr::TrainConfig c = longseq::testing::tiny_config();
  for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:3"}) {
    c.device = ok;
    EXPECT_EQ(error_of(c), "") << ok;
  }
  EXPECT_EQ(c.parse().device.index, 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "CPU", ""}) {
    c.device = bad;
    const std::string e = error_of(c);
    EXPECT_NE(e.find("[train]"), std::string::npos) << bad << ": " << e;
  }
  c.device = "tpu";
  EXPECT_NE(error_of(c).find("tpu"), std::string::npos) << error_of(c);
}

TEST(DeviceFlag, AGpuRunIsOneRankWithTheFusedLoss) {
  tr::TrainConfig c = longseq::testing::tiny_config();
  c.device = "cuda";
  c.world = 2;
  std::string e = error_of(c);
  EXPECT_NE(e.find("--world 2"), std::string::npos) << e;
  EXPECT_NE(e.find("cuda"), std::string::npos) << e;
  c.world = 1;
  c.loss = "unfused";
  e = error_of(c);
  EXPECT_NE(e.find("--loss unfused"), std::string::npos) << e;
  c.device = "cpu";  // the CPU takes both
  c.world = 2;
  EXPECT_EQ(error_of(c), "");
}

// --offload parks activations off a GPU: with the CPU as device there is nowhere to park them.
TEST(DeviceFlag, OffloadNeedsAGpu) {
  tr::TrainConfig c = longseq::testing::tiny_config();
  c.offload = true;
  const std::string e = error_of(c);
  EXPECT_NE(e.find("[train] --offload"), std::string::npos) << e;
  EXPECT_NE(e.find("--device cpu"), std::string::npos) << e;
  c.device = "cuda:1";
  EXPECT_EQ(error_of(c), "");
  EXPECT_TRUE(c.to_json().value("offload", false));
}

// `longseq attention --device`: the words, the combinations a GPU run does not take (several
// ranks, a --scale), and a GPU asked of a machine without one, each refused naming the value;
// --device cpu is the CPU run with "device" in stats.json.
TEST(DeviceFlag, TheAttentionCommandTakesADevice) {
  const std::string base = std::string(LONGSEQ_CLI) + " attention --random 37,4,2,16 --mask causal";
  std::string out;
  EXPECT_NE(longseq::testing::run(base + " --device cuda --world 3", out), 0);
  EXPECT_NE(out.find("[attention] --device cuda runs one rank: got --world 3"), std::string::npos)
      << out;
  EXPECT_NE(longseq::testing::run(base + " --device cuda:0 --scale 0.25", out), 0);
  EXPECT_NE(out.find("drop --scale 0.25"), std::string::npos) << out;
  EXPECT_NE(longseq::testing::run(base + " --device npu", out), 0);
  EXPECT_NE(out.find("'npu'"), std::string::npos) << out;
  const std::string dir = testing::TempDir() + "attention_device_cpu";
  ASSERT_EQ(longseq::testing::run(base + " --device cpu --out " + dir, out), 0) << out;
  std::ifstream f(dir + "/stats.json");
  EXPECT_EQ(nlohmann::json::parse(f).value("device", ""), "cpu");
  // With a GPU it runs (tests/cuda compares it with the CPU); without one it names the device.
  if (longseq::testing::run(base + " --device cuda", out) != 0) {
    EXPECT_NE(out.find("cuda"), std::string::npos) << out;
  }
}

// Without a GPU (this build has none, or the runtime sees none) a --device cuda run stops at its
// start with an error naming the device; with one it trains (tests/cuda/train_test.cpp checks how
// well).
TEST(DeviceFlag, AGpuAskedOfAMachineWithoutOneIsRefusedNamingIt) {
  tr::TrainConfig c = longseq::testing::tiny_config();
  c.device = "cuda:0";
  try {
    const tr::TrainSummary s = tr::train(c);
    ASSERT_TRUE(tr::cuda_built());
    ASSERT_EQ(s.steps.size(), 1u);
    EXPECT_TRUE(std::isfinite(s.steps[0].loss));
  } catch (const longseq::core::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda"), std::string::npos) << m;
    if (!tr::cuda_built()) {
      EXPECT_NE(m.find("no CUDA backend"), std::string::npos) << m;
    }
  }
}

}  // namespace
