// Attention block kernels on a GPU (contracts in attention.hpp): the host entry points, the tile
// summaries, the generic (fp32 / any D) kernels and delta. The tensor-core kernels are in
// attention_mma.cu.
//
// The generic kernels favour exactness and a fixed order over speed: one warp per row (lanes
// split D), one thread block per 64-token tile of one head, scores as warp butterfly sums, one
// online-softmax rescale per key tile. Their accumulators live in shared memory (64 x D floats),
// so any D up to kMaxGenericHeadDim fits.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/attention.hpp"
#include "longseq/kernels/cuda/attention_common.cuh"
#include "longseq/kernels/cuda/launch.cuh"

namespace longseq::kernels::cuda {

namespace {

using detail::AttnParams;
using detail::kClassChunk;
using detail::kEmpty;
using detail::kFull;
using detail::kTile;
using detail::TileSummary;

constexpr int kGenericWarps = 4;
constexpr int kGenericThreads = 32 * kGenericWarps;
constexpr int kPerLane = static_cast<int>(kMaxGenericHeadDim) / 32;  // D values a lane owns

int64_t tiles_of(int64_t n) {
  return (n + kTile - 1) / kTile;
}

// ---- tile summaries -----------------------------------------------------------------------

// One warp per tile: min/max of the valid positions and document ids (kernels/cpu/tiles.cpp's
// tile_info, without `contiguous`).
__global__ void tile_summary_kernel(const int64_t* pos, const int32_t* doc, int64_t n, int docs,
                                    int64_t ntiles, TileSummary* out) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (tile >= ntiles) return;
  long long pmin = LLONG_MAX, pmax = -1;
  int dmin = INT_MAX, dmax = INT_MIN, any = 0, all = 1;
  for (int64_t i = tile * kTile + lane; i < min(n, (tile + 1) * kTile); i += 32) {
    const long long p = pos[i];
    if (p < 0) {
      all = 0;
      continue;
    }
    any = 1;
    pmin = min(pmin, p);
    pmax = max(pmax, p);
    if (docs) {
      dmin = min(dmin, doc[i]);
      dmax = max(dmax, doc[i]);
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    pmin = min(pmin, __shfl_xor_sync(0xffffffffu, pmin, off));
    pmax = max(pmax, __shfl_xor_sync(0xffffffffu, pmax, off));
    dmin = min(dmin, __shfl_xor_sync(0xffffffffu, dmin, off));
    dmax = max(dmax, __shfl_xor_sync(0xffffffffu, dmax, off));
    any = max(any, __shfl_xor_sync(0xffffffffu, any, off));
    all = min(all, __shfl_xor_sync(0xffffffffu, all, off));
  }
  if (lane == 0)
    out[tile] =
        TileSummary{static_cast<int64_t>(pmin), static_cast<int64_t>(pmax), dmin, dmax, any, all};
}

void summarize(const int64_t* pos, const int32_t* doc, int64_t n, bool docs, TileSummary* out,
               cudaStream_t s) {
  const int64_t nt = tiles_of(n);
  if (nt == 0) return;
  constexpr int kWarps = 4;
  const auto blocks = static_cast<unsigned>((nt + kWarps - 1) / kWarps);
  tile_summary_kernel<<<blocks, 32 * kWarps, 0, s>>>(pos, doc, n, docs ? 1 : 0, nt, out);
  LONGSEQ_CUDA_LAUNCHED();
}

// ---- generic kernels ----------------------------------------------------------------------

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Loads row `row` (D values) into the lane's registers: element lane + 32 i.
template <class T>
__device__ __forceinline__ void load_row(const T* row, int d, int lane, float (&r)[kPerLane]) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    r[i] = c < d ? detail::to_float(row[c]) : 0.0f;
  }
}

__device__ __forceinline__ float dot_lane(const float (&a)[kPerLane], const float (&b)[kPerLane]) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) s = fmaf(a[i], b[i], s);
  return detail::warp_sum(s);
}

// Classifies tiles [base, base + count) of the "other" side against `mine` into kinds[] (one
// thread per tile). `mine_is_q`: whether this block's own tile is the query tile.
__device__ __forceinline__ void classify_chunk(const AttnParams& p, const TileSummary& mine,
                                               bool mine_is_q, const TileSummary* others, int base,
                                               int count, uint8_t* kinds) {
  __syncthreads();  // the previous chunk's kinds are no longer read
  for (int i = static_cast<int>(threadIdx.x); i < count; i += blockDim.x)
    kinds[i] = mine_is_q ? detail::classify_dev(p, mine, others[base + i])
                         : detail::classify_dev(p, others[base + i], mine);
  __syncthreads();
}

