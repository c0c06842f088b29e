#pragma once
// `longseq generate`: text from a checkpoint with a KV cache, the prompt's prefill on the
// distributed engine over P ranks and decoding with the cache sharded across them
// (model/inference.hpp: each rank a partial over its shard, merged by (O, LSE)).
//
// Prefill: the prompt (n tokens) is split by the balance layout and run through the model with the
// chosen attention algorithm; each rank keeps K, V of its own prompt tokens. The first new token
// comes from the logits of position n - 1 (computed on the rank holding it, broadcast). Decode:
// token i (i >= 1) is fed at position n + i - 1 on every rank; its K, V go to rank
// (position mod P), so shards grow evenly; every rank merges the same partials in the same order,
// so every rank samples the same token with no further communication.
//
// Where it computes (--device): the CPU at any world, or one GPU at world 1. On a GPU the weights,
// the prefill (model::prefill: the forward through model::Kernels and the one-rank GPU attention)
// and, at each decode step, every product, norm, RoPE and SwiGLU and the logits' product run
// there; the KV cache, the decode attention over it (one query row, kernels/cpu) and sampling stay
// on the host (model/inference.hpp). The CPU runs the same code through its kernels.
//
// Sampling (sample_token): temperature 0 is greedy (argmax, lowest id on ties); otherwise
// softmax(logits / T) restricted to the smallest set of most probable tokens whose mass reaches
// top_p (top-p / nucleus; 1 = all), drawn with core::uniform01(seed, i) for the i-th new token:
// the same seed gives the same text whatever the world.
#include <cstdint>
#include <string>
#include <vector>

#include "longseq/attention/algorithm.hpp"
#include "longseq/attention/layout.hpp"
#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/flag_rows.hpp"

namespace longseq::train {

struct GenerateConfig {
  std::string checkpoint;       ///< directory (eval.hpp resolve_checkpoint)
  std::vector<int32_t> prompt;  ///< token ids (>= 1)
  int64_t max_new_tokens = 32;
  int world = core::rows::world.number;
  std::string algo = core::rows::algo.text;
  std::string balance = core::rows::balance.text;
  double temperature = 0.0;
  double top_p = 1.0;
  uint64_t seed = 0;
  int threads = core::rows::threads.number;  ///< per rank; 0: core::default_threads
  std::string precision = core::rows::precision.text;
  /// cpu | cuda | cuda:N (a GPU at world 1 only; see top of file).
  std::string device = core::rows::device.text;
  /// Stop after generating this id (-1: never; the CLI passes the tokenizer's end of text with
  /// --stop-at-eot).
  int32_t stop_token = -1;

  /// The strings as typed values, parsed once (parse()).
  struct Parsed {
    attention::Algorithm algo;
    attention::Balance balance{};
    core::DType precision = core::DType::f32;
    core::Device device;
  };
  /// Checks every field and returns the typed values. Throws core::Error("[generate] ...") (or
  /// the parser's component) naming the value; a GPU at --world > 1 is refused naming both.
  Parsed parse() const;
  void validate() const { (void)parse(); }
};

struct GenerateResult {
  std::vector<int32_t> ids;  ///< the new tokens only
  int64_t prompt_tokens = 0;
  int threads_per_rank = 0;
  std::string device;                  ///< where it ran: "cpu", "cuda:N"
  double prefill_s = 0, decode_s = 0;  ///< wall seconds (rank 0)
  double prefill_tokens_per_s() const { return prefill_s > 0 ? prompt_tokens / prefill_s : 0; }
  /// Decode steps (every new token after the first) per second.
  double decode_tokens_per_s() const {
    return decode_s > 0 && ids.size() > 1 ? static_cast<double>(ids.size() - 1) / decode_s : 0;
  }
};

/// Runs prefill and decoding (local threads, or MPI under mpirun) on cfg.device. Blocking. Under
/// mpirun the result is world rank 0's: meaningful in the launcher's rank-0 process only. A GPU
/// this build or machine lacks is refused before the checkpoint is read: core::Error("[generate]
/// --device cuda:N: ...").
GenerateResult generate(const GenerateConfig& cfg);

/// The i-th new token from `logits` (see top of file). Throws core::Error for temperature < 0 or
/// top_p outside (0, 1].
int32_t sample_token(const std::vector<float>& logits, double temperature, double top_p,
                     uint64_t seed, int64_t i);

/// Token ids from a file: a token file (data.hpp), or text holding integers separated by
/// whitespace, commas or brackets (a JSON array works). Throws core::Error naming the file.
std::vector<int32_t> read_prompt_ids(const std::string& path);

}  // namespace longseq::train
