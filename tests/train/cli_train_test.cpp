// `longseq train` as a user calls it (issue contract: --preset NAME with overrides,
// DIR/metrics.json = {"config": {...}, "steps": [{"step", "loss", "tokens_per_sec", "mfu",
// "peak_rss_mib", "compute_s", "comm_wait_s"}, ...]}, the checkpoint under DIR), on the tiny preset
// with an odd length and an odd world, in both precisions; bad values end with a non-zero status
// and a message naming them, never a hang or a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "longseq/comm/launch.hpp"
#include "longseq/core/flag_rows.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/train/config.hpp"
#include "train_test_util.hpp"

namespace {

namespace fs = std::filesystem;
using longseq::testing::run;
using longseq::testing::temp_path;

std::string train_cmd(const std::string& args) {
  return std::string(LONGSEQ_CLI) + " train --preset tiny --data " + LONGSEQ_SOURCE_DIR +
         "/data/kjv-genesis-exodus.txt --quiet " + args;
}

TEST(TrainCli, WritesMetricsAndCheckpointPerTheContract) {
  for (const char* precision : {"fp32", "bf16"}) {
    const std::string dir = temp_path("cli_train", precision);
    fs::remove_all(dir);
    std::string log;
    ASSERT_EQ(
        run(train_cmd(std::string("--steps 3 --seq 77 --world 3 --algo ring --balance striped "
                                  "--checkpoint seq-selective --seq-selective-fraction 0.75 "
                                  "--precision ") +
                      precision + " --out " + dir),
            log),
        0)
        << log;
    const nlohmann::json m = nlohmann::json::parse(longseq::core::read_file(dir + "/metrics.json"));
    EXPECT_EQ(m["config"]["precision"], precision);
    EXPECT_EQ(m["config"]["seq"], 77);
    EXPECT_EQ(m["config"]["world"], 3);
    EXPECT_EQ(m["config"]["checkpoint"], "seq-selective");
    EXPECT_EQ(m["config"]["seq_selective_fraction"], 0.75);
    ASSERT_EQ(m["steps"].size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      const auto& s = m["steps"][i];
      EXPECT_EQ(s["step"], static_cast<int>(i));
      for (const char* k :
           {"loss", "tokens_per_sec", "mfu", "peak_rss_mib", "compute_s", "comm_wait_s"}) {
        ASSERT_TRUE(s.contains(k)) << k;
        EXPECT_TRUE(std::isfinite(s[k].get<double>())) << k;
        EXPECT_GE(s[k].get<double>(), 0.0) << k;
      }
    }
    EXPECT_TRUE(fs::exists(dir + "/checkpoint/model.safetensors")) << log;
    fs::remove_all(dir);
  }
}

TEST(TrainCli, RefusesBadValuesNamingThem) {
  struct Case {
    const char* args;
    const char* want;
  };
  for (const Case& c :
       {Case{"--precision fp16", "--precision 'fp16'"},
        Case{"--checkpoint seq-selective --seq-selective-fraction 1", "--seq-selective-fraction 1"},
        Case{"--checkpoint lots", "--checkpoint 'lots'"},
        Case{"--world 3 --seq 4", "--seq 4 must be at least 2 tokens per rank"},
        Case{"--vocab 100", "larger than the model's 100 (set --vocab)"},
        Case{"--init-from /nonexistent/hf", "--init-from /nonexistent/hf: no config.json"}}) {
    std::string log;
    EXPECT_EQ(run(train_cmd(c.args), log), 1) << c.args << "\n" << log;
    EXPECT_NE(log.find(c.want), std::string::npos) << c.args << "\n" << log;
  }
}

// `longseq train --help` lists every CLI row of the table (train/config.hpp) with its help line
// and the main preset's value as its default: a row added to the table is documented by it.
TEST(TrainCli, HelpListsEveryRowWithTheMainPresetsValue) {
  std::string help;
  ASSERT_EQ(run(std::string(LONGSEQ_CLI) + " train --help", help), 0) << help;
  const longseq::train::TrainConfig main = longseq::train::preset("main");
  int rows = 0;
  for (const auto& f : longseq::train::train_fields()) {
    if (!f.in_cli()) {
      EXPECT_EQ(help.find(std::string(" --") + f.key + " "), std::string::npos) << f.key;
      continue;
    }
    const size_t at = help.find(std::string("      ") + f.flag + " ");
    ASSERT_NE(at, std::string::npos) << f.flag << " missing from --help:\n" << help;
    const std::string line = help.substr(at, help.find('\n', at) - at);
    EXPECT_NE(line.find(f.help), std::string::npos) << line;
    const auto v = f.get(main);
    const std::string text = longseq::core::field_text(v);
    const std::string def = std::holds_alternative<bool*>(v) ? (*std::get<bool*>(v) ? "on" : "off")
                            : text.empty()                   ? "none"
                                                             : text;
    EXPECT_NE(line.find("[default: " + def + "]"), std::string::npos) << line;
    ++rows;
  }
  EXPECT_GE(rows, 30);
}

// The flags several commands share (core/flag_rows.hpp, issue 29): every command that takes one
// lists it with the row's words and the row's default; `train` shows the main preset's value (its
// defaults are the preset's), which for these rows is the row's but for --world. Their ranges
// read the same too.
TEST(TrainCli, SharedFlagsReadTheSameInEveryCommand) {
  namespace rows = longseq::core::rows;
  using Row = longseq::core::FlagRow;
  const std::vector<std::pair<std::string, std::vector<const Row*>>> commands = {
      {"train",
       {&rows::algo, &rows::balance, &rows::mask, &rows::precision, &rows::world, &rows::nodes,
        &rows::threads, &rows::link}},
      {"attention",
       {&rows::algo, &rows::balance, &rows::mask, &rows::precision, &rows::world, &rows::nodes,
        &rows::threads, &rows::link}},
      {"schedule", {&rows::algo, &rows::balance, &rows::mask, &rows::world, &rows::nodes}},
      {"plan", {&rows::balance, &rows::mask, &rows::device}},
      {"eval",
       {&rows::algo, &rows::balance, &rows::mask, &rows::precision, &rows::device, &rows::world,
        &rows::threads}},
      {"generate",
       {&rows::algo, &rows::balance, &rows::precision, &rows::device, &rows::world,
        &rows::threads}},
      {"passkey", {&rows::algo, &rows::balance, &rows::device, &rows::world, &rows::threads}},
      {"calibrate", {&rows::threads, &rows::device}},
  };
  const longseq::train::TrainConfig main = longseq::train::preset("main");
  for (const auto& [cmd, taken] : commands) {
    std::string help;
    ASSERT_EQ(run(std::string(LONGSEQ_CLI) + " " + cmd + " --help", help), 0) << help;
    for (const Row* r : taken) {
      const size_t at = help.find(std::string("      ") + r->flag + " ");
      ASSERT_NE(at, std::string::npos) << cmd << ": " << r->flag << " missing:\n" << help;
      const std::string line = help.substr(at, help.find('\n', at) - at);
      EXPECT_NE(line.find(r->help), std::string::npos) << cmd << ": " << line;
      std::string def = *r->text ? std::string(r->text) : std::to_string(r->number);
      if (cmd == "train")
        def = longseq::core::field_text(
            longseq::core::find_field(longseq::train::train_fields(), r->flag + 2)->get(main));
      EXPECT_NE(line.find("[default: " + def + "]"), std::string::npos) << cmd << ": " << line;
    }
  }
  // A numeric row's range refuses a value below it with the same words in every command (the
  // command's name as component), before anything runs; train's table gives the same words.
  for (const auto& [cmd, taken] : commands)
    for (const Row* r : taken) {
      if (*r->text) continue;  // a string row: its owner's parser checks it
      const std::string below = std::to_string(static_cast<int64_t>(r->range.lo) - 3);
      std::string log;
      EXPECT_EQ(run(std::string(LONGSEQ_CLI) + " " + cmd + " " + r->flag + " " + below, log), 1)
          << cmd << " " << r->flag << " " << below << "\n"
          << log;
      const std::string want = "error: [" + cmd + "] " + r->flag + " " + below +
                               " must be >= " + std::to_string(static_cast<int64_t>(r->range.lo));
      EXPECT_NE(log.find(want), std::string::npos) << "want '" << want << "' in:\n" << log;
    }
  // --backend is declared by the comm registry, not a row: attention shows the registry's words.
  std::string help;
  ASSERT_EQ(run(std::string(LONGSEQ_CLI) + " attention --help", help), 0) << help;
  const size_t at = help.find("      --backend ");
  ASSERT_NE(at, std::string::npos) << help;
  const std::string line = help.substr(at, help.find('\n', at) - at);
  EXPECT_NE(line.find(longseq::comm::backend_help()), std::string::npos) << line;
  EXPECT_NE(line.find("[default: " + longseq::comm::Options{}.backend + "]"), std::string::npos)
      << line;
}

// The same run under mpirun (one process per rank, the MPI backend; ZeRO-3 prefetches travel on
// its progress thread) and on the local backend: same losses to fp32 rounding.
TEST(TrainCli, MpirunEqualsTheLocalBackend) {
#ifndef LONGSEQ_WITH_MPI
  GTEST_SKIP() << "built without MPI";
#else
  std::string log;
  if (run("command -v mpirun", log) != 0) GTEST_SKIP() << "no mpirun on PATH";
  const std::string args = "--steps 2 --seq 61 --world 3 --algo ring --precision bf16 --out ";
  const std::string a = temp_path("cli_mpi", "mpi"), b = temp_path("cli_mpi", "local");
  ASSERT_EQ(run("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "
                "-np 3 " +
                    train_cmd(args + a),
                log),
            0)
      << log;
  ASSERT_EQ(run(train_cmd(args + b), log), 0) << log;
  const nlohmann::json ma = nlohmann::json::parse(longseq::core::read_file(a + "/metrics.json"));
  const nlohmann::json mb = nlohmann::json::parse(longseq::core::read_file(b + "/metrics.json"));
  ASSERT_EQ(ma["steps"].size(), 2u);
  ASSERT_EQ(mb["steps"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const double la = ma["steps"][i]["loss"], lb = mb["steps"][i]["loss"];
    EXPECT_NEAR(la, lb, 1e-5 * lb) << "step " << i;
  }
  fs::remove_all(a);
  fs::remove_all(b);
#endif
}

// On a terminal (a pseudo-terminal from util-linux's `script`) the progress line moves within a
// step: each step draws its first layer's line at once (later ones at most every 0.25 s); through
// a pipe nothing of it is printed. train_cmd's --quiet is dropped for this one.
TEST(TrainCli, OnATerminalTheLineNamesThePassAndLayerWithinAStep) {
  std::string log;
  if (run("script -qec true /dev/null", log) != 0) GTEST_SKIP() << "no `script` here: " << log;
  std::string cmd = train_cmd("--steps 2 --seq 64 --threads 1");
  cmd.erase(cmd.find(" --quiet"), 8);
  ASSERT_EQ(run("script -qec '" + cmd + "' /dev/null", log), 0) << log;
  EXPECT_NE(log.find("\033[K[step 1/2] forward layer 1/2  ETA "), std::string::npos) << log;
  EXPECT_NE(log.find("\033[K[step 2/2] forward layer 1/2  ETA "), std::string::npos) << log;
  ASSERT_EQ(run(cmd, log), 0) << log;
  EXPECT_EQ(log.find(" layer "), std::string::npos) << log;
  EXPECT_EQ(log.find("\033[K"), std::string::npos) << log;
}

}  // namespace
