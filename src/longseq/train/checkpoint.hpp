#pragma once
// Checkpoints: DIR/checkpoint/ holds
//   model.safetensors      parameters under Hugging Face LLaMA names (loads in transformers)
//   optimizer.safetensors  AdamW moments "exp_avg.<name>", "exp_avg_sq.<name>"
//   config.json            the Hugging Face LlamaConfig of the model
//   trainer_state.json     step (next to run), seed, data position, RNG note, train config, and
//                          log_history: the metrics records of every step before `step`, so
//                          that a resumed run's metrics.json holds the whole run (each step once)
//   checksums.json         CRC-32C of config.json and trainer_state.json (the tensors' own are in
//                          the safetensors __metadata__, core/safetensors.hpp)
// The set is written into DIR/checkpoint.tmp/ (each file fsync'ed), then the old checkpoint is
// renamed to checkpoint.old, the new one into place, and the old one removed: a crash leaves a
// complete checkpoint in checkpoint/ or checkpoint.old/ (resume looks in that order).
// Resuming restores parameters and moments exactly (fp32 bytes) and the step, so the continued
// run is bit-identical to an uninterrupted one (tests/train/trainer_test.cpp).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/train/zero.hpp"

namespace longseq::train {

/// Collective over the state's group; rank `writer` writes. `trainer_state` is stored as is
/// (the caller fills step, seed, data position).
void save_checkpoint(const std::string& dir, ShardedState& state,
                     const nlohmann::json& trainer_state, bool writer);

/// Reads DIR/checkpoint (or checkpoint.old) into the state (every rank reads the files) and
/// returns trainer_state.json, validated (validate_trainer_state). Throws core::Error("[train]
/// ...") naming the file and the mismatch (missing tensor, other shape, other model config, a
/// checksum that fails: tensors are checked by read_safetensors, config.json and trainer_state.json
/// against checksums.json).
nlohmann::json load_checkpoint(const std::string& dir, ShardedState& state);

/// Checks the JSON files of the checkpoint directory `ck` against its checksums.json (absent: an
/// older checkpoint, nothing to check). Throws core::Error("[train] ...") naming the file: a
/// malformed checksums.json, an unknown file name in it, a checksum that fails.
void verify_checkpoint_checksums(const std::string& ck);

/// The largest step a trainer_state.json may hold (2^40: far beyond any run, small enough that
/// step * dp and the schedule's arithmetic cannot overflow).
inline constexpr int64_t kMaxStep = int64_t{1} << 40;
/// The largest size (hidden, heads, layers, ...) a config.json may declare.
inline constexpr int64_t kMaxConfigDim = int64_t{1} << 20;

/// Checks the fields of trainer_state.json the trainer uses before it uses them: an object, "step"
/// an integer in [0, kMaxStep], "seed" a non-negative integer. Returns the step; throws
/// core::Error("[train] <path>: <field> <value> ...") otherwise.
int64_t validate_trainer_state(const nlohmann::json& ts, const std::string& path);

/// The Hugging Face config.json of a model config: LlamaForCausalLM, or MistralForCausalLM with
/// `sliding_window` when the model has one (the architecture of transformers that applies it).
nlohmann::json hf_config(const model::LlamaConfig& c);

// ---- Hugging Face LLaMA weights (--init-from DIR) ----------------------------------------------
// DIR is a Hugging Face model directory: config.json (LlamaConfig) and either model.safetensors
// or model.safetensors.index.json naming the shards. Weights may be F32 or BF16 (converted to the
// fp32 master weights exactly); a checkpoint of this trainer (DIR/checkpoint) is such a directory.

/// The model config of DIR/config.json. Refused, naming the file and the value: another
/// model_type than "llama" or "mistral" (whose sliding_window is read), hidden_act other than
/// "silu", attention or MLP biases, a rope_scaling that model/rope_scaling.hpp refuses, a missing
/// size. head_dim defaults to hidden_size / num_attention_heads, num_key_value_heads to
/// num_attention_heads, as in HF; rope_theta, rope_scaling and max_position_embeddings (absent:
/// 0, unset) are read as HF names them.
model::LlamaConfig read_hf_config(const std::string& dir);
/// The checks of read_hf_config on an already parsed config.json (`path` names it in messages):
/// also sizes in [1, kMaxConfigDim], finite positive rope_theta and rms_norm_eps. May throw
/// nlohmann::json exceptions for wrongly typed optional fields (read_hf_config names the file).
model::LlamaConfig hf_config_fields(const nlohmann::json& j, const std::string& path);

/// The shard files a model.safetensors.index.json names (`path` names it in messages), each once,
/// in the order of first mention; refused, naming the entry: no weight_map object, a value that is
/// not a plain file name (empty, containing '/', "." or ".."), an empty map.
std::vector<std::string> hf_index_files(const nlohmann::json& index, const std::string& path);

/// Loads DIR's weights into the parameter shards (every rank reads the files; moments untouched).
/// Every tensor of the layout must be present with its shape (lm_head.weight is not needed when
/// the embeddings are tied); tensors the model does not have are refused by name, except the
/// rotary inv_freq buffers older checkpoints carry. Throws core::Error naming file and tensor.
void load_hf_weights(const std::string& dir, ShardedState& state);

}  // namespace longseq::train