// Forward: block (query tile, query head). Rows are handled by warps in turn; per key tile each
// row's scores are computed (lane j % 32 keeps key j's), then one rescale of the accumulator.
template <class T>
__global__ void __launch_bounds__(kGenericThreads) generic_forward_kernel(const AttnParams p) {
  extern __shared__ float acc[];  // [kTile][d]
  __shared__ float m_s[kTile], l_s[kTile];
  __shared__ uint8_t kinds[kClassChunk];
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const int qt = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y), hk = h / p.group,
            d = p.d;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int64_t q0 = static_cast<int64_t>(qt) * kTile;
  const int qn = detail::tile_len(p.tq - q0);
  for (int i = static_cast<int>(threadIdx.x); i < kTile * d; i += blockDim.x) acc[i] = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < kTile; i += blockDim.x) {
    m_s[i] = -INFINITY;
    l_s[i] = 0.0f;
  }
  const TileSummary mine = p.qtiles[qt];
  for (int base = 0; base < p.nkt; base += kClassChunk) {
    const int count = min(kClassChunk, p.nkt - base);
    classify_chunk(p, mine, true, p.ktiles, base, count, kinds);
    for (int c = 0; c < count; ++c) {
      const uint8_t kind = kinds[c];
      if (kind == kEmpty) continue;
      const int64_t k0 = static_cast<int64_t>(base + c) * kTile;
      const int kn = detail::tile_len(p.tk - k0);
      for (int r = warp; r < qn; r += kGenericWarps) {
        const int64_t qi = q0 + r;
        float qr[kPerLane];
        load_row(q + (qi * p.hq + h) * d, d, lane, qr);
        const int64_t qp = p.qpos[qi];
        const int32_t qd = p.docs ? p.qdoc[qi] : 0;
        float sc[2] = {-INFINITY, -INFINITY};
        for (int j = 0; j < kn; ++j) {
          const int64_t kj = k0 + j;
          if (kind != kFull && !detail::visible_dev(p, qp, p.kpos[kj], qd, p.docs ? p.kdoc[kj] : 0))
            continue;
          float kr[kPerLane];
          load_row(k + (kj * p.hkv + hk) * d, d, lane, kr);
          const float s = dot_lane(qr, kr) * p.scale;
          if (lane == (j & 31)) {
            if (j < 32)
              sc[0] = s;
            else
              sc[1] = s;
          }
        }
        const float mx = warp_max(fmaxf(sc[0], sc[1]));
        if (mx == -INFINITY) continue;  // this row sees no key of this tile
        const float m_old = m_s[r];
        const float m_new = fmaxf(m_old, mx);
        const float alpha = expf(m_old - m_new);  // 0 when m_old = -inf
        const float p0 = expf(sc[0] - m_new), p1 = expf(sc[1] - m_new);
        const float lsum = detail::warp_sum(p0 + p1);
        float* a = acc + r * d;
        float ar[kPerLane];
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int col = lane + 32 * i;
          ar[i] = col < d ? a[col] * alpha : 0.0f;
        }
        for (int j = 0; j < kn; ++j) {
          const float pj = __shfl_sync(0xffffffffu, j < 32 ? p0 : p1, j & 31);
          if (pj == 0.0f) continue;  // masked (or underflowed): adds nothing
          const T* vr = v + ((k0 + j) * p.hkv + hk) * d;
#pragma unroll
          for (int i = 0; i < kPerLane; ++i) {
            const int col = lane + 32 * i;
            if (col < d) ar[i] = fmaf(pj, detail::to_float(vr[col]), ar[i]);
          }
        }
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int col = lane + 32 * i;
          if (col < d) a[col] = ar[i];
        }
        __syncwarp();
        if (lane == 0) {
          m_s[r] = m_new;
          l_s[r] = l_s[r] * alpha + lsum;
        }
        __syncwarp();
      }
    }
  }
  __syncthreads();
  for (int r = warp; r < qn; r += kGenericWarps) {
    const int64_t qi = q0 + r;
    const float l = l_s[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float* o = p.o + (qi * p.hq + h) * d;
    for (int col = lane; col < d; col += 32) o[col] = acc[r * d + col] * inv;
    if (lane == 0) p.lse[qi * p.hq + h] = l > 0.0f ? m_s[r] + logf(l) : -INFINITY;
  }
}

