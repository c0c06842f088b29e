#pragma once
// Passkey retrieval (Mohtashami & Jaggi, "Landmark Attention", 2023): a random key hidden at a
// chosen depth of filler text, asked for at the end, scored by whether greedy decoding returns
// it. Byte-level text (one token per byte, train/data.hpp), so a length is a token count.
//
//   <filler up to depth> The pass key is 48213. Remember it. 48213 is the pass key. <filler>
//   What is the pass key? The pass key is| 48213
//
// The filler is the repeated "The grass is green. The sky is blue. ..." of the paper; the needle
// starts at floor(depth * filler length) characters into it (depth 0: first, 1: last before the
// question). The model must answer " <key>": the next digits + 1 tokens under greedy decoding
// (train/generate.hpp, so any world / algorithm runs the prefill and the sharded KV cache).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/core/flag_rows.hpp"
namespace longseq::train {

/// The key of trial `trial` at (length, depth): `digits` decimal digits, deterministic in seed.
std::string passkey_key(uint64_t seed, int64_t length, int64_t depth_index, int64_t trial,
                        int digits);

/// The prompt (exactly `length` bytes, ending with "The pass key is") with `key` at `depth`, and
/// the expected answer " <key>". Throws core::Error when `length` cannot hold needle and question.
struct PasskeyCase {
  std::string prompt, answer;
};
PasskeyCase passkey_case(int64_t length, double depth, const std::string& key);

/// Training data for the task: `count` documents, each a prompt of `length` bytes at a random
/// depth followed by its answer, written as a byte-level token file (end of text after each).
void write_passkey_data(const std::string& path, int64_t length, int64_t count, uint64_t seed,
                        int digits);

struct PasskeyConfig {
  std::string checkpoint;
  std::vector<int64_t> lengths = {256, 512, 1024};
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int64_t trials = 4;  ///< keys per cell
  int digits = 5;
  uint64_t seed = 1;
  int world = core::rows::world.number;
  std::string algo = core::rows::algo.text;
  std::string balance = core::rows::balance.text;
  int threads = core::rows::threads.number;  ///< per rank; 0: core::default_threads
  /// cpu | cuda | cuda:N: generate()'s --device (a GPU at world 1 only).
  std::string device = core::rows::device.text;
  std::string out;  ///< directory: passkey.json and passkey.svg (empty: none)
  /// Throws core::Error("[passkey] ...") naming a bad value (a GPU at --world > 1 included).
  void validate() const;
};

struct PasskeyResult {
  std::vector<int64_t> lengths;
  std::vector<double> depths;
  std::vector<double> accuracy;  ///< [lengths x depths], row-major: whole key right
  /// [lengths x depths]: the fraction of the key's digits right in place (partial credit, for
  /// seeing a model half way; the heat map shows `accuracy`).
  std::vector<double> digit_accuracy;
  double overall = 0;
  nlohmann::json to_json() const;
};

/// Runs every (length, depth, trial) through generate(); writes OUT/passkey.json and the heat maps
/// OUT/passkey.svg (accuracy by length x depth, core/plot) and OUT/passkey_digits.svg
/// (digit_accuracy). A GPU this build or machine lacks is refused before the first trial
/// (core::Error("[passkey] --device cuda:N: ...")). Under mpirun the scores are those of the
/// launcher's rank-0 process (where generate()'s result lives), and only that process writes.
PasskeyResult run_passkey(const PasskeyConfig& cfg);

/// The heat map of whole-key accuracy, or with `digits` of digit_accuracy (passkey_digits.svg).
std::string passkey_svg(const PasskeyResult& r, const std::string& title, bool digits = false);

}  // namespace longseq::train
