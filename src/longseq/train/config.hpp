#pragma once
// The training configuration as data: one table declares every field once, and the CLI flags
// (cli/cmd_train.cpp, with the "main" preset's value as --help default), the JSON writer and
// reader (metrics.json's "config", preset files) and the range checks all come from it
// (core/options.hpp). Presets are files, data/presets/NAME.json (core::data_dir()), each a set
// of keys over the preset it "inherits".
//
// TO ADD A FLAG, ADD ONE ENTRY HERE, to LONGSEQ_TRAIN_FIELDS below:
//   X(type, member, "--flag", default, scope, check, "help")     a member of TrainConfig
//   N(path, "key", "--flag", scope, check, "help")                a member of a nested struct
// type: bool | int | int64_t | uint64_t | double | std::string. scope: cli_json (flag and JSON
// key), cli (flag only: paths of this run), json (key only). check: core::any(),
// core::at_least(lo[, note]), core::open_interval(lo, hi), core::parsed_by(fn) for strings
// (fn throws core::Error naming a bad value; give the typed value a member of ParsedConfig and
// parse it in TrainConfig::parse()). The JSON key is the member's name; flags are kebab-case.
// Checks that relate two fields (dp divides world, ...) go into TrainConfig::parse().
//
// Notes on fields whose help line is short:
//  * precision bf16 runs every matrix product and attention on bf16 operands with fp32
//    accumulation, gathers ZeRO-3 parameters in bf16, and keeps fp32 master weights,
//    gradients, AdamW moments, norms and the residual stream (model/transformer.hpp).
//  * seq_selective_fraction: share of the sequence whose attention is recomputed under
//    --checkpoint seq-selective (model::ModelOptions).
//  * init_from: a Hugging Face LLaMA directory (config.json + safetensors) whose weights become
//    the initial parameters (AdamW moments zero, step 0); `model` must equal its config.json
//    (the CLI takes the model from it). Exclusive with `resume`.
//  * rope_scaling: a Hugging Face rope_scaling object as JSON text (model/rope_scaling.hpp: linear,
//    dynamic, yarn, llama3); when given it replaces the model's (the preset's, or --init-from's
//    config.json), '{"rope_type":"default"}' removes it. TrainConfig::model_config() applies it.
//  * stop_after: stop after this many steps (0: run all) while the schedule still spans
//    `steps`: an interrupted run, to be continued with --resume.
//  * grad_accum: micro-batches per replica per optimizer step (gradient accumulation): each is
//    one sequence, forward and backward, its gradient added into the ZeRO-3 shards; the step
//    trains dp * grad_accum sequences (trainer.hpp).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/attention/layout.hpp"
#include "longseq/comm/link_model.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/flag_rows.hpp"
#include "longseq/core/options.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/config.hpp"
#include "longseq/model/transformer.hpp"
#include "longseq/train/optimizer.hpp"

