// `longseq attention --device cuda` (issue "GPU III", item 1): the whole sequence on one GPU
// through the CLI, against the same command on the CPU. Both write o, lse, dq, dk, dv in global
// token order; the GPU's kernels differ from the CPU's in summation order only, so in fp32 every
// output agrees to 1e-4 in relative L2 (tests/README.md rule 2; lse: absolute 1e-4). An odd N
// under zigzag (a padded layout), GQA 8/2, D 64 (the tensor-core path) and 24 (the other one),
// causal, window and block masks.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../train/train_test_util.hpp"
#include "cuda_test_util.hpp"
#include "longseq/core/npy.hpp"

namespace {

#if defined(LONGSEQ_CLI)

double rel_l2(const longseq::core::Tensor<float>& a, const longseq::core::Tensor<float>& b) {
  double se = 0, sr = 0;
  for (int64_t i = 0; i < a.numel() && i < b.numel(); ++i) {
    const double d = static_cast<double>(a.data()[i]) - b.data()[i];
    se += d * d;
    sr += static_cast<double>(b.data()[i]) * b.data()[i];
  }
  return sr > 0 ? std::sqrt(se / sr) : std::sqrt(se);
}

TEST(CudaCli, AttentionOnTheGpuWritesWhatTheCpuWrites) {
  LONGSEQ_NEED_GPU();
  const std::string dir = testing::TempDir() + "cuda_cli_attention_";
  struct Case {
    const char* random;
    const char* mask;
  };
  for (const Case& c : {Case{"301,8,2,64", "causal"}, Case{"301,8,2,64", "window:37"},
                        Case{"130,4,4,24", "causal"}}) {
    const std::string what = std::string(c.random) + " " + c.mask;
    const std::string base = std::string(LONGSEQ_CLI) + " attention --random " + c.random +
                             " --seed 5 --mask " + c.mask + " --balance zigzag";
    std::string out;
    ASSERT_EQ(longseq::testing::run(base + " --device cpu --out " + dir + "cpu", out), 0)
        << what << out;
    ASSERT_EQ(longseq::testing::run(base + " --device cuda --out " + dir + "gpu", out), 0)
        << what << out;
    for (const char* f : {"o", "lse", "dq", "dk", "dv"}) {
      const auto cpu = longseq::core::read_npy_f32(dir + "cpu/" + f + ".npy", -1, f);
      const auto gpu = longseq::core::read_npy_f32(dir + "gpu/" + f + ".npy", -1, f);
      ASSERT_EQ(gpu.shape(), cpu.shape()) << what << " " << f;
      if (std::string(f) == "lse") {
        double worst = 0;
        for (int64_t i = 0; i < cpu.numel(); ++i)
          worst = std::max(worst, std::fabs(static_cast<double>(gpu.data()[i]) - cpu.data()[i]));
        EXPECT_LT(worst, 1e-4) << what << " lse";
      } else {
        EXPECT_LT(rel_l2(gpu, cpu), 1e-4) << what << " " << f;
      }
    }
    std::ifstream s(dir + "gpu/stats.json");
    const nlohmann::json j = nlohmann::json::parse(s);
    EXPECT_EQ(j.value("device", ""), "cuda") << what;
    EXPECT_EQ(j.value("world", 0), 1) << what;
  }
}

// Several ranks sharing the GPU (--backend local threads, the executor on the GPU): every
// algorithm writes what the same command writes on the CPU, and stats.json counts the same
// bytes (the schedule is the device's too).
TEST(CudaCli, RanksSharingTheGpuWriteWhatTheCpuWrites) {
  LONGSEQ_NEED_GPU();
  const std::string dir = testing::TempDir() + "cuda_cli_ranks_";
  for (const char* algo : {"ring --world 3", "burst --world 4", "double-ring --world 4 --nodes 2",
                           "startrail:2 --world 4", "ulysses --world 2", "usp:2 --world 4"}) {
    const std::string base = std::string(LONGSEQ_CLI) +
                             " attention --random 301,8,2,64 --seed 9 --mask causal --balance "
                             "zigzag --backend local --algo " +
                             algo;
    std::string out;
    ASSERT_EQ(longseq::testing::run(base + " --device cpu --out " + dir + "cpu", out), 0)
        << algo << out;
    ASSERT_EQ(longseq::testing::run(base + " --device cuda --out " + dir + "gpu", out), 0)
        << algo << out;
    for (const char* f : {"o", "dq", "dk", "dv"}) {
      const auto cpu = longseq::core::read_npy_f32(dir + "cpu/" + f + ".npy", -1, f);
      const auto gpu = longseq::core::read_npy_f32(dir + "gpu/" + f + ".npy", -1, f);
      ASSERT_EQ(gpu.shape(), cpu.shape()) << algo << " " << f;
      EXPECT_LT(rel_l2(gpu, cpu), 1e-4) << algo << " " << f;
    }
    std::ifstream sc(dir + "cpu/stats.json"), sg(dir + "gpu/stats.json");
    const nlohmann::json jc = nlohmann::json::parse(sc), jg = nlohmann::json::parse(sg);
    EXPECT_EQ(jg.value("device", ""), "cuda") << algo;
    EXPECT_EQ(jg.value("world", 0), jc.value("world", -1)) << algo;
    EXPECT_EQ(jg.value("bytes_sent_intra", -1), jc.value("bytes_sent_intra", -2)) << algo;
  }
}

#endif  // LONGSEQ_CLI

}  // namespace
