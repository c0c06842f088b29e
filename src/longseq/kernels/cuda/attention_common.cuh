#pragma once
// Internal to kernels/cuda/attention*.cu: the launch parameters, the per-tile position summaries
// and the tile classification of kernels/cpu/tiles.cpp ported to the device, the mask predicate
// of kernels/mask.hpp on the device, and the entry points of the tensor-core kernels
// (attention_mma.cu). Not part of the public API (attention.hpp is).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace longseq::kernels::cuda::detail {

inline constexpr int kTile = 64;  // tokens per query and key tile (attention.hpp's kAttnTile)
inline constexpr int kClassChunk = 128;  // tiles classified in parallel per round (one per thread)

/// What classification needs of one tile of tokens (kernels/cpu/tiles.hpp's TileInfo without
/// `contiguous`: the GPU kernels do not trim tiles). Written by the summary kernel into the
/// caller's workspace: q tiles first, then k tiles.
struct TileSummary {
  int64_t pmin, pmax;
  int32_t dmin, dmax;
  int32_t any_valid, all_valid;
};

enum TileKindDev : uint8_t { kEmpty = 0, kPartial = 1, kFull = 2 };

/// Everything a kernel reads; passed by value.
struct AttnParams {
  const void* q;
  const void* k;
  const void* v;
  const void* dout;
  const float* lse_in;  // backward: the final lse
  const float* delta;   // backward
  float* o;
  float* lse;  // forward output
  float* dq;
  float* dk;
  float* dv;
  const int64_t* qpos;
  const int64_t* kpos;
  const int32_t* qdoc;
  const int32_t* kdoc;
  const uint8_t* block_mask;
  int64_t block_size, num_blocks, window;
  int64_t tq, tk;
  int hq, hkv, d, group;
  int causal, docs;
  float scale;
  const TileSummary* qtiles;
  const TileSummary* ktiles;
  int nqt, nkt;
};

/// kernels/mask.hpp's predicate. A position beyond the block mask is invisible here (the host
/// predicate would fail a check; the device cannot throw, and must not read out of bounds).
__device__ __forceinline__ bool visible_dev(const AttnParams& p, int64_t qp, int64_t kp, int32_t qd,
                                            int32_t kd) {
  if (qp < 0 || kp < 0) return false;
  if ((p.causal || p.window > 0) && kp > qp) return false;
  if (p.window > 0 && qp - kp >= p.window) return false;
  if (p.docs && qd != kd) return false;
  if (p.block_mask) {
    const int64_t qb = qp / p.block_size, kb = kp / p.block_size;
    if (qb >= p.num_blocks || kb >= p.num_blocks) return false;
    if (!p.block_mask[qb * p.num_blocks + kb]) return false;
  }
  return true;
}

/// kernels/cpu/tiles.cpp's classify, line for line (one thread; the block-mask rectangle scan is
/// bounded by the same 4096 entries).
__device__ inline uint8_t classify_dev(const AttnParams& p, const TileSummary& q,
                                       const TileSummary& k) {
  if (!q.any_valid || !k.any_valid) return kEmpty;
  bool full = q.all_valid && k.all_valid;
  if (p.causal || p.window > 0) {
    if (k.pmin > q.pmax) return kEmpty;
    if (k.pmax > q.pmin) full = false;
  }
  if (p.window > 0) {
    if (q.pmin - k.pmax >= p.window) return kEmpty;
    if (q.pmax - k.pmin >= p.window) full = false;
  }
  if (p.docs) {
    if (k.dmax < q.dmin || k.dmin > q.dmax) return kEmpty;
    if (!(q.dmin == q.dmax && k.dmin == k.dmax && q.dmin == k.dmin)) full = false;
  }
  if (p.block_mask) {
    const int64_t b = p.block_size, qb0 = q.pmin / b, qb1 = q.pmax / b, kb0 = k.pmin / b,
                  kb1 = k.pmax / b;
    if (qb1 >= p.num_blocks || kb1 >= p.num_blocks || (qb1 - qb0 + 1) * (kb1 - kb0 + 1) > 4096) {
      full = false;  // out of range: partial, and the per-element predicate says invisible
    } else {
      bool any = false, all = true;
      for (int64_t qb = qb0; qb <= qb1; ++qb)
        for (int64_t kb = kb0; kb <= kb1; ++kb) {
          const bool vis = p.block_mask[qb * p.num_blocks + kb] != 0;
          any = any || vis;
          all = all && vis;
        }
      if (!any) return kEmpty;
      if (!all) full = false;
    }
  }
  return full ? kFull : kPartial;
}

/// Tokens of a tile that starts `rest` tokens before the end of its block: min(kTile, rest).
__device__ __forceinline__ int tile_len(int64_t rest) {
  return rest < kTile ? static_cast<int>(rest) : kTile;
}

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

/// Tensor-core kernels (attention_mma.cu), D in {64, 128}, bf16 inputs, 16-byte aligned rows.
void mma_forward(const AttnParams& p, cudaStream_t s);
void mma_backward(const AttnParams& p, cudaStream_t s);

}  // namespace longseq::kernels::cuda::detail
