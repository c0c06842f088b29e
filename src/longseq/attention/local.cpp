#include "longseq/attention/local.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/kernels/cpu/attention.hpp"

namespace longseq::attention {

using core::bf16;
using core::require;

void LocalDims::validate() const {
  require(batch > 0 && tokens > 0 && hq > 0 && hkv > 0 && d > 0, "attention",
          "every extent must be positive: batch ", batch, ", tokens ", tokens, ", heads ", hq, "/",
          hkv, ", head dim ", d);
  require(hq % hkv == 0, "attention", "query heads ", hq, " are no multiple of key/value heads ",
          hkv);
}

namespace {

// What every sequence of a call shares: its dims for the kernels, positions 0..T-1, the
// workspace, and what each sequence's mask needs.
struct Sequences {
  kernels::cpu::AttnDims dims;
  std::vector<int64_t> pos;
  double scale = 0;
  LocalMasks masks;

  Sequences(const LocalDims& d, LocalMasks m, double s) : masks(m) {
    d.validate();
    require(m.size() == 1 || static_cast<int64_t>(m.size()) == d.batch, "attention", m.size(),
            " masks for a batch of ", d.batch, " (one for all, or one per sequence)");
    for (const MaskSpec* mask : m) {
      LONGSEQ_CHECK(mask != nullptr);
      mask->validate(d.tokens);
    }
    require(std::isfinite(s) && s >= 0, "attention", "softmax scale ", s,
            " must be finite and >= 0 (0: 1/sqrt(D))");
    dims = {d.tokens, d.tokens, d.hq, d.hkv, d.d, 0};
    pos.resize(static_cast<size_t>(d.tokens));
    std::iota(pos.begin(), pos.end(), int64_t{0});
    scale = s > 0 ? s : 1.0 / std::sqrt(static_cast<double>(d.d));
  }
  const MaskSpec& mask(int64_t b) const { return *masks[masks.size() == 1 ? 0 : b]; }
  kernels::Tokens tokens(int64_t b) const {
    const MaskSpec& m = mask(b);
    return {pos.data(), m.doc_ids.empty() ? nullptr : m.doc_ids.data()};
  }
};

// Query rows per kernel call where a call's memory grows with its rows: the backward's dq
// accumulators (attention_backward_chunks C of them, each rows x Hq x D floats) and, for bf16,
// the fp32 o and dq that are rounded into the caller's tensors. C x rows stays at most 1024
// rows' worth, so the scratch is a fixed fraction of a tensor at most (1/16 at T = 16K) and
// never grows with T; every key is passed each time, so the result is the whole sequence's.
int64_t query_chunk(const kernels::cpu::AttnDims& dims) {
  const int64_t c = kernels::cpu::attention_backward_chunks(dims);
  const int64_t tile = kernels::cpu::kBackwardTileQ;
  return std::max<int64_t>(tile, 1024 / c / tile * tile);
}

// The kernels' dims for query rows [r0, r0 + rows) against every key.
kernels::cpu::AttnDims rows_dims(const Sequences& s, int64_t rows) {
  kernels::cpu::AttnDims d = s.dims;
  d.tq = rows;
  return d;
}

template <class T>
void forward(const T* q, const T* k, const T* v, const LocalDims& d, const Sequences& s,
             int threads, T* o, float* lse) {
  const core::Exec exec(threads);
  constexpr bool f32 = std::is_same_v<T, float>;
  // f32 writes o in place in one call per sequence; bf16 a chunk of rows at a time through fp32.
  const int64_t chunk = f32 ? d.tokens : std::min(d.tokens, query_chunk(s.dims));
  const int64_t row = d.hq * d.d, qn = d.tokens * row, kn = d.tokens * d.hkv * d.d;
  core::Buffer<float> ws(
      kernels::cpu::attention_forward_workspace_floats(rows_dims(s, chunk), exec), core::Uninit{});
  core::Buffer<float> o32(f32 ? 0 : static_cast<size_t>(chunk * row), core::Uninit{});
  for (int64_t b = 0; b < d.batch; ++b) {
    const kernels::Tokens t = s.tokens(b);
    for (int64_t r0 = 0; r0 < d.tokens; r0 += chunk) {
      const int64_t rows = std::min(chunk, d.tokens - r0);
      const kernels::Tokens qt{t.pos + r0, t.doc ? t.doc + r0 : nullptr};
      float* ob = nullptr;
      if constexpr (f32)
        ob = o + b * qn + r0 * row;
      else
        ob = o32.data();
      kernels::cpu::attention_block_forward(q + b * qn + r0 * row, k + b * kn, v + b * kn, qt, t,
                                            s.mask(b).kernel_mask(), static_cast<float>(s.scale),
                                            rows_dims(s, rows), exec, ws, ob,
                                            lse + (b * d.tokens + r0) * d.hq);
      if constexpr (!f32)
        core::f32_to_bf16(o32.data(), o + b * qn + r0 * row, static_cast<size_t>(rows * row));
    }
  }
}

template <class T>
void backward(const T* dout, const T* q, const T* k, const T* v, const T* o, const float* lse,
              const float* dlse, const LocalDims& d, const Sequences& s, int threads, T* dq, T* dk,
              T* dv) {
  const core::Exec exec(threads);
  constexpr bool f32 = std::is_same_v<T, float>;
  const int64_t chunk = std::min(d.tokens, query_chunk(s.dims));
  const int64_t row = d.hq * d.d, qn = d.tokens * row, kn = d.tokens * d.hkv * d.d;
  core::Buffer<float> ws(
      kernels::cpu::attention_backward_workspace_floats(rows_dims(s, chunk), exec), core::Uninit{});
  core::Buffer<float> delta(static_cast<size_t>(d.tokens * d.hq), core::Uninit{});
  // bf16: fp32 dq of a chunk and fp32 dk, dv of a sequence (they accumulate over the chunks),
  // rounded into the caller's tensors.
  core::Buffer<float> q32(f32 ? 0 : static_cast<size_t>(chunk * row), core::Uninit{});
  core::Buffer<float> kv32(f32 ? 0 : static_cast<size_t>(2 * kn), core::Uninit{});
  for (int64_t b = 0; b < d.batch; ++b) {
    const kernels::Tokens t = s.tokens(b);
    float *gk, *gv;
    if constexpr (f32) {
      gk = dk + b * kn;
      gv = dv + b * kn;
    } else {
      gk = kv32.data();
      gv = gk + kn;
    }
    // The kernel accumulates into the gradients.
    std::fill(gk, gk + kn, 0.f);
    std::fill(gv, gv + kn, 0.f);
    const float* lb = lse + b * d.tokens * d.hq;
    kernels::cpu::attention_delta(dout + b * qn, o + b * qn, d.tokens, d.hq, d.d, exec,
                                  delta.data());
    if (dlse != nullptr)  // the lse's own gradient (local.hpp)
      for (int64_t i = 0; i < d.tokens * d.hq; ++i) delta[i] -= dlse[b * d.tokens * d.hq + i];
    for (int64_t r0 = 0; r0 < d.tokens; r0 += chunk) {
      const int64_t rows = std::min(chunk, d.tokens - r0);
      const kernels::Tokens qt{t.pos + r0, t.doc ? t.doc + r0 : nullptr};
      float* gq = nullptr;
      if constexpr (f32)
        gq = dq + b * qn + r0 * row;
      else
        gq = q32.data();
      std::fill(gq, gq + rows * row, 0.f);
      const int64_t at = b * qn + r0 * row;
      kernels::cpu::attention_block_backward(q + at, k + b * kn, v + b * kn, dout + at,
                                             lb + r0 * d.hq, delta.data() + r0 * d.hq, qt, t,
                                             s.mask(b).kernel_mask(), static_cast<float>(s.scale),
                                             rows_dims(s, rows), exec, ws, gq, gk, gv);
      if constexpr (!f32) core::f32_to_bf16(gq, dq + at, static_cast<size_t>(rows * row));
    }
    if constexpr (!f32) {
      core::f32_to_bf16(gk, dk + b * kn, static_cast<size_t>(kn));
      core::f32_to_bf16(gv, dv + b * kn, static_cast<size_t>(kn));
    }
  }
}

void check_dtype(core::DType dtype) {
  require(dtype == core::DType::f32 || dtype == core::DType::bf16, "attention", "dtype ",
          core::dtype_name(dtype), ": expected f32 or bf16");
}

}  // namespace

void local_attention_forward(const void* q, const void* k, const void* v, core::DType dtype,
                             const LocalDims& dims, LocalMasks masks, double scale, int threads,
                             void* o, float* lse) {
  check_dtype(dtype);
  const Sequences s(dims, masks, scale);
  if (dtype == core::DType::f32)
    forward(static_cast<const float*>(q), static_cast<const float*>(k),
            static_cast<const float*>(v), dims, s, threads, static_cast<float*>(o), lse);
  else
    forward(static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v),
            dims, s, threads, static_cast<bf16*>(o), lse);
}

void local_attention_backward(const void* dout, const void* q, const void* k, const void* v,
                              const void* o, const float* lse, core::DType dtype,
                              const LocalDims& dims, LocalMasks masks, double scale, int threads,
                              void* dq, void* dk, void* dv, const float* dlse) {
  check_dtype(dtype);
  const Sequences s(dims, masks, scale);
  if (dtype == core::DType::f32)
    backward(static_cast<const float*>(dout), static_cast<const float*>(q),
             static_cast<const float*>(k), static_cast<const float*>(v),
             static_cast<const float*>(o), lse, dlse, dims, s, threads, static_cast<float*>(dq),
             static_cast<float*>(dk), static_cast<float*>(dv));
  else
    backward(static_cast<const bf16*>(dout), static_cast<const bf16*>(q),
             static_cast<const bf16*>(k), static_cast<const bf16*>(v), static_cast<const bf16*>(o),
             lse, dlse, dims, s, threads, static_cast<bf16*>(dq), static_cast<bf16*>(dk),
             static_cast<bf16*>(dv));
}

}  // namespace longseq::attention
