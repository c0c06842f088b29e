#pragma once
// `longseq eval`: a checkpoint's loss over long sequences of a token file, overall and by
// position, computed with the distributed engine (any world, algorithm, balance layout, mask).
//
// Where it computes (--device): the CPU at any world, or one GPU at world 1 (a rank holding the
// whole sequence, as `train --device cuda`), with the same forward either way.
//
// Sequences are those of training (data.hpp): sequence i is tokens [i N, (i + 1) N), the label of
// position p is token p + 1, the last position has none. Loss = mean over every labelled position
// of every evaluated sequence; perplexity = exp(loss). Positions are grouped into `buckets`
// equal-width ranges [start, end) of [0, N) (at most N - 1 of them, so that every bucket holds a
// labelled position); a bucket's loss is the mean over its labelled positions of every sequence:
// the standard loss-against-position curve of long-context evaluation.
//
// Output (Contract of issue 16): OUT/eval.json = exactly {"loss", "perplexity", "tokens",
// "positions": [{"start", "end", "loss"}, ...]} (loss and perplexity numbers, tokens and start/end
// integers; the buckets tile [0, N) in order) and OUT/loss_by_position.svg; beside them
// OUT/eval_run.json holds the same numbers plus the run's settings, the sequence count, the time
// and each bucket's labelled-token count.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "longseq/attention/algorithm.hpp"
#include "longseq/attention/layout.hpp"
#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/flag_rows.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/inference.hpp"

namespace longseq::comm {
class Group;
}

namespace longseq::train {

/// DIR if it holds config.json, else DIR/checkpoint (a training --out directory). Throws
/// core::Error naming DIR when neither holds one.
std::string resolve_checkpoint(const std::string& dir);

/// The weights of the checkpoint (config.json + safetensors, any Hugging Face LLaMA directory) as
/// a replica on every rank of `group`, kept on `device` (model::ReplicaParams): each rank reads
/// its ZeRO shard, then the units are gathered. Collective.
model::ReplicaParams load_replica(const std::string& dir, const model::ParamLayout& layout,
                                  comm::Group& group, core::Device device = core::Device::cpu());

/// attention::parse_balance, its refusal rethrown as core::Error("[component] --balance B: ...")
/// so that the message names the flag.
attention::Balance parse_balance_flag(std::string_view component, const std::string& balance);

/// attention::Algorithm::parse + validate(world, hq, hkv); a refusal of validate is rethrown as
/// core::Error("[component] --algo A at --world P (...): ...") naming the flags and values.
attention::Algorithm parse_algo_flag(std::string_view component, const std::string& algo, int world,
                                     int64_t hq, int64_t hkv);

struct EvalConfig {
  std::string checkpoint;  ///< directory (resolve_checkpoint)
  std::string data;        ///< token file, or .txt tokenized byte-level
  int64_t seq = 0;         ///< N
  int world = core::rows::world.number;
  std::string algo = core::rows::algo.text;
  std::string balance = core::rows::balance.text;
  std::string mask = core::rows::mask.text;  ///< the trainer's --mask grammar (model::TrainMask)
  int64_t sequences = 0;  ///< evaluate the first K sequences (0: all of the file)
  int64_t buckets = 16;   ///< position buckets (clamped to N - 1)
  int threads = core::rows::threads.number;  ///< per rank; 0: core::default_threads
  std::string precision = core::rows::precision.text;
  /// cpu | cuda | cuda:N. On a GPU (world 1 only) the weights live there and the forward and the
  /// logits' product run there (model::forward_hidden, model::token_losses with its kernels).
  std::string device = core::rows::device.text;
  std::string out;  ///< directory for eval.json and loss_by_position.svg (empty: none)

  /// The strings as typed values, parsed once (parse()).
  struct Parsed {
    attention::Algorithm algo;
    attention::Balance balance{};
    model::TrainMask mask;
    core::DType precision = core::DType::f32;
    core::Device device;
    /// The block mask's block size (block-striped layouts), 0 without one.
    int64_t block() const { return mask.base ? mask.base->block_size : 0; }
  };
  /// Checks every field and returns the typed values. Throws core::Error("[eval] ...") (or the
  /// parser's component) naming the value.
  Parsed parse() const;
  void validate() const { (void)parse(); }
};

struct EvalBucket {
  int64_t start = 0, end = 0;  ///< positions [start, end)
  double loss = 0;
  int64_t tokens = 0;
};

struct EvalResult {
  double loss = 0, perplexity = 0;
  int64_t tokens = 0, sequences = 0;
  std::vector<EvalBucket> positions;
  double seconds = 0;
  /// eval.json: exactly {"loss", "perplexity", "tokens", "positions": [{"start", "end", "loss"}]}.
  nlohmann::json to_json() const;
  /// eval_run.json's numbers: to_json() plus "sequences", "seconds" and each bucket's "tokens".
  nlohmann::json run_json() const;
};

/// Runs the evaluation (local backend threads, or MPI under mpirun) and, with cfg.out, writes
/// OUT/eval.json and OUT/loss_by_position.svg. Blocking. Under mpirun the result is world rank
/// 0's, so it is meaningful in the launcher's rank-0 process only, and only that process writes.
EvalResult evaluate(const EvalConfig& cfg);

/// The loss-by-position line plot (core/plot), its y axis from 0; with `vocab` > 0 also the loss
/// of a uniform guess, ln(vocab) ("chance"), as a reference line.
std::string loss_by_position_svg(const EvalResult& r, const std::string& title, int64_t vocab = 0);

}  // namespace longseq::train