// dk, dv: block (key tile, kv head); every query head of the group and every query tile in a
// fixed order; warp per key row.
template <class T>
__global__ void __launch_bounds__(kGenericThreads) generic_dkdv_kernel(const AttnParams p) {
  extern __shared__ float accs[];  // dk [kTile][d], then dv [kTile][d]
  __shared__ uint8_t kinds[kClassChunk];
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const T* dout = static_cast<const T*>(p.dout);
  const int kt = static_cast<int>(blockIdx.x), hk = static_cast<int>(blockIdx.y), d = p.d;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int64_t k0 = static_cast<int64_t>(kt) * kTile;
  const int kn = detail::tile_len(p.tk - k0);
  float* dk_acc = accs;
  float* dv_acc = accs + kTile * d;
  for (int i = static_cast<int>(threadIdx.x); i < 2 * kTile * d; i += blockDim.x) accs[i] = 0.0f;
  const TileSummary mine = p.ktiles[kt];
  for (int base = 0; base < p.nqt; base += kClassChunk) {
    const int count = min(kClassChunk, p.nqt - base);
    classify_chunk(p, mine, false, p.qtiles, base, count, kinds);
    for (int c = 0; c < count; ++c) {
      const uint8_t kind = kinds[c];
      if (kind == kEmpty) continue;
      const int64_t q0 = static_cast<int64_t>(base + c) * kTile;
      const int qn = detail::tile_len(p.tq - q0);
      for (int gi = 0; gi < p.group; ++gi) {
        const int h = hk * p.group + gi;
        for (int r = warp; r < kn; r += kGenericWarps) {
          const int64_t kj = k0 + r;
          float kr[kPerLane], vr[kPerLane], dkr[kPerLane], dvr[kPerLane];
          load_row(k + (kj * p.hkv + hk) * d, d, lane, kr);
          load_row(v + (kj * p.hkv + hk) * d, d, lane, vr);
          load_row(dk_acc + r * d, d, lane, dkr);
          load_row(dv_acc + r * d, d, lane, dvr);
          const int64_t kp = p.kpos[kj];
          const int32_t kd = p.docs ? p.kdoc[kj] : 0;
          for (int i = 0; i < qn; ++i) {
            const int64_t qi = q0 + i;
            const float lse = p.lse_in[qi * p.hq + h];
            if (lse == -INFINITY) continue;
            if (kind != kFull &&
                !detail::visible_dev(p, p.qpos[qi], kp, p.docs ? p.qdoc[qi] : 0, kd))
              continue;
            float qr[kPerLane], dor[kPerLane];
            load_row(q + (qi * p.hq + h) * d, d, lane, qr);
            load_row(dout + (qi * p.hq + h) * d, d, lane, dor);
            const float pr = expf(dot_lane(qr, kr) * p.scale - lse);
            const float ds = pr * (dot_lane(dor, vr) - p.delta[qi * p.hq + h]);
#pragma unroll
            for (int e = 0; e < kPerLane; ++e) {
              dvr[e] = fmaf(pr, dor[e], dvr[e]);
              dkr[e] = fmaf(ds, qr[e], dkr[e]);
            }
          }
#pragma unroll
          for (int e = 0; e < kPerLane; ++e) {
            const int col = lane + 32 * e;
            if (col < d) {
              dk_acc[r * d + col] = dkr[e];
              dv_acc[r * d + col] = dvr[e];
            }
          }
        }
      }
    }
  }
  __syncthreads();
  for (int r = warp; r < kn; r += kGenericWarps) {
    const int64_t off = ((k0 + r) * p.hkv + hk) * d;
    for (int col = lane; col < d; col += 32) {
      p.dk[off + col] += dk_acc[r * d + col] * p.scale;
      p.dv[off + col] += dv_acc[r * d + col];
    }
  }
}

