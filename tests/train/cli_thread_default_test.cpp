// No idle core by default (issue 19): `longseq attention` without --threads gives each rank the
// host's hardware threads / its ranks, as train does; --threads still overrides.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "longseq/core/io.hpp"
#include "train_test_util.hpp"

namespace {
int threads_of(const std::string& flags) {
  const std::string dir = longseq::testing::temp_path("threads", "attn");
  std::string out;
  const int rc = longseq::testing::run(std::string(LONGSEQ_CLI) +
                                           " attention --random 64,2,2,16 --mask causal "
                                           "--backend local --out " +
                                           dir + " " + flags,
                                       out);
  EXPECT_EQ(rc, 0) << out;
  std::ifstream f(dir + "/stats.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  return j.at("threads_per_rank").get<int>();
}
}  // namespace

TEST(CliThreads, AttentionDefaultUsesTheMachine) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(threads_of("--world 1"), hw);
  EXPECT_EQ(threads_of("--world 2"), std::max(1, hw / 2));
  EXPECT_EQ(threads_of("--world 1 --threads 1"), 1);
}

// --warmup N: N untimed runs of the same work first; the outputs are the measured run's, so they
// must be byte-identical to a run without warm-up (the kernels are deterministic), and the time
// in stats.json is that run's alone (positive, and not more than the whole command took).
TEST(CliAttention, WarmupRunsLeaveTheOutputsUnchanged) {
  namespace t = longseq::testing;
  auto run_dir = [](const std::string& name, const std::string& flags) {
    const std::string dir = t::temp_path("warmup", name);
    std::string out;
    const int rc = t::run(std::string(LONGSEQ_CLI) +
                              " attention --random 77,6,2,8 --mask causal --algo burst --world 3 "
                              "--backend local --threads 1 --out " +
                              dir + " " + flags,
                          out);
    EXPECT_EQ(rc, 0) << out;
    return dir;
  };
  const std::string cold = run_dir("cold", ""), warm = run_dir("warm", "--warmup 2");
  for (const char* f : {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy"}) {
    const std::string a = longseq::core::read_file(cold + "/" + f);
    EXPECT_FALSE(a.empty()) << f;
    EXPECT_EQ(a, longseq::core::read_file(warm + "/" + f)) << f;
  }
  std::ifstream s(warm + "/stats.json");
  const nlohmann::json j = nlohmann::json::parse(s);
  EXPECT_GT(j.at("seconds").get<double>(), 0.0);
  EXPECT_EQ(j.at("world").get<int>(), 3);
}
