// Forward-only model, per-token losses, and KV-cache decoding sharded over ranks.
#include "longseq/model/inference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "longseq/comm/group.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/kernels/cpu/decode_attention.hpp"
#include "longseq/model/kernels.hpp"
#include "longseq/model/layers.hpp"
#include "longseq/model/lm_head.hpp"

namespace longseq::model {

using core::Shape;
using core::Tensor;

ReplicaParams::ReplicaParams(const ParamLayout& layout, std::vector<std::vector<float>> units,
                             core::Device device)
    : layout_(layout), device_(device), units_(std::move(units)) {
  LONGSEQ_CHECK(static_cast<int>(units_.size()) == layout_.num_units());
  for (int u = 0; u < layout_.num_units(); ++u)
    LONGSEQ_CHECK(static_cast<int64_t>(units_[u].size()) >= layout_.units()[u].size);
  if (device_.is_cpu()) return;
  for (std::vector<float>& host : units_) {
    core::Buffer<float>& d =
        on_device_.emplace_back(host.size(), device_, core::Uninit{}, "inference parameters");
    core::copy_bytes(d.data(), device_, host.data(), core::Device::cpu(),
                     host.size() * sizeof(float));
    std::vector<float>().swap(host);
  }
}

const float* ReplicaParams::acquire(int unit) {
  if (!device_.is_cpu()) return on_device_.at(static_cast<size_t>(unit)).data();
  return units_.at(static_cast<size_t>(unit)).data();
}

float* ReplicaParams::acquire_grad(int unit) {
  LONGSEQ_CHECK_MSG(false, "inference has no gradients (unit ", unit, ")");
  return nullptr;
}

void ReplicaParams::release_grad(int unit) {
  LONGSEQ_CHECK_MSG(false, "inference has no gradients (unit ", unit, ")");
}

void KvCache::reset(int64_t l, int64_t h, int64_t dd) {
  layers = l;
  hkv = h;
  d = dd;
  k.assign(static_cast<size_t>(l), {});
  v.assign(static_cast<size_t>(l), {});
  pos.clear();
}

namespace {

// The LM head's weight: lm_head, or the tied embedding (acquired; the caller releases `unit`).
const float* head_weight(const ParamLayout& layout, ParamSource& params, int* unit) {
  if (layout.config().tied_embeddings) {
    *unit = layout.embedding_unit();
    return params.acquire(*unit);
  }
  *unit = layout.final_unit();
  return params.acquire(*unit) + layout.lm_head_offset();
}

// `n` floats at `src` on `kernels`' device, readable on the host: `src` itself on the CPU, else
// a copy into `staging` once everything handed to the device has run.
const float* on_host(const Kernels& kernels, const float* src, int64_t n,
                     std::vector<float>& staging) {
  if (kernels.device().is_cpu()) return src;
  staging.resize(static_cast<size_t>(n));
  kernels.synchronize();
  core::copy_bytes(staging.data(), core::Device::cpu(), src, kernels.device(),
                   static_cast<size_t>(n) * sizeof(float));
  return staging.data();
}

}  // namespace

ModelOptions model_options(const InferenceOptions& opt) {
  ModelOptions m;
  m.threads = std::max(opt.threads, 1);
  m.precision = opt.precision;
  m.ffn_chunk = opt.ffn_chunk;
  return m;
}

Tensor<float> prefill(const ParamLayout& layout, ParamSource& params, AttentionOp& attn,
                      const StepBatch& b, const InferenceOptions& opt, const Kernels& kernels,
                      KvCache& cache) {
  const LlamaConfig& cfg = layout.config();
  const int64_t l = b.len, row = cfg.kv_heads * cfg.head_dim;
  if (cache.layers != cfg.layers) cache.reset(cfg.layers, cfg.kv_heads, cfg.head_dim);
  for (int64_t i = 0; i < l; ++i)
    if (b.pos[i] >= 0) cache.pos.push_back(b.pos[i]);
  std::vector<float> staging;
  // The rows of the non-padding tokens, in order, onto the host's arrays.
  auto append = [&](std::vector<float>& dst, const float* src) {
    const float* h = on_host(kernels, src, l * row, staging);
    for (int64_t i = 0; i < l; ++i)
      if (b.pos[i] >= 0) dst.insert(dst.end(), h + i * row, h + (i + 1) * row);
  };
  const KvSink sink = [&](int64_t layer, const float* k, const float* v) {
    append(cache.k[layer], k);
    append(cache.v[layer], v);
  };
  return forward_hidden(layout, params, attn, b, model_options(opt), kernels, sink);
}

std::vector<float> forward_hidden(const ParamLayout& layout, ParamSource& params, AttentionOp& attn,
                                  const StepBatch& b, const InferenceOptions& opt, KvCache* cache) {
  const CpuKernels kernels(std::max(opt.threads, 1));
  const Tensor<float> h =
      cache ? prefill(layout, params, attn, b, opt, kernels, *cache)
            : forward_hidden(layout, params, attn, b, model_options(opt), kernels);
  return std::vector<float>(h.data(), h.data() + h.numel());
}

std::vector<double> token_losses(const ParamLayout& layout, ParamSource& params,
                                 const float* hidden, const int32_t* labels, int64_t l,
                                 const InferenceOptions& opt, const Kernels& kernels) {
  const LlamaConfig& cfg = layout.config();
  const int64_t c = cfg.hidden, vocab = cfg.vocab;
  count_targets(labels, l, vocab);  // refuses labels outside [0, V)
  int unit = 0;
  const float* w = head_weight(layout, params, &unit);
  // Rows per tile: about 2^22 logits (16 MiB) at a time, never [l, V].
  const int64_t tile =
      std::clamp<int64_t>((int64_t{1} << 22) / std::max<int64_t>(vocab, 1), 1, 256);
  // Why the product on the device and the log-sum-exp on the host: the product is the O(l C V)
  // part, the device's work; the reduction is O(l V) and wants fp64 (no GPU kernel of ours has
  // an fp64 per-row log-sum-exp), and on the host it is this function's own loop, so a CPU and
  // a GPU evaluation differ only where their GEMMs do. On the host the tile is read in place.
  core::Buffer<float> tile_dev(static_cast<size_t>(tile * vocab), kernels.device(), core::Uninit{},
                               "logits tile");
  std::vector<float> logits;  // the tile on the host, off a device
  std::vector<double> loss(static_cast<size_t>(l), std::numeric_limits<double>::quiet_NaN());
  for (int64_t r0 = 0; r0 < l; r0 += tile) {
    const int64_t rows = std::min(tile, l - r0);
    bool any = false;
    for (int64_t r = 0; r < rows; ++r) any |= labels[r0 + r] != kIgnoreIndex;
    if (!any) continue;
    kernels.linear_forward(hidden + r0 * c, w, rows, c, vocab, tile_dev.data(), false,
                           opt.precision);
    const float* zs = on_host(kernels, tile_dev.data(), rows * vocab, logits);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t y = labels[r0 + r];
      if (y == kIgnoreIndex) continue;
      const float* z = zs + r * vocab;
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < vocab; ++j) m = std::max(m, static_cast<double>(z[j]));
      for (int64_t j = 0; j < vocab; ++j) s += std::exp(static_cast<double>(z[j]) - m);
      loss[r0 + r] = m + std::log(s) - static_cast<double>(z[y]);
    }
  }
  params.release(unit);
  return loss;
}