// The rows shared with other commands (--algo, --world, ...) take their flag, default and help from
// core/flag_rows.hpp through R::.
// clang-format off
#define LONGSEQ_TRAIN_FIELDS(X, N)                                                                  \
  X(int64_t, steps, "--steps", 6, cli_json, core::at_least(1), "optimizer steps")                  \
  X(int64_t, stop_after, "--stop-after", 0, cli_json, core::at_least(0),                           \
    "stop after K steps, schedule still over --steps (then --resume)")                             \
  X(int64_t, seq, "--seq", 32768, cli_json, core::any(), "tokens per sequence (N)")                \
  X(int, world, R::world.flag, R::world.number, cli_json, R::world.range, R::world.help)           \
  X(int, dp, "--dp", 1, cli_json, core::any(), "data-parallel replicas (divides --world)")         \
  X(int, grad_accum, "--grad-accum", 1, cli_json, core::at_least(1),                               \
    "micro-batches per replica per step (gradient accumulation)")                                  \
  X(int, nodes, R::nodes.flag, R::nodes.number, cli_json, R::nodes.range, R::nodes.help)           \
  X(std::string, algo, R::algo.flag, R::algo.text, cli_json, core::parsed_by(check_algo),         \
    R::algo.help)                                                                                  \
  X(std::string, balance, R::balance.flag, R::balance.text, cli_json,                              \
    core::parsed_by(check_balance), R::balance.help)                                               \
  X(std::string, checkpoint, "--checkpoint", "seq-selective", cli_json,                            \
    core::parsed_by(check_checkpoint), "none | full | selective++ | seq-selective")                \
  X(double, seq_selective_fraction, "--seq-selective-fraction", 0.5, cli_json, core::any(),        \
    "seq-selective: share of the sequence whose attention is recomputed, in (0, 1)")               \
  X(std::string, loss, "--loss", "fused", cli_json, core::parsed_by(check_loss),                   \
    "fused | unfused LM head + cross-entropy")                                                     \
  X(std::string, precision, R::precision.flag, R::precision.text, cli_json,                        \
    core::parsed_by(check_precision), R::precision.help)                                           \
  X(std::string, device, R::device.flag, R::device.text, cli_json, core::parsed_by(check_device), \
    R::device.help)                                                                                \
  X(bool, offload, "--offload", false, cli_json, core::any(),                                      \
    "--device cuda: park each block's saved input in pinned host memory until its backward")       \
  X(uint64_t, seed, "--seed", 1234, cli_json, core::any(), "initialisation seed")                  \
  X(std::string, data, "--data", "data/kjv-genesis-exodus.txt", cli_json, core::any(),             \
    "token file, or .txt tokenized byte-level")                                                    \
  X(std::string, out, "--out", "", cli, core::any(),                                               \
    "directory for metrics.json and checkpoint/ (empty: none)")                                    \
  X(std::string, resume, "--resume", "", cli, core::any(),                                         \
    "continue from DIR/checkpoint (a previous --out)")                                             \
  X(std::string, init_from, "--init-from", "", cli_json, core::any(),                              \
    "start from a Hugging Face LLaMA directory (config.json + safetensors): its model and weights") \
  X(int64_t, ffn_chunk, "--ffn-chunk", 1024, cli_json, core::at_least(0, " (0: all tokens)"),      \
    "tokens per blockwise-FFN chunk (0: all)")                                                     \
  X(int64_t, lm_tile, "--lm-tile", 0, cli_json, core::at_least(0, " (0: auto)"),                   \
    "token tile of the fused LM head (0: auto)")                                                   \
  N(optim.lr, "lr", "--lr", cli_json, core::any(), "peak learning rate")                           \
  N(optim.min_lr, "min_lr", "--min-lr", cli_json, core::any(), "final learning rate of the cosine")\
  N(optim.warmup, "warmup", "--warmup", cli_json, core::any(), "linear warm-up steps")             \
  N(optim.beta1, "beta1", "", json, core::any(), "AdamW beta1")                                    \
  N(optim.beta2, "beta2", "", json, core::any(), "AdamW beta2")                                    \
  N(optim.eps, "adam_eps", "", json, core::any(), "AdamW epsilon")                                 \
  N(optim.weight_decay, "weight_decay", "--weight-decay", cli_json, core::any(),                   \
    "AdamW decoupled weight decay")                                                                \
  N(optim.grad_clip, "grad_clip", "--grad-clip", cli_json, core::any(),                            \
    "global gradient-norm clip (<= 0: off)")                                                       \
  X(int64_t, save_every, "--save-every", 0, cli_json, core::any(),                                 \
    "checkpoint every K steps (0: at the end, < 0: never)")                                        \
  X(int, threads, R::threads.flag, R::threads.number, cli_json, R::threads.range,                  \
    R::threads.help)                                                                               \
  X(std::string, link, R::link.flag, R::link.text, cli_json, core::parsed_by(check_link),          \
    R::link.help)                                                                                  \
  N(model.layers, "layers", "--layers", cli_json, core::any(), "model layers")                     \
  N(model.hidden, "hidden", "--hidden", cli_json, core::any(), "hidden size")                      \
  N(model.heads, "heads", "--heads", cli_json, core::any(), "query heads")                         \
  N(model.kv_heads, "kv_heads", "--kv-heads", cli_json, core::any(), "key/value heads")            \
  N(model.head_dim, "head_dim", "--head-dim", cli_json, core::any(), "head dim")                   \
  N(model.intermediate, "intermediate", "--intermediate", cli_json, core::any(), "MLP size")       \
  N(model.vocab, "vocab", "--vocab", cli_json, core::any(),                                        \
    "vocabulary (>= the token file's, e.g. a BPE's)")                                              \
  N(model.rope_theta, "rope_theta", "--rope-theta", cli_json, core::open_interval(0, 1e300),       \
    "RoPE base theta")                                                                             \
  N(model.max_position_embeddings, "max_position_embeddings", "--max-position-embeddings",         \
    cli_json, core::at_least(0, " (0: unset)"),                                                    \
    "the model's context (HF max_position_embeddings; read by dynamic and yarn scaling)")          \
  X(std::string, rope_scaling, "--rope-scaling", "", cli_json, core::parsed_by(check_rope_scaling),\
    "HF rope_scaling JSON, e.g. '{\"rope_type\":\"yarn\",\"factor\":16}' (empty: the model's)")   \
  N(model.norm_eps, "norm_eps", "", json, core::any(), "RMSNorm epsilon")                          \
  N(model.tied_embeddings, "tied_embeddings", "", json, core::any(), "LM head shares the embedding")\
  X(std::string, mask, R::mask.flag, R::mask.text, cli_json, core::any(), R::mask.help)            \
  X(bool, doc_mask, "--doc-mask", false, cli_json, core::any(),                                    \
    "restrict attention to documents (end-of-text marks); = --mask causal,document")              \
  X(bool, quiet, "--quiet", false, cli, core::any(), "no per-step lines")
