#pragma once
// The oracle of the device-generic forward (model::forward_hidden, transformer.hpp) on the CPU:
// the host-only forward and per-token losses that model/inference.cpp ran before issue 27 ("GPU
// III": eval on a device), kept here verbatim in substance (and, below them, the host-only decode
// step and logits that generate ran before its --device): its own layer loop straight over
// kernels/cpu, one set of buffers reused across layers, the attention output projected into the
// residual stream in place. The generic forward runs the training forward's block code through
// model::Kernels instead (a copy of the residual, then the projection into the copy); on the CPU
// every product, norm and activation is the same kernel call on the same values, so the two must
// agree bit for bit (tests/model/inference_test.cpp, tests/train/eval_device_test.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "longseq/comm/group.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/kernels/cpu/decode_attention.hpp"
#include "longseq/kernels/cpu/linear.hpp"
#include "longseq/kernels/cpu/rmsnorm.hpp"
#include "longseq/kernels/cpu/rope.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/config.hpp"
#include "longseq/model/inference.hpp"
#include "longseq/model/layers.hpp"
#include "longseq/model/lm_head.hpp"
#include "longseq/model/rope_scaling.hpp"

namespace longseq::test {

/// The final-norm hidden states [L, C]; with `cache`, every layer's K (after RoPE) and V of the
/// non-padding tokens appended.
inline std::vector<float> host_forward_hidden(const model::ParamLayout& layout,
                                              model::ParamSource& params, model::AttentionOp& attn,
                                              const model::StepBatch& b,
                                              const model::InferenceOptions& opt,
                                              model::KvCache* cache = nullptr) {
  using core::Shape;
  using core::Tensor;
  namespace kc = kernels::cpu;
  const model::LlamaConfig& cfg = layout.config();
  const int64_t l = b.len, c = cfg.hidden, hq = cfg.heads, hkv = cfg.kv_heads, d = cfg.head_dim;
  const int threads = std::max(opt.threads, 1);
  int64_t seq_len = b.seq_len;
  if (seq_len == 0)
    for (int64_t i = 0; i < l; ++i) seq_len = std::max(seq_len, b.pos[i] + 1);
  const kc::RopeTable rope = model::rope_table(b.pos, l, cfg.rope(seq_len));
  const float eps = static_cast<float>(cfg.norm_eps);
  const model::LayerOffsets& o = layout.layer_offsets();
  const model::MlpDims md{l, c, cfg.intermediate, opt.ffn_chunk, opt.precision};
  std::vector<float> ws(static_cast<size_t>(model::mlp_workspace_floats(md)));

  std::vector<float> x(static_cast<size_t>(l * c));
  const int emb = layout.embedding_unit();
  model::embedding_forward(b.tokens, b.pos, params.acquire(emb), l, c, cfg.vocab, x.data());
  params.release(emb);
  if (cache) {
    if (cache->layers != cfg.layers) cache->reset(cfg.layers, hkv, d);
    for (int64_t i = 0; i < l; ++i)
      if (b.pos[i] >= 0) cache->pos.push_back(b.pos[i]);
  }
  Tensor<float> n(Shape{l, c}), q(Shape{l, hq, d}), k(Shape{l, hkv, d}), v(Shape{l, hkv, d});
  std::vector<float> rstd(static_cast<size_t>(l));
  for (int64_t layer = 0; layer < cfg.layers; ++layer) {
    const int u = layout.layer_unit(layer);
    const float* w = params.acquire(u);
    kc::rmsnorm_forward(x.data(), w + o.attn_norm, l, c, eps, n.data(), rstd.data(), threads);
    kc::linear_forward(n.data(), w + o.wq, l, c, hq * d, q.data(), false, threads, opt.precision);
    kc::linear_forward(n.data(), w + o.wk, l, c, hkv * d, k.data(), false, threads, opt.precision);
    kc::linear_forward(n.data(), w + o.wv, l, c, hkv * d, v.data(), false, threads, opt.precision);
    rope.forward(q.data(), hq, threads);
    rope.forward(k.data(), hkv, threads);
    if (cache) {
      auto& ck = cache->k[layer];
      auto& cv = cache->v[layer];
      const int64_t row = hkv * d;
      for (int64_t i = 0; i < l; ++i) {
        if (b.pos[i] < 0) continue;
        ck.insert(ck.end(), k.data() + i * row, k.data() + (i + 1) * row);
        cv.insert(cv.end(), v.data() + i * row, v.data() + (i + 1) * row);
      }
    }
    const attention::AttentionSaved att = attn.forward(q.view(), k.view(), v.view());
    kc::linear_forward(att.o.data(), w + o.wo, l, hq * d, c, x.data(), true, threads,
                       opt.precision);
    kc::rmsnorm_forward(x.data(), w + o.mlp_norm, l, c, eps, n.data(), rstd.data(), threads);
    model::mlp_forward(n.data(), w + o.wgate, w + o.wup, w + o.wdown, md, x.data(), true, ws.data(),
                       threads);
    params.release(u);
  }
  const int fin = layout.final_unit();
  std::vector<float> h(static_cast<size_t>(l * c));
  kc::rmsnorm_forward(x.data(), params.acquire(fin) + layout.final_norm_offset(), l, c, eps,
                      h.data(), rstd.data(), threads);
  params.release(fin);
  return h;
}

/// loss[t] = logsumexp(h_t W^T) - (h_t W^T)[labels[t]] in fp64; NaN where ignored.
inline std::vector<double> host_token_losses(const model::ParamLayout& layout,
                                             model::ParamSource& params, const float* hidden,
                                             const int32_t* labels, int64_t l,
                                             const model::InferenceOptions& opt) {
  const model::LlamaConfig& cfg = layout.config();
  const int64_t c = cfg.hidden, vocab = cfg.vocab;
  const int unit = cfg.tied_embeddings ? layout.embedding_unit() : layout.final_unit();
  const float* w = params.acquire(unit) + (cfg.tied_embeddings ? 0 : layout.lm_head_offset());
  const int64_t tile =
      std::clamp<int64_t>((int64_t{1} << 22) / std::max<int64_t>(vocab, 1), 1, 256);
  std::vector<float> logits(static_cast<size_t>(tile * vocab));
  std::vector<double> loss(static_cast<size_t>(l), std::numeric_limits<double>::quiet_NaN());
  for (int64_t r0 = 0; r0 < l; r0 += tile) {
    const int64_t rows = std::min(tile, l - r0);
    kernels::cpu::linear_forward(hidden + r0 * c, w, rows, c, vocab, logits.data(), false,
                                 std::max(opt.threads, 1), opt.precision);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t y = labels[r0 + r];
      if (y == model::kIgnoreIndex) continue;
      const float* z = logits.data() + r * vocab;
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < vocab; ++j) m = std::max(m, static_cast<double>(z[j]));
      for (int64_t j = 0; j < vocab; ++j) s += std::exp(static_cast<double>(z[j]) - m);
      loss[r0 + r] = m + std::log(s) - static_cast<double>(z[y]);
    }
  }
  params.release(unit);
  return loss;
}

