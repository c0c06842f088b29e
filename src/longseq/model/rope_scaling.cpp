// RoPE scaling: Hugging Face's rope_scaling dict and the frequencies it implies (fp64).
#include "longseq/model/rope_scaling.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>

#include "longseq/core/error.hpp"

namespace longseq::model {

std::string_view rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::none:
      return "default";
    case RopeType::linear:
      return "linear";
    case RopeType::dynamic:
      return "dynamic";
    case RopeType::yarn:
      return "yarn";
    case RopeType::llama3:
      return "llama3";
  }
  return "?";
}

namespace {

double number(const nlohmann::json& j, const char* key) {
  core::require(j[key].is_number(), "model", "rope_scaling ", key, " must be a number, got ",
                j[key].dump());
  return j[key].get<double>();
}

std::optional<double> opt_number(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return number(j, key);
}

}  // namespace

RopeScaling RopeScaling::from_json(const nlohmann::json& j) {
  RopeScaling s;
  if (j.is_null()) return s;
  core::require(j.is_object(), "model", "rope_scaling must be an object or null, got ", j.dump());
  std::string type;
  for (const char* k : {"rope_type", "type"})
    if (j.contains(k) && !j[k].is_null()) {
      core::require(j[k].is_string(), "model", "rope_scaling ", k, " must be a string, got ",
                    j[k].dump());
      // transformers reads rope_type first and falls back on the legacy type.
      if (type.empty()) {
        type = j[k].get<std::string>();
        s.type_key = k;
      }
    }
  core::require(!type.empty(), "model", "rope_scaling ", j.dump(),
                " has neither rope_type nor type");
  if (type == "default")
    s.type = RopeType::none;
  else if (type == "linear")
    s.type = RopeType::linear;
  else if (type == "dynamic")
    s.type = RopeType::dynamic;
  else if (type == "yarn")
    s.type = RopeType::yarn;
  else if (type == "llama3")
    s.type = RopeType::llama3;
  else
    core::fail("model", "rope_scaling type '", type,
               "' is not supported (default | linear | dynamic | yarn | llama3)");
  for (const char* k : {"mscale", "mscale_all_dim", "truncate", "long_factor", "short_factor"})
    core::require(!j.contains(k) || j[k].is_null(), "model", "rope_scaling key ", k, " (",
                  j.contains(k) ? j[k].dump() : "", ") is not supported for ", type);
  if (s.type == RopeType::none) return s;
  core::require(j.contains("factor") && !j["factor"].is_null(), "model", "rope_scaling ", type,
                " needs a factor");
  s.factor = number(j, "factor");
  if (j.contains("original_max_position_embeddings") &&
      !j["original_max_position_embeddings"].is_null()) {
    const auto& o = j["original_max_position_embeddings"];
    core::require(o.is_number() && o.get<double>() == std::floor(o.get<double>()), "model",
                  "rope_scaling original_max_position_embeddings must be an integer, got ",
                  o.dump());
    s.original_max_position_embeddings = o.get<int64_t>();
  }
  s.low_freq_factor = opt_number(j, "low_freq_factor");
  s.high_freq_factor = opt_number(j, "high_freq_factor");
  s.beta_fast = opt_number(j, "beta_fast");
  s.beta_slow = opt_number(j, "beta_slow");
  s.attention_factor = opt_number(j, "attention_factor");
  s.validate(0, 0);  // the values alone; validate(head_dim, M) again against the model
  return s;
}

void RopeScaling::validate(int64_t head_dim, int64_t max_position_embeddings) const {
  if (type == RopeType::none) return;
  const std::string_view t = rope_type_name(type);
  core::require(std::isfinite(factor) && factor >= 1.0, "model", "rope_scaling ", t,
                " factor must be a number >= 1, got ", factor);
  // head_dim 0: the values alone (from_json), before the model is known.
  const bool model_known = head_dim > 0;
  if (model_known && type == RopeType::dynamic)
    core::require(head_dim > 2, "model", "rope_scaling dynamic needs head_dim > 2 (the base is ",
                  "raised to D / (D - 2)), got ", head_dim);
  if (original_max_position_embeddings)
    core::require(*original_max_position_embeddings > 0, "model", "rope_scaling ", t,
                  " original_max_position_embeddings must be positive, got ",
                  *original_max_position_embeddings);
  if (type == RopeType::llama3) {
    core::require(original_max_position_embeddings.has_value(), "model",
                  "rope_scaling llama3 needs original_max_position_embeddings");
    core::require(low_freq_factor && high_freq_factor, "model",
                  "rope_scaling llama3 needs low_freq_factor and high_freq_factor");
    core::require(*low_freq_factor > 0 && *high_freq_factor > *low_freq_factor, "model",
                  "rope_scaling llama3 needs 0 < low_freq_factor < high_freq_factor, got low ",
                  *low_freq_factor, " high ", *high_freq_factor);
  }
  if (type == RopeType::yarn) {
    if (attention_factor)
      core::require(*attention_factor > 0, "model",
                    "rope_scaling yarn attention_factor must be > 0, got ", *attention_factor);
    for (const auto& [name, v] :
         {std::pair{"beta_fast", beta_fast}, std::pair{"beta_slow", beta_slow}})
      if (v) core::require(*v > 0, "model", "rope_scaling yarn ", name, " must be > 0, got ", *v);
  }
  const bool needs_m =
      type == RopeType::dynamic || (type == RopeType::yarn && !original_max_position_embeddings);
  if (model_known && needs_m)
    core::require(max_position_embeddings > 0, "model", "rope_scaling ", t,
                  " needs max_position_embeddings > 0 (got ", max_position_embeddings, ")");
}

