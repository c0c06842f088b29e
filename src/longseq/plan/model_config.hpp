#pragma once
// The transformer shapes the planner costs (LLaMA family: RMSNorm, GQA attention, SwiGLU MLP,
// untied LM head). Presets llama-7b and llama-14b are the two models of BurstEngine §4.1.
#include <cstdint>
#include <string>
#include <string_view>

namespace longseq::plan {

struct ModelConfig {
  std::string name;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;     ///< query heads Hq
  int64_t kv_heads = 0;  ///< Hkv (divides heads)
  int64_t head_dim = 0;  ///< D
  int64_t intermediate = 0;
  int64_t vocab = 0;

  /// Parameters of one transformer block: Wq, Wk, Wv, Wo, W_gate, W_up, W_down, two RMSNorms.
  int64_t params_per_layer() const;
  /// Embedding + LM head (untied) + final norm.
  int64_t params_outside_layers() const;
  int64_t params() const { return layers * params_per_layer() + params_outside_layers(); }
  /// Throws core::Error naming the field when a value is not positive or heads do not divide.
  void validate() const;
};

/// "llama-7b" | "llama-14b" | a path to a JSON file with layers, hidden, heads, kv_heads,
/// head_dim, intermediate, vocab (kv_heads defaults to heads, head_dim to hidden / heads).
/// Throws core::Error naming the flag value.
ModelConfig load_model(std::string_view name_or_file);

/// "1M" = 1048576, "32K" = 32768, "65536" = 65536 (K, M, G are powers of 1024; case-insensitive).
/// Throws core::Error naming `flag` and the text when it is not a positive count.
int64_t parse_count(std::string_view text, std::string_view flag);

}  // namespace longseq::plan