// clang-format on

namespace longseq::train {

namespace R = core::rows;  // the shared rows LONGSEQ_TRAIN_FIELDS names

#define LONGSEQ_TRAIN_MEMBER(type, name, flag, def, scope, check, help) type name = def;
#define LONGSEQ_TRAIN_NESTED(path, key, flag, scope, check, help)

/// The configuration's strings as typed values, parsed once (TrainConfig::parse()).
struct ParsedConfig {
  attention::Algorithm algo;
  attention::Balance balance{};
  model::CheckpointPolicy checkpoint{};
  bool fused_loss = true;
  core::DType precision = core::DType::f32;
  core::Device device;  ///< --device
  comm::LinkModel link;
  model::TrainMask mask;  ///< --mask (with --doc-mask's document and the model's sliding_window)
};

struct TrainConfig {
  std::string preset = "main";  ///< the preset's name or file (written to JSON, never read)
  model::LlamaConfig model;
  AdamWConfig optim;
  LONGSEQ_TRAIN_FIELDS(LONGSEQ_TRAIN_MEMBER, LONGSEQ_TRAIN_NESTED)
  /// Tests: keep the final full parameters, and the last step's gradient before clipping (units
  /// concatenated, unit sizes of config.hpp), in the summary.
  bool keep_params = false;
  /// Under mpirun, a failed rank ends the whole job (MPI_Abort) instead of leaving peers stuck in
  /// compute until the timeout; the CLI sets it, tests (local backend) leave it off.
  bool abort_on_failure = false;

  int cp() const { return dp > 0 ? world / dp : 0; }
  /// Checks every field (the table's checks, then the model, the optimizer and the relations
  /// between fields) and returns the typed values. Throws core::Error("[train] ...") naming the
  /// offending values (world not divisible by dp, heads vs ulysses, unknown algo/balance/policy/
  /// loss, seq too short, ...).
  ParsedConfig parse() const;
  void validate() const { (void)parse(); }
  /// `model` with the --rope-scaling text applied and the --mask window as its sliding_window
  /// (the model the run trains and saves: config.json names a windowed model Mistral).
  model::LlamaConfig model_config() const;
  /// The --mask text the run trains with: --mask, plus `document` for --doc-mask and
  /// `window:W` for a model whose sliding_window is W (e.g. --init-from a Mistral directory).
  std::string mask_text() const;
  /// Every JSON-scoped field by key, plus "preset" and the derived "cp".
  nlohmann::json to_json() const;
};

#undef LONGSEQ_TRAIN_MEMBER
#undef LONGSEQ_TRAIN_NESTED

/// The table of TrainConfig's fields, in --help order.
const std::vector<core::Field<TrainConfig>>& train_fields();

/// A preset: `name` is a shipped preset (data/presets/NAME.json) or a path ending in .json. A
/// file sets keys over the preset its "inherits" key names ("base" is the older spelling; absent:
/// "main"; "defaults": the table's defaults). Throws core::Error naming the file and the key for
/// an unknown key or a wrong type, and listing the shipped presets for an unknown name.
TrainConfig preset(const std::string& name);
/// Names of the shipped presets (data/presets/*.json), sorted.
std::vector<std::string> preset_names();
/// Applies JSON keys (the to_json() names) over `c`; unknown keys are refused by name. `where`
/// names the source in messages (a file).
void apply_json(TrainConfig& c, const nlohmann::json& j, const std::string& where = "config");

/// core::parse_precision under the component "train" (f32 or fp32 | bf16).
core::DType parse_precision(const std::string& s);

}  // namespace longseq::train
