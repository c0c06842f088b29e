// Every numeric flag of every command, walked with values no run can use (issue 20): negative,
// not a number, beyond the type's range. Each must end in a refusal naming the flag (or the field
// it sets) - exit status 1 or 2 - or, where the value is legal, in a normal run; never a crash, a
// hang (every call runs under `timeout`), or a silent wrap-around. Plus the crashes of issue 20
// that came in through flags and files (keys with zero heads: SIGFPE in `attention`).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "longseq/core/npy.hpp"
#include "train_test_util.hpp"

namespace {

namespace fs = std::filesystem;
using longseq::testing::run;
using longseq::testing::temp_path;

const std::string kCli = LONGSEQ_CLI;
const std::string kText = std::string(LONGSEQ_SOURCE_DIR) + "/data/kjv-genesis-exodus.txt";

struct Command {
  std::string name;
  std::string base;  // a quick valid invocation the flag is appended to
  std::vector<std::string> flags;
  std::vector<std::string> values;  // what each flag is walked with
};

// The bad values: negative, NaN, a double that overflows, an integer beyond int64.
const std::vector<std::string> kBad = {"-7", "nan", "1e400", "99999999999999999999"};

// The flag's name as messages may spell it: "--kv-heads", "kv-heads" or the field "kv_heads".
bool names_flag(const std::string& log, const std::string& flag) {
  std::string bare = flag.substr(2), field = bare;
  for (char& c : field)
    if (c == '-') c = '_';
  return log.find(flag) != std::string::npos || log.find(bare) != std::string::npos ||
         log.find(field) != std::string::npos;
}

void walk(const Command& c) {
  std::string base_log;
  ASSERT_EQ(run("timeout 120 " + kCli + " " + c.name + " " + c.base, base_log), 0)
      << c.name << " " << c.base << ": the base invocation must run\n"
      << base_log;
  for (const std::string& f : c.flags)
    for (const std::string& v : c.values) {
      std::string log;
      const int rc =
          run("timeout 120 " + kCli + " " + c.name + " " + c.base + " " + f + " " + v, log);
      const std::string what = c.name + " " + f + " " + v;
      ASSERT_TRUE(rc == 0 || rc == 1 || rc == 2)
          << what << ": exit " << rc << " (a crash or a hang)\n"
          << log.substr(log.size() > 2000 ? log.size() - 2000 : 0);
      if (rc != 0) {
        EXPECT_TRUE(names_flag(log, f)) << what << ": refused without naming it\n" << log;
      }
    }
}

// A tiny checkpoint for eval, generate and passkey.
const std::string& checkpoint() {
  static const std::string dir = [] {
    const std::string d = temp_path("flags", "ck");
    fs::remove_all(d);
    std::string log;
    EXPECT_EQ(run(kCli + " train --preset tiny --data " + kText +
                      " --seq 64 --steps 1 --threads 1 --quiet --out " + d,
                  log),
              0)
        << log;
    return d;
  }();
  return dir;
}

TEST(CliFlags, TrainRefusesEveryBadNumericValueNamingTheFlag) {
  walk({"train",
        "--preset tiny --data " + kText + " --seq 64 --steps 1 --threads 1 --quiet",
        {"--steps",
         "--stop-after",
         "--seq",
         "--world",
         "--dp",
         "--nodes",
         "--seq-selective-fraction",
         "--seed",
         "--ffn-chunk",
         "--lm-tile",
         "--lr",
         "--min-lr",
         "--warmup",
         "--weight-decay",
         "--grad-clip",
         "--save-every",
         "--threads",
         "--layers",
         "--hidden",
         "--heads",
         "--kv-heads",
         "--head-dim",
         "--intermediate",
         "--vocab",
         "--rope-theta",
         "--max-position-embeddings"},
        kBad});
}

TEST(CliFlags, NoSilentWrapAround) {
  // Legal-looking runs that must not happen: a negative seed read into an unsigned (it became
  // 2^64 - 7), sizes whose products overflowed (SIGSEGV with --intermediate 2^63 - 1).
  for (const char* a : {"--seed -7", "--intermediate 9223372036854775807", "--layers 100000000"}) {
    std::string log;
    EXPECT_NE(run(kCli + " train --preset tiny --data " + kText +
                      " --seq 64 --steps 1 --threads 1 --quiet " + a,
                  log),
              0)
        << a << "\n"
        << log;
  }
}

TEST(CliFlags, AttentionScheduleAndPlanRefuseEveryBadNumericValueNamingTheFlag) {
  walk({"attention",
        "--random 64,4,2,8",
        {"--seed", "--world", "--nodes", "--scale", "--threads", "--warmup"},
        kBad});
  walk({"schedule", "", {"--world", "--nodes", "--seq"}, kBad});
  walk({"plan",
        "--model llama-7b --seq 64K --gpus 8",
        {"--gpus", "--gpus-per-node", "--memory-limit", "--seq-selective-fraction", "--top", "--dp",
         "--cp", "--global-batch", "--prune-gap"},
        kBad});
  walk({"plan",
        "--train tiny --seq 1024 --gpus 2",
        {"--ffn-chunk", "--data-tokens", "--memory-limit"},
        kBad});
}

TEST(CliFlags, EvalGeneratePasskeyAndTokenizeRefuseEveryBadNumericValueNamingTheFlag) {
  const std::string ck = checkpoint(), out = temp_path("flags", "out");
  walk({"eval",
        "--checkpoint-dir " + ck + " --data " + kText +
            " --seq 64 --sequences 1 --threads 1 --out " + out,
        {"--seq", "--world", "--sequences", "--buckets", "--threads"},
        kBad});
  walk({"generate",
        "--checkpoint-dir " + ck + " --prompt hi --max-new-tokens 2 --threads 1",
        {"--max-new-tokens", "--world", "--temperature", "--top-p", "--seed", "--threads"},
        kBad});
  walk(
      {"passkey",
       "--checkpoint-dir " + ck + " --lengths 160 --depths 0.5 --trials 1 --threads 1 --out " + out,
       {"--trials", "--digits", "--seed", "--world", "--threads"},
       kBad});
  walk({"passkey",
        "--make-data " + out + "/pk.tok --count 2 --length 160",
        {"--length", "--count"},
        kBad});
  walk({"tokenize", "--in " + kText + " --out " + out + "/t.tok", {"--show"}, kBad});
  fs::remove_all(out);
}

// issue 29: eval, generate and passkey read a model from --checkpoint-dir; --checkpoint there (its
// old spelling, and train's recompute policy) still works and warns.
TEST(CliFlags, CheckpointIsADeprecatedAliasOfCheckpointDir) {
  const std::string ck = checkpoint();
  const std::string tail = " --prompt hi --max-new-tokens 2 --threads 1";
  std::string now, old;
  ASSERT_EQ(run(kCli + " generate --checkpoint-dir " + ck + tail, now), 0) << now;
  ASSERT_EQ(run(kCli + " generate --checkpoint " + ck + tail, old), 0) << old;
  EXPECT_EQ(now.find("deprecated"), std::string::npos) << now;
  EXPECT_NE(
      old.find("[generate] warning: --checkpoint DIR is deprecated here, use --checkpoint-dir"),
      std::string::npos)
      << old;
  EXPECT_NE(old.find(now), std::string::npos) << "the same text:\n" << now << "\n" << old;
  std::string none;
  EXPECT_EQ(run(kCli + " generate" + tail, none), 1) << none;
  EXPECT_NE(none.find("--checkpoint-dir is required"), std::string::npos) << none;
}

TEST(CliFlags, CalibrateRefusesNegativeAndNanValuesNamingTheFlag) {
  // Only values that cannot start a long measurement (a huge --pingpong-seconds is legal).
  walk({"calibrate",
        "--out " + temp_path("flags", "hw.json") + " --repeats 1 --pingpong-seconds 0.001",
        {"--threads", "--repeats", "--block", "--pingpong-seconds", "--memory-gib"},
        {"-7", "nan"}});
}

// issue 20: keys of shape [N, 0, D] ended `attention` by SIGFPE (hq % hkv).
TEST(CliFlags, AttentionRefusesInputsWithAZeroExtent) {
  const std::string d = temp_path("flags", "npy");
  fs::create_directories(d);
  namespace core = longseq::core;
  const std::vector<float> q(8 * 2 * 4, 0.5f);
  core::write_npy(d + "/q.npy", core::DType::f32, {8, 2, 4}, q.data());
  core::write_npy(d + "/k.npy", core::DType::f32, {8, 0, 4}, nullptr);
  core::write_npy(d + "/v.npy", core::DType::f32, {8, 0, 4}, nullptr);
  std::string log;
  EXPECT_EQ(
      run(kCli + " attention --q " + d + "/q.npy --k " + d + "/k.npy --v " + d + "/v.npy", log), 1)
      << log;
  EXPECT_NE(log.find("--k has shape [8, 0, 4]: every extent must be positive"), std::string::npos)
      << log;
  fs::remove_all(d);
}

}  // namespace