// dq: block (query tile, query head); key tiles in order; warp per query row.
template <class T>
__global__ void __launch_bounds__(kGenericThreads) generic_dq_kernel(const AttnParams p) {
  extern __shared__ float dq_acc[];  // [kTile][d]
  __shared__ uint8_t kinds[kClassChunk];
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const T* dout = static_cast<const T*>(p.dout);
  const int qt = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y), hk = h / p.group,
            d = p.d;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int64_t q0 = static_cast<int64_t>(qt) * kTile;
  const int qn = detail::tile_len(p.tq - q0);
  for (int i = static_cast<int>(threadIdx.x); i < kTile * d; i += blockDim.x) dq_acc[i] = 0.0f;
  const TileSummary mine = p.qtiles[qt];
  for (int base = 0; base < p.nkt; base += kClassChunk) {
    const int count = min(kClassChunk, p.nkt - base);
    classify_chunk(p, mine, true, p.ktiles, base, count, kinds);
    for (int c = 0; c < count; ++c) {
      const uint8_t kind = kinds[c];
      if (kind == kEmpty) continue;
      const int64_t k0 = static_cast<int64_t>(base + c) * kTile;
      const int kn = detail::tile_len(p.tk - k0);
      for (int r = warp; r < qn; r += kGenericWarps) {
        const int64_t qi = q0 + r;
        const float lse = p.lse_in[qi * p.hq + h];
        if (lse == -INFINITY) continue;
        const float delta = p.delta[qi * p.hq + h];
        float qr[kPerLane], dor[kPerLane], dqr[kPerLane];
        load_row(q + (qi * p.hq + h) * d, d, lane, qr);
        load_row(dout + (qi * p.hq + h) * d, d, lane, dor);
        load_row(dq_acc + r * d, d, lane, dqr);
        const int64_t qp = p.qpos[qi];
        const int32_t qd = p.docs ? p.qdoc[qi] : 0;
        for (int j = 0; j < kn; ++j) {
          const int64_t kj = k0 + j;
          if (kind != kFull && !detail::visible_dev(p, qp, p.kpos[kj], qd, p.docs ? p.kdoc[kj] : 0))
            continue;
          float kr[kPerLane], vr[kPerLane];
          load_row(k + (kj * p.hkv + hk) * d, d, lane, kr);
          load_row(v + (kj * p.hkv + hk) * d, d, lane, vr);
          const float pr = expf(dot_lane(qr, kr) * p.scale - lse);
          const float ds = pr * (dot_lane(dor, vr) - delta);
#pragma unroll
          for (int e = 0; e < kPerLane; ++e) dqr[e] = fmaf(ds, kr[e], dqr[e]);
        }
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) {
          const int col = lane + 32 * e;
          if (col < d) dq_acc[r * d + col] = dqr[e];
        }
      }
    }
  }
  __syncthreads();
  for (int r = warp; r < qn; r += kGenericWarps) {
    const int64_t off = ((q0 + r) * p.hq + h) * d;
    for (int col = lane; col < d; col += 32) p.dq[off + col] += dq_acc[r * d + col] * p.scale;
  }
}

// delta: one warp per (token, head) row.
template <class T>
__global__ void delta_kernel(const T* dout, const float* o, int64_t rows, int d, float* delta) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  float s = 0.0f;
  for (int c = lane; c < d; c += 32)
    s = fmaf(detail::to_float(dout[row * d + c]), o[row * d + c], s);
  s = detail::warp_sum(s);
  if (lane == 0) delta[row] = s;
}

// ---- host side ------------------------------------------------------------------------------

constexpr const char* kComponent = "kernels.cuda.attention";

template <class Kernel>
void launch_generic(Kernel kernel, dim3 grid, size_t smem, const AttnParams& p, cudaStream_t s) {
  LONGSEQ_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
  kernel<<<grid, kGenericThreads, smem, s>>>(p);
  LONGSEQ_CUDA_LAUNCHED();
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}
bool aligned8(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 8 == 0;
}

