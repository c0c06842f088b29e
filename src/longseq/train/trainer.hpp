#pragma once
// The training loop: world = dp data-parallel replicas x cp context-parallel ranks, ZeRO-3 over
// all of them (zero.hpp), distributed attention inside each replica's context group, fused or
// unfused LM head loss, AdamW with cosine schedule and global clipping, safetensors checkpoints
// with bit-identical resume, and metrics.json.
//
// Rank mapping: world rank w trains replica d = w / cp as context rank w % cp; replica d's context
// group is world.split(d, w). Every rank of a replica reads the same sequence
// (Loader::sequence_index(step, d, dp)) and takes its own tokens under the balance layout.
//
// Loss: each rank's token losses are summed and divided by the *global* count of non-ignored
// tokens over all ranks (all-reduced before the backward), so the gradient equals that of the
// mean loss over every token of the step, whatever the world, dp or layout.
//
// MFU: model FLOPs per step / (step seconds * peak), where
//   model FLOPs = 6 * N_matmul * tokens + 12 * layers * Hq * D * visible_pairs
// (N_matmul: weights in matrix products, LM head included; tokens: dp * seq; visible_pairs: the
// (query, key) pairs the mask allows per sequence, N(N+1)/2 causal, times dp; 12 = forward 4 +
// backward 8 FLOPs per pair and head dim; recomputation is not counted, as in PaLM's MFU) and
// peak = a start-up measurement of single-thread GEMM at the run's precision (kernels/gemm, sgemm
// or bf16, 1024^3, best of 3) times the hardware threads.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/core/dtype.hpp"
#include "longseq/model/config.hpp"
#include "longseq/train/data.hpp"
#include "longseq/train/optimizer.hpp"

namespace longseq::train {

struct TrainConfig {
  std::string preset = "main";
  model::LlamaConfig model;
  int64_t steps = 6;
  int64_t seq = 32768;
  int world = 4;  ///< total ranks (dp * cp)
  int dp = 1;     ///< data-parallel replicas
  int nodes = 1;  ///< declared nodes (local backend)
  std::string algo = "burst";
  std::string balance = "zigzag";
  std::string checkpoint = "seq-selective";
  std::string loss = "fused";
  /// "fp32" | "bf16": bf16 runs every matrix product and attention on bf16 operands with fp32
  /// accumulation, gathers ZeRO-3 parameters in bf16, and keeps fp32 master weights, gradients,
  /// AdamW moments, norms and the residual stream (model/transformer.hpp).
  std::string precision = "fp32";
  /// seq-selective: share of the sequence whose attention is recomputed (model::ModelOptions).
  double seq_selective_fraction = 0.5;
  uint64_t seed = 1234;
  std::string data = "data/kjv-genesis-exodus.txt";
  std::string out;     ///< empty: no files written
  std::string resume;  ///< a previous --out directory
  /// A Hugging Face LLaMA directory (config.json + safetensors) to start from: its weights become
  /// the initial parameters (AdamW moments zero, step 0); `model` must equal its config.json
  /// (the CLI takes the model from it). Exclusive with `resume`.
  std::string init_from;
  int64_t ffn_chunk = 1024;
  int64_t lm_tile = 0;  ///< token tile of the fused LM head (0 auto)
  bool doc_mask = false;
  int64_t save_every = 0;  ///< 0: at the end only; < 0: never
  int threads = 0;         ///< compute threads per rank (0: hardware threads / world, >= 1)
  std::string link = "none";
  AdamWConfig optim;
  bool quiet = false;
  /// Stop after this many steps (0: run all) while the schedule still spans `steps`: an
  /// interrupted run, to be continued with --resume.
  int64_t stop_after = 0;
  /// Tests: keep the final full parameters, and the last step's gradient before clipping (units
  /// concatenated, unit sizes of config.hpp), in the summary.
  bool keep_params = false;
  /// Under mpirun, a failed rank ends the whole job (MPI_Abort) instead of leaving peers stuck in
  /// compute until the timeout; the CLI sets it, tests (local backend) leave it off.
  bool abort_on_failure = false;

  int cp() const { return dp > 0 ? world / dp : 0; }
  /// Throws core::Error("[train] ...") naming the offending values (world not divisible by dp,
  /// heads vs ulysses, unknown algo/balance/policy/loss, seq too short, ...).
  void validate() const;
  nlohmann::json to_json() const;
};

/// Built-in presets: "main" (the demo: 4 layers, hidden 256, 32K tokens, 4 ranks, burst, zigzag,
/// fused, seq-selective, ZeRO-3), "tiny" (tests), "small". Throws core::Error listing them when
/// `name` is unknown. A name ending in .json is read as a file of TrainConfig keys.
TrainConfig preset(const std::string& name);
std::vector<std::string> preset_names();
/// Applies JSON keys (the to_json() names) over `c`; unknown keys are refused by name.
void apply_json(TrainConfig& c, const nlohmann::json& j);

struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double seconds = 0, tokens_per_sec = 0, mfu = 0, peak_rss_mib = 0;
  double compute_s = 0, comm_wait_s = 0;
  /// Activations kept between forward and backward by the checkpoint policy (largest rank).
  double saved_activation_mib = 0;
};

struct TrainSummary {
  std::vector<StepRecord> steps;
  int64_t first_step = 0;
  double peak_gflops = 0;
  std::vector<float> params;  ///< keep_params only
  std::vector<float> grads;   ///< keep_params only: last step's gradient, before clipping
};

/// Loads `cfg.data`: a token file, or a .txt file tokenized byte-level in memory (one document).
TokenFile load_training_data(const std::string& path);

/// Runs the whole training (local backend threads, or MPI under mpirun). Blocking.
TrainSummary train(const TrainConfig& cfg);

/// The machine's measured peak at `precision` ("fp32": sgemm, "bf16": bf16 GEMM with fp32
/// accumulation): single-thread GFLOP/s of a 1024^3 product times hardware threads.
double measure_peak_gflops(const std::string& precision = "fp32");
/// "fp32" -> f32, "bf16" -> bf16; throws core::Error naming `s` otherwise.
core::DType parse_precision(const std::string& s);

}  // namespace longseq::train
