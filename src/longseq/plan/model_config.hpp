#pragma once
// The model the planner costs is the trainer's own configuration (model::LlamaConfig: one set of
// shapes, one validation, one parameter count), under the name the reports print. Presets
// llama-7b and llama-14b are the two models of BurstEngine §4.1, with untied LM heads as LLaMA-2.
#include <cstdint>
#include <string>
#include <string_view>

#include "longseq/model/config.hpp"

namespace longseq::plan {

/// A model under a name: `config` is what `longseq train` would build for it.
struct NamedModel {
  std::string name;
  model::LlamaConfig config;
};

/// "llama-7b" | "llama-14b" | a path to a JSON file with layers, hidden, heads, kv_heads,
/// head_dim, intermediate, vocab and optionally name and tied_embeddings (kv_heads defaults to
/// heads, head_dim to hidden / heads, tied_embeddings to false). Throws core::Error naming the
/// flag value for an unknown preset, an unreadable file or a missing field, and model::LlamaConfig
/// ::validate's error ("[model] ...") for shapes the trainer would refuse.
NamedModel load_model(std::string_view name_or_file);

/// "1M" = 1048576, "32K" = 32768, "65536" = 65536 (K, M, G are powers of 1024; case-insensitive).
/// Throws core::Error naming `flag` and the text when it is not a positive count.
int64_t parse_count(std::string_view text, std::string_view flag);

}  // namespace longseq::plan
