// --device (train/device.hpp): what the flag accepts and what it refuses, on any machine.
// Commands: train, attention, generate and passkey here (eval: tests/train/eval_device_test.cpp).
//
// A GPU run itself is tests/cuda/train_test.cpp. Here: the words (cpu, cuda, cuda:N; anything
// else named in the error), the combinations a GPU run does not take yet (several ranks, the
// unfused loss), each refused before any data is read, and a GPU asked of a machine or build
// without one refused naming the device, never a crash or a silent CPU run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "longseq/core/error.hpp"
#include "longseq/core/io.hpp"
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

TEST(DeviceFlag, AGpuRunTakesRanksSharingItWithTheFusedLoss) {
  tr::TrainConfig c = longseq::testing::tiny_config();
  c.device = "cuda";
  c.world = 2;  // threads sharing the GPU (the mpirun refusal: tests/train/tests.cmake)
  EXPECT_EQ(error_of(c), "");
  c.world = 1;
  std::string e;
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

// `longseq attention --device`: the words, a combination a GPU run does not take (a --scale),
// and a GPU asked of a machine without one, each refused naming the value; --device cpu is the
// CPU run with "device" in stats.json. (Ranks in several processes on a GPU are refused under
// mpirun: attention.cli_device_mpi_refused, tests/attention/tests.cmake.)
TEST(DeviceFlag, TheAttentionCommandTakesADevice) {
  const std::string base = std::string(LONGSEQ_CLI) + " attention --random 37,4,2,16 --mask causal";
  std::string out;
  // Ranks sharing the GPU: they run where one is (tests/cuda), else the GPU is named.
  if (longseq::testing::run(base + " --device cuda --world 3 --backend local", out) != 0) {
    EXPECT_NE(out.find("[attention] --device cuda:0"), std::string::npos) << out;
  }
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

// `longseq generate --device` and `longseq passkey --device` (issue 27): the words, a GPU at
// --world > 1, and a GPU asked of a machine without one, each refused naming the command and the
// value, never a crash or a silent CPU run; --device cpu is today's run: generate's text the same
// as without the flag with "device" in --stats, passkey's passkey.json the same file.
TEST(DeviceFlag, GenerateAndPasskeyTakeADevice) {
  namespace fs = std::filesystem;
  using longseq::testing::run;
  using longseq::testing::temp_path;
  tr::TrainConfig c = longseq::testing::tiny_config();
  const std::string ckpt = longseq::testing::train_into(c, temp_path("devflag", "ckpt"));
  const std::string cli = LONGSEQ_CLI;
  const std::string gen = cli + " generate --checkpoint-dir " + ckpt +
                          " --prompt 'In the beginning God' --max-new-tokens 4 --threads 1";
  std::string plain, out;
  ASSERT_EQ(run(gen, plain), 0) << plain;
  const std::string stats = temp_path("devflag", "stats.json");
  ASSERT_EQ(run(gen + " --device cpu --stats " + stats, out), 0) << out;
  EXPECT_EQ(out, plain);
  std::ifstream sf(stats);
  EXPECT_EQ(nlohmann::json::parse(sf).value("device", ""), "cpu");
  EXPECT_EQ(run(gen + " --device gpu", out), 1) << out;
  EXPECT_NE(out.find("[generate] device 'gpu': expected cpu, cuda or cuda:N"), std::string::npos)
      << out;
  if (run(gen + " --device cuda --world 2", out) != 0) {  // ranks sharing a GPU; none here
    EXPECT_NE(out.find("[generate] --device cuda"), std::string::npos) << out;
  }
  if (run(gen + " --device cuda", out) != 0) {  // no GPU here: refused by name
    EXPECT_NE(out.find("[generate] --device cuda:0: "), std::string::npos) << out;
  } else {
    EXPECT_TRUE(tr::cuda_built()) << out;
  }

  const std::string pk = cli + " passkey --checkpoint-dir " + ckpt +
                         " --lengths 96 --depths 0,1 --trials 1 --digits 3 --threads 1 --out ";
  const std::string a = temp_path("devflag", "pk_default"), b = temp_path("devflag", "pk_cpu");
  ASSERT_EQ(run(pk + a, out), 0) << out;
  ASSERT_EQ(run(pk + b + " --device cpu", out), 0) << out;
  const std::string ja = longseq::core::read_file(a + "/passkey.json");
  EXPECT_FALSE(ja.empty());
  EXPECT_EQ(longseq::core::read_file(b + "/passkey.json"), ja);
  EXPECT_EQ(run(pk + b + " --device tpu", out), 1) << out;
  EXPECT_NE(out.find("[passkey] device 'tpu'"), std::string::npos) << out;
  if (run(pk + b + " --device cuda:0 --world 2", out) != 0) {
    EXPECT_NE(out.find("[passkey] --device cuda:0"), std::string::npos) << out;
  }
  if (run(pk + b + " --device cuda", out) != 0) {
    EXPECT_NE(out.find("[passkey] --device cuda:0: "), std::string::npos) << out;
  } else {
    EXPECT_TRUE(tr::cuda_built()) << out;
  }
  fs::remove_all(ckpt);
  fs::remove_all(a);
  fs::remove_all(b);
  fs::remove(stats);
}

}  // namespace
