#include "longseq/model/config.hpp"

#include <cmath>
#include <utility>

#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"

namespace longseq::model {

void LlamaConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    core::require(v > 0, "model", name, " must be positive, got ", v);
  };
  positive(layers, "layers");
  positive(hidden, "hidden");
  positive(heads, "heads");
  positive(kv_heads, "kv_heads");
  positive(head_dim, "head_dim");
  positive(intermediate, "intermediate");
  positive(vocab, "vocab");
  // Bounds far beyond any model, so that the products of sizes below (parameter counts, buffer
  // sizes) cannot overflow: an absurd flag or config.json value is refused here, naming it, instead
  // of wrapping into a small or negative size (a crash) or an allocation that never ends.
  const std::pair<const char*, int64_t> dims[] = {
      {"layers", layers},     {"hidden", hidden},     {"heads", heads},
      {"kv_heads", kv_heads}, {"head_dim", head_dim}, {"intermediate", intermediate}};
  for (const auto& [name, v] : dims)
    core::require(v <= kMaxDim, "model", name, " ", v, " out of range [1, ", kMaxDim, "]");
  core::require(heads % kv_heads == 0, "model", "heads ", heads, " not divisible by kv_heads ",
                kv_heads);
  core::require(hidden == heads * head_dim, "model", "hidden ", hidden, " != heads ", heads,
                " * head_dim ", head_dim, " = ", heads * head_dim);
  const double params =
      static_cast<double>(layers) *
          (4.0 * static_cast<double>(hidden) * static_cast<double>(hidden) +
           3.0 * static_cast<double>(hidden) * static_cast<double>(intermediate)) +
      2.0 * static_cast<double>(vocab) * static_cast<double>(hidden);
  core::require(params <= static_cast<double>(kMaxParameters), "model", "about ", params,
                " parameters (layers ", layers, ", hidden ", hidden, ", intermediate ",
                intermediate, ", vocab ", vocab, "): more than ", kMaxParameters);
  core::require(head_dim % 2 == 0, "model", "head_dim ", head_dim,
                " must be even (RoPE rotates pairs of halves)");
  core::require(rope_theta > 0, "model", "rope_theta must be > 0, got ", rope_theta);
  core::require(norm_eps > 0, "model", "norm_eps must be > 0, got ", norm_eps);
  core::require(sliding_window >= 0, "model", "sliding_window must be >= 0 (0: none), got ",
                sliding_window);
  core::require(vocab <= (int64_t{1} << 31) - 1, "model", "vocab ", vocab, " exceeds int32");
  core::require(max_position_embeddings >= 0, "model", "max_position_embeddings must be >= 0, got ",
                max_position_embeddings);
  rope_scaling.validate(head_dim, max_position_embeddings);
}

RopeFrequencies LlamaConfig::rope(int64_t seq_len) const {
  return rope_frequencies(rope_scaling, rope_theta, head_dim, max_position_embeddings, seq_len);
}

std::string LlamaConfig::describe() const {
  return core::cat("layers=", layers, " hidden=", hidden, " heads=", heads, " kv_heads=", kv_heads,
                   " head_dim=", head_dim, " intermediate=", intermediate, " vocab=", vocab,
                   " rope_theta=", rope_theta, " norm_eps=", norm_eps,
                   " tied_embeddings=", tied_embeddings ? "true" : "false",
                   sliding_window > 0 ? " sliding_window=" + std::to_string(sliding_window) : "",
                   max_position_embeddings > 0
                       ? core::cat(" max_position_embeddings=", max_position_embeddings)
                       : "",
                   rope_scaling.enabled() ? " rope_scaling=" + rope_scaling.describe() : "");
}

namespace {
int64_t align_up(int64_t x) {
  return (x + kParamAlign - 1) / kParamAlign * kParamAlign;
}

int64_t add(ParamUnit& u, std::string name, std::vector<int64_t> shape) {
  ParamTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.numel = 1;
  for (int64_t d : t.shape) t.numel *= d;
  t.offset = u.size;
  u.size = align_up(u.size + t.numel);
  u.tensors.push_back(t);
  return t.offset;
}
}  // namespace