// Checks what a caller can get wrong and fills the parameters; summarises the tiles into the
// workspace (queued on s).
AttnParams prepare(const void* q, const void* k, const void* v, const Tokens& qt, const Tokens& kt,
                   const Mask& mask, float scale, const AttnDims& dm, void* workspace,
                   size_t workspace_bytes, bool fast, cudaStream_t s) {
  core::require(dm.tq >= 0 && dm.tk >= 0 && dm.hq >= 1 && dm.hkv >= 1 && dm.d >= 1, kComponent,
                "dims tq=", dm.tq, " tk=", dm.tk, " hq=", dm.hq, " hkv=", dm.hkv, " d=", dm.d,
                ": need tq, tk >= 0 and hq, hkv, d >= 1");
  core::require(dm.hq % dm.hkv == 0, kComponent, "hkv=", dm.hkv, " does not divide hq=", dm.hq);
  core::require(fast || dm.d <= kMaxGenericHeadDim, kComponent, "head dim d=", dm.d,
                ": the tensor-core path takes bf16 with d = 64 or 128, the generic one d <= ",
                kMaxGenericHeadDim);
  core::require(dm.hq <= 65535 && dm.hkv <= 65535, kComponent, "hq=", dm.hq,
                " above the grid's 65535");
  core::require(!mask.docs || (qt.doc && kt.doc), kComponent,
                "mask.docs is set but the tokens carry no document ids");
  core::require(!mask.block_mask || (mask.block_size > 0 && mask.num_blocks > 0), kComponent,
                "block mask with block_size=", mask.block_size, " num_blocks=", mask.num_blocks);
  core::require(mask.window >= 0, kComponent, "window=", mask.window, ": need >= 0");
  core::require((dm.tq == 0 || qt.pos) && (dm.tk == 0 || kt.pos), kComponent,
                "token positions missing (qt.pos or kt.pos is null)");
  const size_t need = attention_workspace_bytes(dm);
  core::require(workspace_bytes >= need && (need == 0 || workspace != nullptr), kComponent,
                "workspace of ", workspace_bytes, " bytes at ", workspace, ": need ", need);
  LONGSEQ_CHECK_MSG(reinterpret_cast<uintptr_t>(workspace) % alignof(TileSummary) == 0,
                    "attention workspace misaligned");
  AttnParams p{};
  p.q = q;
  p.k = k;
  p.v = v;
  p.qpos = qt.pos;
  p.kpos = kt.pos;
  p.qdoc = qt.doc;
  p.kdoc = kt.doc;
  p.block_mask = mask.block_mask;
  p.block_size = mask.block_size;
  p.num_blocks = mask.num_blocks;
  p.window = mask.window;
  p.causal = mask.causal ? 1 : 0;
  p.docs = mask.docs ? 1 : 0;
  p.tq = dm.tq;
  p.tk = dm.tk;
  p.hq = static_cast<int>(dm.hq);
  p.hkv = static_cast<int>(dm.hkv);
  p.d = static_cast<int>(dm.d);
  p.group = static_cast<int>(dm.hq / dm.hkv);
  p.scale = scale;
  p.nqt = static_cast<int>(tiles_of(dm.tq));
  p.nkt = static_cast<int>(tiles_of(dm.tk));
  auto* tiles = static_cast<TileSummary*>(workspace);
  p.qtiles = tiles;
  p.ktiles = tiles + p.nqt;
  summarize(qt.pos, qt.doc, dm.tq, mask.docs, tiles, s);
  summarize(kt.pos, kt.doc, dm.tk, mask.docs, tiles + p.nqt, s);
  return p;
}

template <class T>
void forward_impl(const T* q, const T* k, const T* v, const Tokens& qt, const Tokens& kt,
                  const Mask& mask, float scale, const AttnDims& dm, const core::Exec& exec,
                  void* ws, size_t ws_bytes, float* o, float* lse) {
  const cudaStream_t s = detail::stream(exec, "attention_block_forward");
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  // The tensor-core kernels move rows as 16-byte vectors and store float pairs: pointers that
  // are not so aligned (a view into the middle of a buffer) take the generic path instead.
  const bool fast = kBf16 && (dm.d == 64 || dm.d == 128) && aligned16(q) && aligned16(k) &&
                    aligned16(v) && aligned8(o);
  AttnParams p = prepare(q, k, v, qt, kt, mask, scale, dm, ws, ws_bytes, fast, s);
  if (dm.tq == 0) return;
  p.o = o;
  p.lse = lse;
  if (fast) {
    detail::mma_forward(p, s);
    return;
  }
  const dim3 grid(static_cast<unsigned>(p.nqt), static_cast<unsigned>(dm.hq));
  launch_generic(generic_forward_kernel<T>, grid, kTile * dm.d * sizeof(float), p, s);
}

