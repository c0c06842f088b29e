#pragma once
// The units train() is made of (trainer.hpp is the contract; this header is how it is built, and
// where features hook in):
//
//   RunSetup(cfg)        setup, once per run: parse + validate, data, layout, model options,
//                        peak GEMM, the metrics "config" block, the output directory.
//   RankRun              one rank's state: rank mapping (world rank w trains replica w / cp as
//                        context rank w % cp), its ZeRO-3 shards, attention operator, records.
//   restore(run)         checkpointing in: --init-from weights or --resume state -> first step.
//   step_attention(run)  the attention operator of a step (its mask: causal, + documents).
//   run_step(run, step)  one optimizer step -> StepResult (loss, norm, lr, this rank's times).
//   measure(run, res)    metrics: the step's record (slowest rank, MFU, memory); collective.
//   report(run, rec)     metrics out: the per-step line and metrics.json (writer rank).
//   save_if_due(run, s)  checkpointing out: --save-every, the last step, a stop by signal.
//   run_rank(setup, w)   the loop over steps on one rank.
//
// Every function that takes a RankRun is collective over the run's world unless it says not.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/core/op_account.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/device_replica.hpp"
#include "longseq/model/kernels.hpp"
#include "longseq/model/transformer.hpp"
#include "longseq/train/data.hpp"
#include "longseq/train/device.hpp"
#include "longseq/train/progress.hpp"
#include "longseq/train/trainer.hpp"
#include "longseq/train/zero.hpp"

namespace longseq::train {

/// What every rank shares, read-only, for the whole run. Not movable (the loader and the shards
/// refer to its members).
struct RunSetup {
  explicit RunSetup(const TrainConfig& cfg);
  RunSetup(const RunSetup&) = delete;
  RunSetup& operator=(const RunSetup&) = delete;

  TrainConfig cfg;
  ParsedConfig parsed;  ///< cfg's strings, typed (parsed once here)
  TokenFile data;
  Loader loader;
  model::ParamLayout layout;
  attention::Layout seq_layout;  ///< the balance layout of one sequence over the cp ranks
  int threads = 1;               ///< compute threads per rank
  model::ModelOptions options;
  double peak_gflops = 0;
  nlohmann::json config;  ///< metrics.json's and the checkpoint's "config" block
  int64_t end = 0;        ///< one past the last step this run takes (--stop-after)
};

/// One rank's state for the run.
struct RankRun {
  RankRun(const RunSetup& setup, comm::Group& world);

  const RunSetup& s;
  comm::Group& world;
  int replica;      ///< world rank / cp
  comm::Group ctx;  ///< the replica's context group
  bool writer;      ///< world rank 0 prints and writes files
  ShardedState state;
  /// The model's kernels on --device (train/device.hpp).
  std::unique_ptr<model::Kernels> kernels;
  /// --device cuda: the parameters, gradients (mirror) and AdamW moments (optimizer) on the GPU,
  /// where every step runs; `state` holds them on the host for checkpoints, brought up to date by
  /// sync_from_device (train/device.hpp). Null on a CPU.
  std::unique_ptr<model::DeviceReplica> mirror;
  std::unique_ptr<DeviceOptimizer> optimizer;
  std::shared_ptr<const attention::MaskSpec> base_mask;  ///< --mask without per-step documents
  std::unique_ptr<model::AttentionOp> attn;              ///< rebuilt when the mask changes
  std::vector<StepRecord> records;                       ///< writer: every step so far
  std::vector<float> final_grads;                        ///< keep_params, writer
  Progress progress;  ///< the live progress line: writer, not --quiet, stdout a terminal
};

/// One step's outcome on this rank, before the metrics reductions.
struct StepResult {
  int64_t step = 0;
  double loss = 0;       ///< mean over the step's tokens on every rank (all-reduced)
  double grad_norm = 0;  ///< global, before clipping
  double lr = 0;
  double seconds = 0;  ///< this rank's wall time of the step
  double wait_s = 0;   ///< of which waiting on communication (collectives, ZeRO-3, attention)
  core::OpTimes ops;   ///< this rank's per-op account of the step (wall seconds)
  int64_t saved_floats_peak = 0;  ///< activations kept between forward and backward
  /// --mask document: document ids of each micro-batch's sequence (else empty).
  std::vector<std::vector<int32_t>> docs;
};

/// Moves the run's training state onto `device`: a DeviceReplica and a DeviceOptimizer made from
/// `state` (its parameters and moments as they are now), after which run_step computes, clips and
/// steps there. RankRun does it for --device cuda; tests call it with the CPU, where the device
/// path at world 1 gives the sharded path's bits (an untied model: the tied embedding's two
/// gradient contributions add in another order, device_replica.hpp). Above world 1 (ranks sharing
/// a GPU) every rank's replica is the whole model and run_step sums the gradients over the world
/// on the device (device_all_reduce), so the replicas stay equal. Collective above world 1.
void attach_device_state(RankRun& run, core::Device device);
/// state's parameters and moments -> the device (after restore); the device's -> state (before a
/// checkpoint is written, and at the end). No-ops without device state. sync_to_device is
/// collective above world 1 (it gathers the full units); sync_from_device never is.
void sync_to_device(RankRun& run);
void sync_from_device(RankRun& run);
/// The first step: 0, or the step a --resume checkpoint stopped at; loads --init-from weights.
int64_t restore(RankRun& run);
/// The attention operator for a sequence with document ids `docs` (empty: the base mask only).
model::AttentionOp& step_attention(RankRun& run, const std::vector<int32_t>& docs);
/// Runs optimizer step `step`: forward, backward, loss and norm reductions, clipping, AdamW.
StepResult run_step(RankRun& run, int64_t step);
/// The step's record: slowest rank's seconds, mean compute / wait, MFU, peak memory.
StepRecord measure(RankRun& run, const StepResult& r);
/// Prints the step's line and rewrites metrics.json (writer only; not collective).
void report(RankRun& run, const StepRecord& r);
/// Saves a checkpoint after `step` when --save-every or the end of the run asks for one;
/// `stopping` (a SIGINT / SIGTERM stop after this step) counts as the end of the run.
void save_if_due(RankRun& run, int64_t step, bool stopping = false);
/// All units' full parameters (or gradients), concatenated; every rank gets them.
std::vector<float> gather_all(RankRun& run, bool grads);

/// Model FLOPs of one step (the MFU numerator of trainer.hpp): `docs` as StepResult::docs (empty:
/// every micro-batch sees the base mask).
double step_flops(const RunSetup& s, const std::vector<std::vector<int32_t>>& docs);
/// metrics.json: {"config": config, "steps": [records]}, written atomically.
void write_metrics(const std::string& out, const nlohmann::json& config,
                   const std::vector<StepRecord>& steps);
/// One record as metrics.json writes it.
nlohmann::json record_json(const StepRecord& r);
/// The inverse of record_json (a checkpoint's log_history); throws core::Error("[train] <where>:
/// ...") naming a missing or mistyped field.
StepRecord record_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace longseq::train
