#pragma once
// RoPE scaling as Hugging Face transformers' LLaMA defines it (modeling_rope_utils.py): the
// `rope_scaling` dict of config.json, and the inverse frequencies and attention factor it implies.
//
// Legend: D head dim (even), i in [0, D/2) a frequency index, theta = rope_theta,
// M = max_position_embeddings, N = the sequence length of the forward (max position + 1).
// Default RoPE: inv_freq[i] = theta^(-2i/D), attention factor 1.
//
//   linear   inv_freq[i] /= factor                                       (position interpolation)
//   dynamic  theta' = theta * (factor * n / M - (factor - 1))^(D / (D - 2)), n = max(N, M);
//            inv_freq[i] = theta'^(-2i/D)                                 (dynamic NTK; equals the
//            default RoPE while N <= M)
//   yarn     L = original_max_position_embeddings if given, else M; beta_fast 32, beta_slow 1 by
//            default; corr(r) = D ln(L / (2 pi r)) / (2 ln theta);
//            low = max(floor(corr(beta_fast)), 0), high = min(ceil(corr(beta_slow)), D - 1)
//            (high += 0.001 when equal); ramp[i] = clamp((i - low) / (high - low), 0, 1);
//            inv_freq[i] = inv_freq_default[i] * (ramp[i] / factor + (1 - ramp[i]));
//            attention factor = attention_factor if given, else 0.1 ln(factor) + 1 (1 when
//            factor <= 1); cos and sin are multiplied by it (so the logits by its square).
//   llama3   L = original_max_position_embeddings (required), low_freq_factor, high_freq_factor
//            (required, high > low); wavelen = 2 pi / inv_freq;
//            wavelen < L / high: unchanged; wavelen > L / low: inv_freq / factor;
//            otherwise s = (L / wavelen - low) / (high - low),
//            inv_freq = (1 - s) inv_freq / factor + s inv_freq.
//
// Keys: `rope_type` or the legacy `type` (both read; written back under the name read), `factor`,
// `original_max_position_embeddings`, `low_freq_factor`, `high_freq_factor`, `beta_fast`,
// `beta_slow`, `attention_factor`. "default" (or a null rope_scaling) is plain RoPE.
//
// Where Hugging Face versions differ we follow the published formulas: yarn uses `factor` as
// given (transformers >= 4.51 replaces it by M / original_max_position_embeddings when the latter
// is present; a config where the two agree, the normal case, gives the same frequencies in every
// version). Keys that would change the frequencies and that this file does not implement
// (`mscale`, `mscale_all_dim`, `truncate`, `long_factor`, `short_factor`) are refused by name
// rather than ignored.
//
// Dynamic NTK depends on the sequence: in training and evaluation N is the whole sequence's
// length (every rank uses the same N, whatever its shard); in generation each forward uses
// max position + 1 of its tokens and cached keys keep the frequencies they were rotated with,
// as transformers' dynamic_rope_update does.
//
// Errors: core::Error("[model] rope_scaling ...") naming the key and value.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "longseq/kernels/cpu/rope.hpp"

namespace longseq::model {

enum class RopeType { none, linear, dynamic, yarn, llama3 };

/// "default" | "linear" | "dynamic" | "yarn" | "llama3" (none is "default").
std::string_view rope_type_name(RopeType t);

struct RopeScaling {
  RopeType type = RopeType::none;
  double factor = 1.0;
  std::optional<int64_t> original_max_position_embeddings;
  std::optional<double> low_freq_factor, high_freq_factor;  ///< llama3
  std::optional<double> beta_fast, beta_slow;               ///< yarn (defaults 32, 1)
  std::optional<double> attention_factor;                   ///< yarn
  /// The key the type was read under ("rope_type" or "type"); written back under it.
  std::string type_key = "rope_type";

  bool enabled() const { return type != RopeType::none; }
  /// From config.json's `rope_scaling` value (null, or an object). Throws core::Error naming the
  /// key: unknown type, missing or non-positive factor, factor < 1, missing llama3 keys,
  /// high_freq_factor <= low_freq_factor, unsupported keys.
  static RopeScaling from_json(const nlohmann::json& j);
  /// The `rope_scaling` value for config.json: null when disabled.
  nlohmann::json to_json() const;
  /// Checks the values against the model: head dim, max_position_embeddings (dynamic and yarn
  /// without original_max_position_embeddings need it > 0). Throws core::Error.
  void validate(int64_t head_dim, int64_t max_position_embeddings) const;
  /// e.g. "yarn(factor=16, original_max_position_embeddings=2048)" or "none".
  std::string describe() const;
};

/// The frequencies of one forward.
struct RopeFrequencies {
  std::vector<double> inv_freq;   ///< [D/2], fp64
  double attention_factor = 1.0;  ///< multiplies cos and sin
};

/// inv_freq and attention factor for a forward whose longest sequence has `seq_len` tokens (used
/// by dynamic only; 0 = M). Computed in fp64 (transformers computes them in fp32).
RopeFrequencies rope_frequencies(const RopeScaling& s, double theta, int64_t head_dim,
                                 int64_t max_position_embeddings, int64_t seq_len);

/// The cos/sin table of these frequencies for one rank's tokens (pos [T], global positions;
/// negative = padding): the fast kernel kernels/cpu/rope.hpp applies it to q and k.
kernels::cpu::RopeTable rope_table(const int64_t* pos, int64_t t, const RopeFrequencies& f);

}  // namespace longseq::model