/// The logits [V] of one final-norm hidden row, as logits_of computed them before issue 27.
inline std::vector<float> host_logits(const model::ParamLayout& layout, model::ParamSource& params,
                                      const float* hidden, const model::InferenceOptions& opt) {
  const model::LlamaConfig& cfg = layout.config();
  const int unit = cfg.tied_embeddings ? layout.embedding_unit() : layout.final_unit();
  const float* w = params.acquire(unit) + (cfg.tied_embeddings ? 0 : layout.lm_head_offset());
  std::vector<float> z(static_cast<size_t>(cfg.vocab));
  kernels::cpu::linear_forward(hidden, w, 1, cfg.hidden, cfg.vocab, z.data(), false,
                               std::max(opt.threads, 1), opt.precision);
  params.release(unit);
  return z;
}

/// One decode step as model::decode_step ran it before issue 27 (host-only, its own layer loop
/// over kernels/cpu): the new token's final-norm hidden state [C], its K, V appended to `cache`
/// where `keep`. Collective over `group`.
inline std::vector<float> host_decode_step(const model::ParamLayout& layout,
                                           model::ParamSource& params, comm::Group& group,
                                           model::KvCache& cache, int32_t token, int64_t pos,
                                           bool keep, const model::InferenceOptions& opt) {
  namespace kc = kernels::cpu;
  const model::LlamaConfig& cfg = layout.config();
  const int64_t c = cfg.hidden, hq = cfg.heads, hkv = cfg.kv_heads, d = cfg.head_dim;
  if (cache.layers != cfg.layers) cache.reset(cfg.layers, hkv, d);
  const int threads = std::max(opt.threads, 1);
  const kc::RopeTable rope = model::rope_table(&pos, 1, cfg.rope(pos + 1));
  const float eps = static_cast<float>(cfg.norm_eps);
  const model::LayerOffsets& lo = layout.layer_offsets();
  const model::MlpDims md{1, c, cfg.intermediate, opt.ffn_chunk, opt.precision};
  std::vector<float> ws(static_cast<size_t>(model::mlp_workspace_floats(md)));
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const int world = group.size();

  std::vector<float> x(static_cast<size_t>(c)), n(static_cast<size_t>(c)),
      q(static_cast<size_t>(hq * d)), k(static_cast<size_t>(hkv * d)),
      v(static_cast<size_t>(hkv * d)), o(static_cast<size_t>(hq * d));
  float rstd = 0;
  const int emb = layout.embedding_unit();
  model::embedding_forward(&token, &pos, params.acquire(emb), 1, c, cfg.vocab, x.data());
  params.release(emb);
  if (keep) cache.pos.push_back(pos);
  const int64_t part = hq * d + hq;  // one rank's partial: o [Hq, D] then lse [Hq]
  std::vector<float> mine(static_cast<size_t>(part)), all(static_cast<size_t>(part * world));
  for (int64_t layer = 0; layer < cfg.layers; ++layer) {
    const int u = layout.layer_unit(layer);
    const float* w = params.acquire(u);
    kc::rmsnorm_forward(x.data(), w + lo.attn_norm, 1, c, eps, n.data(), &rstd, threads);
    kc::linear_forward(n.data(), w + lo.wq, 1, c, hq * d, q.data(), false, threads, opt.precision);
    kc::linear_forward(n.data(), w + lo.wk, 1, c, hkv * d, k.data(), false, threads, opt.precision);
    kc::linear_forward(n.data(), w + lo.wv, 1, c, hkv * d, v.data(), false, threads, opt.precision);
    rope.forward(q.data(), hq, 1);
    rope.forward(k.data(), hkv, 1);
    if (keep) {
      cache.k[layer].insert(cache.k[layer].end(), k.begin(), k.end());
      cache.v[layer].insert(cache.v[layer].end(), v.begin(), v.end());
    }
    kc::decode_attention(q.data(), cache.k[layer].data(), cache.v[layer].data(), cache.pos.data(),
                         {cache.size(), hq, hkv, d}, pos, cfg.sliding_window, scale, mine.data(),
                         mine.data() + hq * d, threads);
    group.all_gather(mine.data(), all.data(), static_cast<size_t>(part), core::DType::f32);
    for (int64_t h = 0; h < hq; ++h) {  // the partials merged in rank order
      double m = -INFINITY;
      for (int r = 0; r < world; ++r)
        m = std::max(m, static_cast<double>(all[r * part + hq * d + h]));
      double sum = 0;
      std::vector<double> acc(static_cast<size_t>(d), 0.0);
      if (m != -INFINITY)
        for (int r = 0; r < world; ++r) {
          const double l = all[r * part + hq * d + h];
          if (l == -INFINITY) continue;
          const double wr = std::exp(l - m);
          sum += wr;
          for (int64_t e = 0; e < d; ++e)
            acc[e] += wr * static_cast<double>(all[r * part + h * d + e]);
        }
      for (int64_t e = 0; e < d; ++e)
        o[h * d + e] = sum > 0 ? static_cast<float>(acc[e] / sum) : 0.0f;
    }
    kc::linear_forward(o.data(), w + lo.wo, 1, hq * d, c, x.data(), true, threads, opt.precision);
    kc::rmsnorm_forward(x.data(), w + lo.mlp_norm, 1, c, eps, n.data(), &rstd, threads);
    model::mlp_forward(n.data(), w + lo.wgate, w + lo.wup, w + lo.wdown, md, x.data(), true,
                       ws.data(), threads);
    params.release(u);
  }
  const int fin = layout.final_unit();
  std::vector<float> h(static_cast<size_t>(c));
  kc::rmsnorm_forward(x.data(), params.acquire(fin) + layout.final_norm_offset(), 1, c, eps,
                      h.data(), &rstd, threads);
  params.release(fin);
  return h;
}

}  // namespace longseq::test