std::vector<double> token_losses(const ParamLayout& layout, ParamSource& params,
                                 const float* hidden, const int32_t* labels, int64_t l,
                                 const InferenceOptions& opt) {
  return token_losses(layout, params, hidden, labels, l, opt, CpuKernels(std::max(opt.threads, 1)));
}

std::vector<float> logits_of(const ParamLayout& layout, ParamSource& params, const float* hidden,
                             const InferenceOptions& opt, const Kernels& kernels) {
  const LlamaConfig& cfg = layout.config();
  int unit = 0;
  const float* w = head_weight(layout, params, &unit);
  std::vector<float> z(static_cast<size_t>(cfg.vocab));
  const bool host = kernels.device().is_cpu();
  core::Buffer<float> z_dev(host ? 0 : z.size(), kernels.device(), core::Uninit{}, "logits");
  float* out = host ? z.data() : z_dev.data();
  kernels.linear_forward(hidden, w, 1, cfg.hidden, cfg.vocab, out, false, opt.precision);
  (void)on_host(kernels, out, cfg.vocab, z);  // off a device: copied into z
  params.release(unit);
  return z;
}

std::vector<float> logits_of(const ParamLayout& layout, ParamSource& params, const float* hidden,
                             const InferenceOptions& opt) {
  return logits_of(layout, params, hidden, opt, CpuKernels(std::max(opt.threads, 1)));
}