nlohmann::json RopeScaling::to_json() const {
  if (type == RopeType::none) return nullptr;
  nlohmann::json j;
  j[type_key] = std::string(rope_type_name(type));
  j["factor"] = factor;
  if (original_max_position_embeddings)
    j["original_max_position_embeddings"] = *original_max_position_embeddings;
  if (low_freq_factor) j["low_freq_factor"] = *low_freq_factor;
  if (high_freq_factor) j["high_freq_factor"] = *high_freq_factor;
  if (beta_fast) j["beta_fast"] = *beta_fast;
  if (beta_slow) j["beta_slow"] = *beta_slow;
  if (attention_factor) j["attention_factor"] = *attention_factor;
  return j;
}

std::string RopeScaling::describe() const {
  if (type == RopeType::none) return "none";
  std::string s = core::cat(rope_type_name(type), "(factor=", factor);
  if (original_max_position_embeddings)
    s += core::cat(", original_max_position_embeddings=", *original_max_position_embeddings);
  if (low_freq_factor) s += core::cat(", low_freq_factor=", *low_freq_factor);
  if (high_freq_factor) s += core::cat(", high_freq_factor=", *high_freq_factor);
  if (beta_fast) s += core::cat(", beta_fast=", *beta_fast);
  if (beta_slow) s += core::cat(", beta_slow=", *beta_slow);
  if (attention_factor) s += core::cat(", attention_factor=", *attention_factor);
  return s + ")";
}

RopeFrequencies rope_frequencies(const RopeScaling& s, double theta, int64_t head_dim,
                                 int64_t max_position_embeddings, int64_t seq_len) {
  core::require(head_dim > 0 && head_dim % 2 == 0, "model", "rope head_dim ", head_dim,
                " must be even and positive");
  core::require(theta > 0, "model", "rope_theta must be > 0, got ", theta);
  s.validate(head_dim, max_position_embeddings);
  const int64_t half = head_dim / 2;
  const double dim = static_cast<double>(head_dim);
  auto plain = [&](double base) {
    std::vector<double> inv(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) inv[i] = std::pow(base, -2.0 * static_cast<double>(i) / dim);
    return inv;
  };
  RopeFrequencies f;
  switch (s.type) {
    case RopeType::none:
      f.inv_freq = plain(theta);
      break;
    case RopeType::linear:
      f.inv_freq = plain(theta);
      for (double& v : f.inv_freq) v /= s.factor;
      break;
    case RopeType::dynamic: {
      const double m = static_cast<double>(max_position_embeddings);
      const double n = std::max(static_cast<double>(seq_len), m);
      const double base = theta * std::pow(s.factor * n / m - (s.factor - 1.0), dim / (dim - 2.0));
      f.inv_freq = plain(base);
      break;
    }
    case RopeType::yarn: {
      const double l =
          static_cast<double>(s.original_max_position_embeddings.value_or(max_position_embeddings));
      const double fast = s.beta_fast.value_or(32.0), slow = s.beta_slow.value_or(1.0);
      auto corr = [&](double rotations) {
        return dim * std::log(l / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
      };
      const double low = std::max(std::floor(corr(fast)), 0.0);
      double high = std::min(std::ceil(corr(slow)), dim - 1.0);
      if (low == high) high += 0.001;  // as transformers: no division by zero
      f.inv_freq = plain(theta);
      for (int64_t i = 0; i < half; ++i) {
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        // ramp 0: extrapolate (keep the frequency), ramp 1: interpolate (divide by factor).
        f.inv_freq[i] *= ramp / s.factor + (1.0 - ramp);
      }
      f.attention_factor =
          s.attention_factor.value_or(s.factor <= 1.0 ? 1.0 : 0.1 * std::log(s.factor) + 1.0);
      break;
    }
    case RopeType::llama3: {
      const double l = static_cast<double>(*s.original_max_position_embeddings);
      const double lo = *s.low_freq_factor, hi = *s.high_freq_factor;
      f.inv_freq = plain(theta);
      for (double& v : f.inv_freq) {
        const double wavelen = 2.0 * std::numbers::pi / v;
        if (wavelen < l / hi) continue;
        if (wavelen > l / lo) {
          v /= s.factor;
          continue;
        }
        const double smooth = (l / wavelen - lo) / (hi - lo);
        v = (1.0 - smooth) * v / s.factor + smooth * v;
      }
      break;
    }
  }
  return f;
}

kernels::cpu::RopeTable rope_table(const int64_t* pos, int64_t t, const RopeFrequencies& f) {
  return kernels::cpu::RopeTable(pos, t, f.inv_freq, f.attention_factor);
}

}  // namespace longseq::model
