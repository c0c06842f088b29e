// The attention block kernels' public entry points (contracts in attention.hpp): arguments are
// checked here, once, and the work runs in the active kernel variant (kernels/cpu/dispatch.hpp;
// the bodies are kernels/cpu/isa/attention.cpp).
#include "longseq/kernels/cpu/attention.hpp"

#include <algorithm>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/dispatch.hpp"

namespace longseq::kernels::cpu {

namespace {

using core::bf16;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Work units the backward aims for before it starts splitting kv heads into chunks (see
// attention_backward_chunks in the header for worked examples).
constexpr int64_t kBackwardUnits = 8;

void check_dims(const AttnDims& dm) {
  LONGSEQ_CHECK_MSG(
      dm.tq >= 0 && dm.tk >= 0 && dm.hq > 0 && dm.hkv > 0 && dm.d > 0 && dm.hq % dm.hkv == 0,
      "attention dims tq=", dm.tq, " tk=", dm.tk, " hq=", dm.hq, " hkv=", dm.hkv, " d=", dm.d);
}

// Every position must lie inside the block mask: the variants index it by position / block_size.
void check_block_mask(const Mask& mask, const Tokens& t, int64_t n) {
  const int64_t limit = mask.block_size * mask.num_blocks;
  for (int64_t i = 0; i < n; ++i)
    LONGSEQ_CHECK_MSG(t.pos[i] < limit, "position ", t.pos[i], " at ", i, " beyond block mask of ",
                      mask.num_blocks, " blocks of ", mask.block_size);
}

void check_tokens(const Mask& mask, const Tokens& qt, const Tokens& kt, const AttnDims& dm) {
  LONGSEQ_CHECK((qt.pos || dm.tq == 0) && (kt.pos || dm.tk == 0));
  if (mask.docs) LONGSEQ_CHECK((qt.doc || dm.tq == 0) && (kt.doc || dm.tk == 0));
  if (mask.block_mask) {
    LONGSEQ_CHECK(mask.block_size > 0 && mask.num_blocks > 0);
    check_block_mask(mask, qt, dm.tq);
    check_block_mask(mask, kt, dm.tk);
  }
}

template <class T>
void forward(const T* q, const T* k, const T* v, const Tokens& qt, const Tokens& kt,
             const Mask& mask, float scale, const AttnDims& dims, int threads, std::span<float> ws,
             float* o, float* lse) {
  check_dims(dims);
  check_tokens(mask, qt, kt, dims);
  const size_t need = attention_forward_workspace_floats(dims, threads);
  LONGSEQ_CHECK_MSG(ws.size() >= need, "forward workspace ", ws.size(), " < ", need);
  const KernelTable& t = active_kernels();
  if constexpr (std::is_same_v<T, bf16>)
    t.attention_forward_bf16(q, k, v, qt, kt, mask, scale, dims, threads, ws.data(), o, lse);
  else
    t.attention_forward_f32(q, k, v, qt, kt, mask, scale, dims, threads, ws.data(), o, lse);
}

template <class T>
void backward(const T* q, const T* k, const T* v, const T* dout, const float* lse,
              const float* delta, const Tokens& qt, const Tokens& kt, const Mask& mask, float scale,
              const AttnDims& dims, int threads, std::span<float> ws, float* dq, float* dk,
              float* dv) {
  check_dims(dims);
  check_tokens(mask, qt, kt, dims);
  const size_t need = attention_backward_workspace_floats(dims, threads);
  LONGSEQ_CHECK_MSG(ws.size() >= need, "backward workspace ", ws.size(), " < ", need);
  const KernelTable& t = active_kernels();
  const int64_t chunks = attention_backward_chunks(dims);
  if constexpr (std::is_same_v<T, bf16>)
    t.attention_backward_bf16(q, k, v, dout, lse, delta, qt, kt, mask, scale, dims, threads, chunks,
                              ws.data(), dq, dk, dv);
  else
    t.attention_backward_f32(q, k, v, dout, lse, delta, qt, kt, mask, scale, dims, threads, chunks,
                             ws.data(), dq, dk, dv);
}

}  // namespace

size_t attention_forward_workspace_floats(const AttnDims& dims, const core::Exec& exec) {
  const int threads = exec.cpu_threads("attention_forward_workspace_floats");
  // One size for both input types keeps the query type-free; every variant has the same layout.
  const KernelTable& t = active_kernels();
  const size_t slice =
      std::max(t.forward_slice_floats(dims.d, false), t.forward_slice_floats(dims.d, true));
  return static_cast<size_t>(std::max(threads, 1)) * slice;
}

void attention_block_forward(const float* q, const float* k, const float* v, const Tokens& qt,
                             const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                             const core::Exec& exec, std::span<float> workspace, float* o,
                             float* lse) {
  const int threads = exec.cpu_threads("attention_block_forward");
  forward(q, k, v, qt, kt, mask, scale, dims, threads, workspace, o, lse);
}

void attention_block_forward(const bf16* q, const bf16* k, const bf16* v, const Tokens& qt,
                             const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                             const core::Exec& exec, std::span<float> workspace, float* o,
                             float* lse) {
  const int threads = exec.cpu_threads("attention_block_forward");
  forward(q, k, v, qt, kt, mask, scale, dims, threads, workspace, o, lse);
}

int64_t attention_backward_chunks(const AttnDims& dims) {
  const int64_t nkt = std::max<int64_t>(1, ceil_div(dims.tk, kBackwardTileK));
  const int64_t heads = dims.chunk_hkv > 0 ? dims.chunk_hkv : dims.hkv;
  const int64_t want = ceil_div(kBackwardUnits, std::max<int64_t>(heads, 1));
  return std::clamp<int64_t>(want, 1, nkt);
}

size_t attention_backward_workspace_floats(const AttnDims& dims, const core::Exec& exec) {
  const int threads = exec.cpu_threads("attention_backward_workspace_floats");
  const KernelTable& t = active_kernels();
  const size_t slice =
      std::max(t.backward_slice_floats(dims.d, false), t.backward_slice_floats(dims.d, true));
  const size_t slices = static_cast<size_t>(std::max(threads, 1)) * slice;
  const size_t bufs = static_cast<size_t>(attention_backward_chunks(dims)) *
                      static_cast<size_t>(dims.tq * dims.hq * dims.d);
  return slices + bufs;
}

void attention_block_backward(const float* q, const float* k, const float* v, const float* dout,
                              const float* lse, const float* delta, const Tokens& qt,
                              const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                              const core::Exec& exec, std::span<float> workspace, float* dq,
                              float* dk, float* dv) {
  const int threads = exec.cpu_threads("attention_block_backward");
  backward(q, k, v, dout, lse, delta, qt, kt, mask, scale, dims, threads, workspace, dq, dk, dv);
}

void attention_block_backward(const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
                              const float* lse, const float* delta, const Tokens& qt,
                              const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                              const core::Exec& exec, std::span<float> workspace, float* dq,
                              float* dk, float* dv) {
  const int threads = exec.cpu_threads("attention_block_backward");
  backward(q, k, v, dout, lse, delta, qt, kt, mask, scale, dims, threads, workspace, dq, dk, dv);
}

}  // namespace longseq::kernels::cpu