namespace {

// The partials of every rank (`all`: per rank o [Hq, D] then lse [Hq]) merged in rank order into
// o [Hq, D] (identical on every rank): LSE = log sum_r exp(LSE_r), O = sum_r exp(LSE_r - LSE) O_r.
void merge_partials(const std::vector<float>& all, int world, int64_t hq, int64_t d, float* o) {
  const int64_t part = hq * d + hq;
  std::vector<double> acc(static_cast<size_t>(d));
  for (int64_t h = 0; h < hq; ++h) {
    double m = -INFINITY;
    for (int r = 0; r < world; ++r)
      m = std::max(m, static_cast<double>(all[r * part + hq * d + h]));
    double sum = 0;
    std::fill(acc.begin(), acc.end(), 0.0);
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
}

}  // namespace

Tensor<float> decode_step(const ParamLayout& layout, ParamSource& params, comm::Group& group,
                          KvCache& cache, int32_t token, int64_t pos, bool keep,
                          const InferenceOptions& opt, const Kernels& k) {
  const LlamaConfig& cfg = layout.config();
  const int64_t c = cfg.hidden, hq = cfg.heads, hkv = cfg.kv_heads, d = cfg.head_dim;
  core::require(token >= 0 && token < cfg.vocab, "model", "token ", token,
                " outside the vocabulary [0, ", cfg.vocab, ")");
  core::require(pos >= 0, "model", "decode position ", pos, " must be >= 0");
  if (cache.layers != cfg.layers) cache.reset(cfg.layers, hkv, d);
  const core::Device dev = k.device();
  const bool host = dev.is_cpu();
  const int threads = std::max(opt.threads, 1);
  const std::unique_ptr<Rope> rope = k.rope(&pos, 1, cfg.rope(pos + 1));
  const float eps = static_cast<float>(cfg.norm_eps);
  const LayerOffsets& lo = layout.layer_offsets();
  const MlpDims md{1, c, cfg.intermediate, opt.ffn_chunk, opt.precision};
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const int world = group.size();

  // On the device: the residual stream, the normed row, q | k | v in one buffer (one copy to the
  // host per layer), the attention output and the MLP's workspace.
  const int64_t qkv_n = (hq + 2 * hkv) * d;
  Tensor<float> x(Shape{1, c}, dev, "decode residual");
  Tensor<float> n(Shape{1, c}, dev, core::Uninit{}, "decode norm");
  Tensor<float> rstd(Shape{1}, dev, core::Uninit{}, "decode rstd");
  Tensor<float> qkv(Shape{qkv_n}, dev, core::Uninit{}, "decode qkv");
  Tensor<float> o_dev(Shape{host ? 0 : hq * d}, dev, core::Uninit{}, "decode attention output");
  core::Buffer<float> ws(static_cast<size_t>(mlp_workspace_floats(md)), dev, "mlp workspace");
  float* q = qkv.data();
  float* kk = q + hq * d;
  float* vv = kk + hkv * d;
  {
    // The embedding reads the token and its position where it runs.
    core::Buffer<int32_t> tok(host ? 0 : 1, dev, core::Uninit{}, "decode token");
    core::Buffer<int64_t> at(host ? 0 : 1, dev, core::Uninit{}, "decode position");
    if (!host) {
      core::copy_bytes(tok.data(), dev, &token, core::Device::cpu(), sizeof token);
      core::copy_bytes(at.data(), dev, &pos, core::Device::cpu(), sizeof pos);
    }
    const int emb = layout.embedding_unit();
    k.embedding_forward(host ? &token : tok.data(), host ? &pos : at.data(), params.acquire(emb), 1,
                        c, cfg.vocab, x.data());
    params.release(emb);
  }
  if (keep) cache.pos.push_back(pos);
  // One rank's partial as sent: o [Hq, D] then lse [Hq].
  const int64_t part = hq * d + hq;
  std::vector<float> mine(static_cast<size_t>(part)), all(static_cast<size_t>(part * world));
  std::vector<float> o(static_cast<size_t>(hq * d)), staging;
  for (int64_t layer = 0; layer < cfg.layers; ++layer) {
    const int u = layout.layer_unit(layer);
    const float* w = params.acquire(u);
    k.rmsnorm_forward(x.data(), w + lo.attn_norm, 1, c, eps, n.data(), rstd.data());
    k.linear_forward(n.data(), w + lo.wq, 1, c, hq * d, q, false, opt.precision);
    k.linear_forward(n.data(), w + lo.wk, 1, c, hkv * d, kk, false, opt.precision);
    k.linear_forward(n.data(), w + lo.wv, 1, c, hkv * d, vv, false, opt.precision);
    rope->forward(q, hq);
    rope->forward(kk, hkv);
    // The attention over the cache on the host (see top of file).
    const float* qh = on_host(k, q, qkv_n, staging);
    const float* kh = qh + hq * d;
    const float* vh = kh + hkv * d;
    if (keep) {
      cache.k[layer].insert(cache.k[layer].end(), kh, kh + hkv * d);
      cache.v[layer].insert(cache.v[layer].end(), vh, vh + hkv * d);
    }
    kernels::cpu::decode_attention(qh, cache.k[layer].data(), cache.v[layer].data(),
                                   cache.pos.data(), {cache.size(), hq, hkv, d}, pos,
                                   cfg.sliding_window, scale, mine.data(), mine.data() + hq * d,
                                   threads);
    group.all_gather(mine.data(), all.data(), static_cast<size_t>(part), core::DType::f32);
    merge_partials(all, world, hq, d, o.data());
    // Blocking: the device has run everything before on_host, so no queued product reads o_dev.
    if (!host)
      core::copy_bytes(o_dev.data(), dev, o.data(), core::Device::cpu(), o.size() * sizeof(float));
    k.linear_forward(host ? o.data() : o_dev.data(), w + lo.wo, 1, hq * d, c, x.data(), true,
                     opt.precision);
    k.rmsnorm_forward(x.data(), w + lo.mlp_norm, 1, c, eps, n.data(), rstd.data());
    mlp_forward(n.data(), w + lo.wgate, w + lo.wup, w + lo.wdown, md, x.data(), true, ws.data(), k);
    params.release(u);
  }
  const int fin = layout.final_unit();
  Tensor<float> h(Shape{1, c}, dev, core::Uninit{}, "decode final norm output");
  k.rmsnorm_forward(x.data(), params.acquire(fin) + layout.final_norm_offset(), 1, c, eps, h.data(),
                    rstd.data());
  params.release(fin);
  k.synchronize();
  return h;
}

std::vector<float> decode_step(const ParamLayout& layout, ParamSource& params, comm::Group& group,
                               KvCache& cache, int32_t token, int64_t pos, bool keep,
                               const InferenceOptions& opt) {
  const Tensor<float> h = decode_step(layout, params, group, cache, token, pos, keep, opt,
                                      CpuKernels(std::max(opt.threads, 1)));
  return std::vector<float>(h.data(), h.data() + h.numel());
}

}  // namespace longseq::model
