// No idle core by default (issue 19): `longseq attention` without --threads gives each rank the
// host's hardware threads / its ranks, as train does; --threads still overrides.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

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
