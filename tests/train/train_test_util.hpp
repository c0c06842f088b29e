#pragma once
// Helpers shared by the tests of train/ (one copy, so that the tiny configuration every trainer
// test starts from, and the way a refusal's message is read, cannot drift apart between files).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include "longseq/core/error.hpp"
#include "longseq/train/trainer.hpp"

namespace longseq::testing {

/// The message of the core::Error `f` throws, or "no error".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::Error& e) {
    return e.what();
  }
  return "no error";
}

/// A per-process file name in the test temp directory: TempDir/longseq_<prefix>_<pid>_<name>.
inline std::string temp_path(const std::string& prefix, const std::string& name) {
  return ::testing::TempDir() + "/longseq_" + prefix + "_" + std::to_string(::getpid()) + "_" +
         name;
}

/// Preset "tiny" (2 layers, hidden 32, 4 query / 2 key-value heads, vocabulary 257) on the shipped
/// corpus: one step of 64 tokens, one thread, world 1, no checkpointing, no files written, final
/// parameters and last gradient kept in the summary.
inline train::TrainConfig tiny_config() {
  train::TrainConfig c = train::preset("tiny");
  c.data = std::string(LONGSEQ_SOURCE_DIR) + "/data/kjv-genesis-exodus.txt";
  c.seq = 64;
  c.steps = 1;
  c.threads = 1;
  c.quiet = true;
  c.keep_params = true;
  c.save_every = -1;
  c.checkpoint = "none";
  return c;
}

/// tiny_config() with unusual heads: 6 query heads of 4 dims sharing 2 key/value heads (g = 3),
/// hidden 24, so head splits that assume g = 1 or 2 fail.
inline train::TrainConfig unusual_heads_config() {
  train::TrainConfig c = tiny_config();
  c.model.heads = 6;
  c.model.kv_heads = 2;
  c.model.head_dim = 4;
  c.model.hidden = 24;
  return c;
}

/// Trains `c` into a fresh directory `root` (removed first), saving only the final checkpoint
/// (root/checkpoint); returns root. For tests that evaluate or generate from a trained model.
inline std::string train_into(train::TrainConfig c, const std::string& root) {
  std::filesystem::remove_all(root);
  c.out = root;
  c.save_every = 0;
  train::train(c);
  return root;
}

/// Runs a shell command; `out` gets its stdout and stderr. Returns the exit status (-1: did not
/// exit normally).
inline int run(const std::string& cmd, std::string& out) {
  out.clear();
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/// The message train() refuses `c` with, or "no error".
inline std::string refusal(const train::TrainConfig& c) {
  return error_of([&] { train::train(c); });
}

}  // namespace longseq::testing
