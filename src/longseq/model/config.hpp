#pragma once
// The LLaMA model configuration and the named parameter tensors it implies.
//
// Legend: C hidden size, Hq query heads, Hkv key/value heads, D head dim, F MLP intermediate size,
// V vocabulary size, Ly layers.
// Parameter names and shapes are those of Hugging Face `LlamaForCausalLM` (row-major, nn.Linear
// weights stored [out, in]), so a safetensors checkpoint loads there unchanged:
//   model.embed_tokens.weight                      [V, C]
//   model.layers.{i}.input_layernorm.weight        [C]
//   model.layers.{i}.self_attn.q_proj.weight       [Hq*D, C]
//   model.layers.{i}.self_attn.k_proj.weight       [Hkv*D, C]
//   model.layers.{i}.self_attn.v_proj.weight       [Hkv*D, C]
//   model.layers.{i}.self_attn.o_proj.weight       [C, Hq*D]
//   model.layers.{i}.post_attention_layernorm.weight [C]
//   model.layers.{i}.mlp.gate_proj.weight          [F, C]
//   model.layers.{i}.mlp.up_proj.weight            [F, C]
//   model.layers.{i}.mlp.down_proj.weight          [C, F]
//   model.norm.weight                              [C]
//   lm_head.weight                                 [V, C]   (absent when tied_embeddings)
//
// Parameters are grouped into *units*, the granularity at which ZeRO-3 gathers and releases them
// (train/zero.hpp): unit 0 = embedding, units 1..Ly = layers, unit Ly+1 = final norm (+ lm_head
// when untied). Within a unit tensors are packed back to back in the order above, each starting
// at a multiple of kParamAlign floats so that views stay aligned.
#include <cstdint>
#include <string>
#include <vector>

#include "longseq/model/rope_scaling.hpp"

namespace longseq::model {

/// Bounds of LlamaConfig::validate: every size at most kMaxDim, the parameter count at most
/// kMaxParameters (far beyond any model; they keep products of sizes from overflowing int64).
inline constexpr int64_t kMaxDim = int64_t{1} << 20;
inline constexpr int64_t kMaxParameters = int64_t{1} << 40;

struct LlamaConfig {
  int64_t layers = 4;
  int64_t hidden = 256;
  int64_t heads = 4;
  int64_t kv_heads = 4;
  int64_t head_dim = 64;
  int64_t intermediate = 688;
  int64_t vocab = 256;
  double rope_theta = 10000.0;
  /// Hugging Face's max_position_embeddings: the context the model is meant for; read by dynamic
  /// and yarn RoPE scaling (which then need it > 0). 0 = not set: config.json omits the key.
  int64_t max_position_embeddings = 0;
  /// Hugging Face's rope_scaling (rope_scaling.hpp); none by default.
  RopeScaling rope_scaling;
  double norm_eps = 1e-5;
  bool tied_embeddings = true;
  /// > 0: the attention is a sliding window of this many tokens (a token sees itself and the
  /// W - 1 before it): Hugging Face's Mistral `sliding_window`, which the checkpoint writes
  /// (train/checkpoint.hpp). The trainer sets it from its --mask (model/attention_op.hpp
  /// TrainMask); the weights are the same either way.
  int64_t sliding_window = 0;

  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  /// Parameters of one transformer block: q, k, v, o, gate, up, down and the two norms.
  int64_t layer_parameters() const;
  /// Every parameter (no alignment gaps): the blocks, the embedding, the final norm and lm_head
  /// when untied; equals ParamLayout(*this).num_parameters() without building the layout (the
  /// planner counts 14B-parameter models this way).
  int64_t parameters() const;

  /// Throws core::Error("[model] ...") naming the values: non-positive sizes, heads not divisible
  /// by kv_heads, hidden != heads * head_dim, odd head_dim (RoPE pairs halves), theta <= 0,
  /// eps <= 0, sliding_window < 0, negative max_position_embeddings, rope_scaling values
  /// (RopeScaling::validate), a size above kMaxDim, a parameter count above kMaxParameters.
  void validate() const;
  /// The RoPE frequencies of a forward over a sequence of `seq_len` tokens (dynamic scaling
  /// depends on it; 0 = max_position_embeddings).
  RopeFrequencies rope(int64_t seq_len) const;
  /// "layers=4 hidden=256 heads=4 kv_heads=4 head_dim=64 intermediate=688 vocab=256 ..."
  std::string describe() const;
};

inline constexpr int64_t kParamAlign = 16;  // floats (64 bytes)

/// One named tensor inside a unit.
struct ParamTensor {
  std::string name;            ///< Hugging Face name
  std::vector<int64_t> shape;  ///< e.g. {V, C}
  int64_t offset = 0;          ///< floats from the start of its unit
  int64_t numel = 0;
};

/// What a unit holds; offsets of the tensors the model reads, by role.
struct ParamUnit {
  enum class Kind { embedding, layer, final_norm } kind = Kind::layer;
  int64_t layer = -1;  ///< for Kind::layer
  int64_t size = 0;    ///< floats, including alignment gaps
  std::vector<ParamTensor> tensors;
};

/// Offsets (in floats, within a layer unit) of a layer's tensors.
struct LayerOffsets {
  int64_t attn_norm, wq, wk, wv, wo, mlp_norm, wgate, wup, wdown;
};

/// Every unit of a model, in order. Pure function of the config.
class ParamLayout {
 public:
  explicit ParamLayout(const LlamaConfig& cfg);
  const LlamaConfig& config() const { return cfg_; }
  const std::vector<ParamUnit>& units() const { return units_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  int embedding_unit() const { return 0; }
  int layer_unit(int64_t l) const { return static_cast<int>(1 + l); }
  int final_unit() const { return static_cast<int>(cfg_.layers + 1); }
  /// Offsets shared by every layer unit.
  const LayerOffsets& layer_offsets() const { return layer_; }
  /// In the final unit: model.norm.weight, and lm_head.weight (-1 when tied).
  int64_t final_norm_offset() const { return final_norm_; }
  int64_t lm_head_offset() const { return lm_head_; }
  /// Sum of the parameter counts (without alignment gaps).
  int64_t num_parameters() const;
  /// Parameters that take part in matrix products per token (every weight matrix, lm_head
  /// included, the embedding lookup excluded): the N of the 6*N*T training FLOP estimate.
  int64_t matmul_parameters() const;

 private:
  LlamaConfig cfg_;
  std::vector<ParamUnit> units_;
  LayerOffsets layer_{};
  int64_t final_norm_ = 0, lm_head_ = -1;
};

/// Initialises one unit's values (the same on every rank and under every sharding): weights
/// normal(0, 0.02), down_proj and o_proj scaled by 1/sqrt(2 * layers) (GPT-2 residual scaling),
/// norm weights 1. Element e of unit u uses counter stream derive_seed(seed, u) at e.
void init_unit(const ParamLayout& layout, int unit, uint64_t seed, float* out);

}  // namespace longseq::model