template <class T>
void backward_impl(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                   const float* delta, const Tokens& qt, const Tokens& kt, const Mask& mask,
                   float scale, const AttnDims& dm, const core::Exec& exec, void* ws,
                   size_t ws_bytes, float* dq, float* dk, float* dv) {
  const cudaStream_t s = detail::stream(exec, "attention_block_backward");
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const bool fast = kBf16 && (dm.d == 64 || dm.d == 128) && aligned16(q) && aligned16(k) &&
                    aligned16(v) && aligned16(dout) && aligned8(dq) && aligned8(dk) && aligned8(dv);
  AttnParams p = prepare(q, k, v, qt, kt, mask, scale, dm, ws, ws_bytes, fast, s);
  if (dm.tq == 0 || dm.tk == 0) return;  // nothing to accumulate
  p.dout = dout;
  p.lse_in = lse;
  p.delta = delta;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  if (fast) {
    detail::mma_backward(p, s);
    return;
  }
  const size_t acc = kTile * dm.d * sizeof(float);
  launch_generic(generic_dkdv_kernel<T>,
                 dim3(static_cast<unsigned>(p.nkt), static_cast<unsigned>(dm.hkv)), 2 * acc, p, s);
  launch_generic(generic_dq_kernel<T>,
                 dim3(static_cast<unsigned>(p.nqt), static_cast<unsigned>(dm.hq)), acc, p, s);
}

template <class T>
void delta_impl(const T* dout, const float* o, int64_t t, int64_t h, int64_t d,
                const core::Exec& exec, float* delta) {
  const cudaStream_t s = detail::stream(exec, "attention_delta");
  core::require(t >= 0 && h >= 1 && d >= 1, kComponent, "attention_delta t=", t, " h=", h,
                " d=", d);
  const int64_t rows = t * h;
  if (rows == 0) return;
  constexpr int kWarps = 8;
  const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  delta_kernel<T><<<blocks, 32 * kWarps, 0, s>>>(dout, o, rows, static_cast<int>(d), delta);
  LONGSEQ_CUDA_LAUNCHED();
}

const __nv_bfloat16* dev(const core::bf16* p) {
  return reinterpret_cast<const __nv_bfloat16*>(p);
}

}  // namespace

size_t attention_workspace_bytes(const AttnDims& dims) {
  const int64_t n =
      tiles_of(std::max<int64_t>(dims.tq, 0)) + tiles_of(std::max<int64_t>(dims.tk, 0));
  return static_cast<size_t>(n) * sizeof(TileSummary);
}

bool attention_fast_path(core::DType input, int64_t d) {
  return input == core::DType::bf16 && (d == 64 || d == 128);
}

void attention_block_forward(const float* q, const float* k, const float* v, const Tokens& qt,
                             const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                             const core::Exec& exec, void* workspace, size_t workspace_bytes,
                             float* o, float* lse) {
  forward_impl(q, k, v, qt, kt, mask, scale, dims, exec, workspace, workspace_bytes, o, lse);
}

void attention_block_forward(const core::bf16* q, const core::bf16* k, const core::bf16* v,
                             const Tokens& qt, const Tokens& kt, const Mask& mask, float scale,
                             const AttnDims& dims, const core::Exec& exec, void* workspace,
                             size_t workspace_bytes, float* o, float* lse) {
  forward_impl(dev(q), dev(k), dev(v), qt, kt, mask, scale, dims, exec, workspace, workspace_bytes,
               o, lse);
}

void attention_delta(const float* dout, const float* o, int64_t t, int64_t h, int64_t d,
                     const core::Exec& exec, float* delta) {
  delta_impl(dout, o, t, h, d, exec, delta);
}

void attention_delta(const core::bf16* dout, const float* o, int64_t t, int64_t h, int64_t d,
                     const core::Exec& exec, float* delta) {
  delta_impl(dev(dout), o, t, h, d, exec, delta);
}

void attention_block_backward(const float* q, const float* k, const float* v, const float* dout,
                              const float* lse, const float* delta, const Tokens& qt,
                              const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                              const core::Exec& exec, void* workspace, size_t workspace_bytes,
                              float* dq, float* dk, float* dv) {
  backward_impl(q, k, v, dout, lse, delta, qt, kt, mask, scale, dims, exec, workspace,
                workspace_bytes, dq, dk, dv);
}

void attention_block_backward(const core::bf16* q, const core::bf16* k, const core::bf16* v,
                              const core::bf16* dout, const float* lse, const float* delta,
                              const Tokens& qt, const Tokens& kt, const Mask& mask, float scale,
                              const AttnDims& dims, const core::Exec& exec, void* workspace,
                              size_t workspace_bytes, float* dq, float* dk, float* dv) {
  backward_impl(dev(q), dev(k), dev(v), dev(dout), lse, delta, qt, kt, mask, scale, dims, exec,
                workspace, workspace_bytes, dq, dk, dv);
}

}  // namespace longseq::kernels::cuda
