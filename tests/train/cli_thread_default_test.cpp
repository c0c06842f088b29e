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

// issue 31 item 5: calibrate's --threads is the shared row, 0 = every hardware thread, and the
// profile it writes stays per thread (docs/planner.md): efficiencies from per-thread rates.
TEST(CliThreads, CalibrateDefaultUsesTheMachineAndReportsPerThreadRates) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string path = longseq::testing::temp_path("threads", "hw.json");
  std::string out;
  ASSERT_EQ(longseq::testing::run(std::string(LONGSEQ_CLI) + " calibrate --out " + path +
                                      " --repeats 1 --pingpong-seconds 0.001 --block 64",
                                  out),
            0)
      << out;
  EXPECT_NE(out.find(std::to_string(hw) + " thread(s) per rank"), std::string::npos) << out;
  std::ifstream f(path);
  const nlohmann::json j = nlohmann::json::parse(f);
  const nlohmann::json& m = j.at("measurements");
  EXPECT_EQ(m.at("threads_per_rank").get<int>(), hw);
  const nlohmann::json& busy = m.at("attention_all_cores_busy");
  EXPECT_DOUBLE_EQ(busy.at("fwd_flops_per_thread").get<double>(),
                   busy.at("fwd_flops").get<double>() / hw);
  // peak = the one-thread GEMM rate; the efficiency is the per-thread rate over it.
  EXPECT_DOUBLE_EQ(j.at("peak_flops").get<double>(), m.at("gemm_f32_flops").get<double>());
  const double eff = j.at("corrections").at("attention_fwd_efficiency").get<double>();
  EXPECT_NEAR(eff,
              std::min(1.5, busy.at("fwd_flops_per_thread").get<double>() /
                                m.at("gemm_f32_flops").get<double>()),
              1e-9);
}