ParamLayout::ParamLayout(const LlamaConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  const int64_t c = cfg.hidden, v = cfg.vocab, f = cfg.intermediate;
  ParamUnit emb;
  emb.kind = ParamUnit::Kind::embedding;
  add(emb, "model.embed_tokens.weight", {v, c});
  units_.push_back(emb);
  for (int64_t l = 0; l < cfg.layers; ++l) {
    ParamUnit u;
    u.layer = l;
    const std::string p = core::cat("model.layers.", l, ".");
    LayerOffsets o{};
    o.attn_norm = add(u, p + "input_layernorm.weight", {c});
    o.wq = add(u, p + "self_attn.q_proj.weight", {cfg.q_dim(), c});
    o.wk = add(u, p + "self_attn.k_proj.weight", {cfg.kv_dim(), c});
    o.wv = add(u, p + "self_attn.v_proj.weight", {cfg.kv_dim(), c});
    o.wo = add(u, p + "self_attn.o_proj.weight", {c, cfg.q_dim()});
    o.mlp_norm = add(u, p + "post_attention_layernorm.weight", {c});
    o.wgate = add(u, p + "mlp.gate_proj.weight", {f, c});
    o.wup = add(u, p + "mlp.up_proj.weight", {f, c});
    o.wdown = add(u, p + "mlp.down_proj.weight", {c, f});
    layer_ = o;
    units_.push_back(u);
  }
  ParamUnit fin;
  fin.kind = ParamUnit::Kind::final_norm;
  final_norm_ = add(fin, "model.norm.weight", {c});
  if (!cfg.tied_embeddings) lm_head_ = add(fin, "lm_head.weight", {v, c});
  units_.push_back(fin);
}

int64_t LlamaConfig::layer_parameters() const {
  return 2 * hidden + hidden * q_dim() + 2 * hidden * kv_dim() + q_dim() * hidden +
         3 * hidden * intermediate;
}

int64_t LlamaConfig::parameters() const {
  return layers * layer_parameters() + (tied_embeddings ? 1 : 2) * vocab * hidden + hidden;
}

int64_t ParamLayout::num_parameters() const {
  int64_t n = 0;
  for (const auto& u : units_)
    for (const auto& t : u.tensors) n += t.numel;
  return n;
}

int64_t ParamLayout::matmul_parameters() const {
  int64_t n = 0;
  for (const auto& u : units_)
    for (const auto& t : u.tensors)
      if (t.shape.size() == 2 && u.kind != ParamUnit::Kind::embedding) n += t.numel;
  // The LM head multiplies by the (tied) embedding matrix.
  if (cfg_.tied_embeddings) n += cfg_.vocab * cfg_.hidden;
  return n;
}

void init_unit(const ParamLayout& layout, int unit, uint64_t seed, float* out) {
  const ParamUnit& u = layout.units().at(static_cast<size_t>(unit));
  const uint64_t s = core::derive_seed(seed, static_cast<uint64_t>(unit));
  const double resid = 0.02 / std::sqrt(2.0 * static_cast<double>(layout.config().layers));
  for (int64_t i = 0; i < u.size; ++i) out[i] = 0.0f;
  for (const ParamTensor& t : u.tensors) {
    float* p = out + t.offset;
    if (t.shape.size() == 1) {
      for (int64_t i = 0; i < t.numel; ++i) p[i] = 1.0f;
      continue;
    }
    const bool residual =
        t.name.find("o_proj") != std::string::npos || t.name.find("down_proj") != std::string::npos;
    core::fill_normal(p, static_cast<size_t>(t.numel), s, static_cast<uint64_t>(t.offset), 0.0,
                      residual ? resid : 0.02);
  }
}

}  // namespace longseq::model
