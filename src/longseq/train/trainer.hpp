#pragma once
// The training loop: world = dp data-parallel replicas x cp context-parallel ranks, ZeRO-3 over
// all of them (zero.hpp), distributed attention inside each replica's context group, fused or
// unfused LM head loss, AdamW with cosine schedule and global clipping, safetensors checkpoints
// with bit-identical resume, and metrics.json (plus train.svg: loss and tokens/s by step,
// train/progress.hpp, and a live progress line when stdout is a terminal).
//
// Rank mapping: world rank w trains replica d = w / cp as context rank w % cp; replica d's context
// group is world.split(d, w). Every rank of a replica reads the same sequence
// (Loader::sequence_index(step, d, dp)) and takes its own tokens under the balance layout. With
// --grad-accum K a step is K micro-batches: micro-batch k reads sequence number step * K + k of
// the same round robin, its gradient is added into the ZeRO-3 shards, and one optimizer step
// follows the K-th (dp x K sequences per step, as dp x K replicas of one micro-batch would read).
//
// Loss: each rank's token losses are summed and divided by the *global* count of non-ignored
// tokens over all ranks and micro-batches (all-reduced before the backward), so the gradient
// equals that of the mean loss over every token of the step, whatever the world, dp, K or layout.
//
// MFU: model FLOPs per step / (step seconds * peak), where
//   model FLOPs = 6 * N_matmul * tokens + 12 * layers * Hq * D * visible_pairs
// (N_matmul: weights in matrix products, LM head included; tokens: dp * K * seq; visible_pairs:
// the (query, key) pairs --mask allows per sequence (model::visible_pairs), N(N+1)/2 causal,
// summed over the step's dp * K sequences; 12 = forward 4 + backward 8 FLOPs per pair and head dim;
// recomputation is not counted, as in PaLM's MFU) and peak = a start-up measurement of
// single-thread GEMM at the run's precision (kernels::single_thread_gemm_flops: sgemm or bf16,
// 1024^3, thread CPU time, best of 3 after a warm-up; the same measurement `longseq calibrate`
// records) times the hardware threads.
//
// The configuration (TrainConfig, presets) is train/config.hpp; train() is built from the units
// of train/run.hpp (setup, one step, metrics, checkpointing, the loop).
#include <cstdint>
#include <string>
#include <vector>

#include "longseq/core/dtype.hpp"
#include "longseq/core/op_account.hpp"
#include "longseq/train/config.hpp"
#include "longseq/train/data.hpp"

namespace longseq::train {

/// One step's metrics: a row of metrics.json's "steps" (record_json in train/run.hpp writes it;
/// measure() fills it).
struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double seconds = 0, tokens_per_sec = 0, mfu = 0, peak_rss_mib = 0;
  /// --device cuda: the most GPU memory the run's tensors held since it started (MiB,
  /// kernels::cuda::memory_stats); 0 on a CPU. Optional when read back (older checkpoints).
  double device_peak_mib = 0;
  double compute_s = 0, comm_wait_s = 0;
  /// Activations kept between forward and backward by the checkpoint policy (largest rank).
  double saved_activation_mib = 0;
  /// The per-op account (core/op_account.hpp): wall seconds per category, mean over ranks.
  core::OpTimes ops;
  /// seconds - ops.total(): code outside every category (data, embedding-free glue, allocation)
  /// and the slowest rank's excess over the mean rank. >= 0.
  double other_s = 0;
};

struct TrainSummary {
  std::vector<StepRecord> steps;
  int64_t first_step = 0;
  double peak_gflops = 0;
  std::vector<float> params;  ///< keep_params only
  std::vector<float> grads;   ///< keep_params only: last step's gradient, before clipping
  /// SIGINT or SIGTERM when the run stopped early on that signal (after a whole step, with a
  /// final checkpoint when --out and --save-every >= 0; docs/reliability.md), else 0.
  int stop_signal = 0;
};

/// Loads `cfg.data`: a token file, or a .txt file tokenized byte-level in memory (one document).
TokenFile load_training_data(const std::string& path);

/// Runs the whole training (local backend threads, or MPI under mpirun). Blocking. While it runs,
/// SIGINT and SIGTERM are handled (the previous handlers are restored on return): the run stops
/// after the current step, saves as if that step were the last, and returns with stop_signal set.
TrainSummary train(const TrainConfig& cfg);

/// The machine's measured peak at `precision` (f32: sgemm, bf16: bf16 GEMM with fp32
/// accumulation): kernels::single_thread_gemm_flops in GFLOP/s times hardware threads.
double measure_peak_gflops(core::DType precision = core::DType::f32);

}  // namespace longseq::train
