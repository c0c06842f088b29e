// The tensor-core attention kernels (contracts in attention.hpp): bf16 inputs, D = 64 or 128,
// mma.sync.m16n8k16 (bf16 x bf16 -> fp32; sm_80 and later), FlashAttention-2's schedule.
//
// Layout of the work: 64-token tiles; a thread block owns NT of them (NT = 2: 8 warps, 128 rows,
// where such blocks fill the GPU; else NT = 1: 4 warps, 64 rows; chosen per launch), each warp 16
// of the block's rows (queries in the forward and dq passes, keys in the dk/dv pass), so softmax
// statistics and accumulators stay in the warp's registers. Tiles are staged in shared memory
// (row stride D + 8 elements = 16 bytes more than a row: the 8 row addresses of an ldmatrix
// matrix fall in 8 distinct 16-byte bank groups, conflict-free); fragments are read from it with
// ldmatrix (.trans for the operand read column-wise). Streamed tiles arrive by cp.async into two
// stages, the next tile's copy overlapping the current tile's products. No wgmma yet.
//
// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 and c = lane % 4:
//   A (16 x 16, row-major), 4 registers of 2 bf16: {A[g][2c..2c+1]}, {A[g+8][2c..]},
//     {A[g][2c+8..]}, {A[g+8][2c+8..]}
//   B (16 x 8, "col"), 2 registers: {B[2c..2c+1][g]}, {B[2c+8..2c+9][g]}
//   C (16 x 8 fp32), 4 floats: C[g][2c], C[g][2c+1], C[g+8][2c], C[g+8][2c+1]
// So a warp's C fragments of S (16 rows x 8 keys, two of them side by side) are, rounded to bf16,
// exactly its A fragment of P for P V (FlashAttention-2's register reuse), and likewise for the
// transposed products of the backward.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/attention.hpp"
#include "longseq/kernels/cuda/attention_common.cuh"
#include "longseq/kernels/cuda/launch.cuh"

namespace longseq::kernels::cuda::detail {

namespace {

using bf16_t = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats rounded to bf16 (round to nearest even), `lo` in the low half: the lower-indexed
// element of a fragment register.
__device__ __forceinline__ uint32_t pack_f(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 2^x by MUFU.EX2 with denormal results flushed to 0 (what exp2f adds beside the MUFU is their
// handling; they sit far below the resolution of P in bf16); exp2(-inf) = 0 as before.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Shared-memory address of a generic pointer into shared memory (ldmatrix / cp.async operand).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ldmatrix: each of the four 8 x 8 b16 matrices has its 8 row addresses (16 bytes each) given by
// lanes 8j..8j+7 (matrix j); register j of lane t then holds row t / 4, elements 2 (t % 4) and
// 2 (t % 4) + 1 of matrix j, or with .trans rows 2 (t % 4) and 2 (t % 4) + 1 of column t / 4:
// with g = t / 4, c = t % 4 exactly one fragment register of the layouts above.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Element offset of this lane's row address in a 16 x 16 block of a row-major tile for the A
// fragment and for the transposed-B pair below: lanes 0-7 rows 0-7 / columns 0-7 (matrix 0 ->
// a[0] = A[g][2c..]), lanes 8-15 rows 8-15 / columns 0-7 (a[1] = A[g+8][2c..]), lanes 16-23 rows
// 0-7 / columns 8-15 (a[2] = A[g][2c+8..]), lanes 24-31 rows 8-15 / columns 8-15 (a[3]).
template <int LD>
__device__ __forceinline__ int lane_off_a(int lane) {
  return (lane & 15) * LD + (lane >> 4) * 8;
}
// The same for load_b_t: lanes 0-7 rows 0-7 / columns 0-7 (b[0] of the first n-block), 8-15 rows
// 0-7 / columns 8-15 (its b[1]), 16-23 rows 8-15 / columns 0-7 and 24-31 rows 8-15 / columns
// 8-15 (b[0], b[1] of the second n-block).
template <int LD>
__device__ __forceinline__ int lane_off_bt(int lane) {
  return ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8;
}

// A fragment of rows [r0, r0 + 16) and columns [k0, k0 + 16) of a row-major shared tile; `s` is
// the tile's shared address plus 2 lane_off_a bytes.
template <int LD>
__device__ __forceinline__ void load_a(uint32_t s, int r0, int k0, uint32_t (&a)[4]) {
  ldsm_x4(a, s + 2u * static_cast<uint32_t>(r0 * LD + k0));
}

// B fragments of two adjacent n-blocks (n0 and n0 + 8) where B[kk][n] = tile[n0 + n][k0 + kk] (the
// product with a tile's transpose: S = Q K^T reads K this way): each 8 x 8 matrix is 8 rows of
// the tile, non-transposed. `s` includes 2 lane_off_bt bytes.
template <int LD>
__device__ __forceinline__ void load_b_t(uint32_t s, int n0, int k0, uint32_t (&b)[2][2]) {
  uint32_t r[4];
  ldsm_x4(r, s + 2u * static_cast<uint32_t>(n0 * LD + k0));
  b[0][0] = r[0];
  b[0][1] = r[1];
  b[1][0] = r[2];
  b[1][1] = r[3];
}

// B fragments of two adjacent n-blocks (n0 and n0 + 8) where B[kk][n] = tile[k0 + kk][n0 + n]
// (the product with the tile itself: P V reads V this way): .trans turns the 8 x 8 matrix at tile
// rows k0.., columns n0.. into {tile[k0 + 2c][n0 + g], tile[k0 + 2c + 1][n0 + g]} = b[0]. Lane
// addresses as lane_off_a: matrix 0 rows k0..+7 / columns n0..+7 (b[0] of n0), matrix 1 rows
// k0+8..+15 (b[1] of n0), matrices 2, 3 the same at columns n0+8.. (the second n-block). `s`
// includes 2 lane_off_a bytes.
template <int LD>
__device__ __forceinline__ void load_b(uint32_t s, int k0, int n0, uint32_t (&b)[2][2]) {
  uint32_t r[4];
  ldsm_x4_t(r, s + 2u * static_cast<uint32_t>(k0 * LD + n0));
  b[0][0] = r[0];
  b[0][1] = r[1];
  b[1][0] = r[2];
  b[1][1] = r[3];
}

// ---- asynchronous copies (cp.async, sm_80+) ------------------------------------------------
//
// The streamed tiles are double-buffered: while the warps compute on stage s, the copies of the
// next non-empty tile run into stage s ^ 1. One pattern in every kernel, per streamed tile:
//   cp.async.wait_group 0   this thread's copies (the current tile's, issued one step earlier)
//                           have landed;
//   __syncthreads           everyone's have, and everyone is done computing on the other stage
//                           (the previous tile), which is therefore free;
//   issue the next tile into the other stage, commit; compute on this stage.
// So one barrier per tile, and the copies of tile t + 1 overlap the products of tile t. Rows past
// the end of a tile are zero-filled by the copy itself (src-size 0), or, for metadata that must
// not be zero (pos -1, lse -inf), by plain stores, which the same barrier publishes.

// 16 bytes global -> shared; `in` false: nothing is read (src-size 0), the 16 bytes are zeros.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool in) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(in ? 16 : 0)
               : "memory");
}

// N (4 or 8) bytes global -> shared (.ca: .cg takes only 16).
template <int N>
__device__ __forceinline__ void cp_async_small(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_addr(dst)), "l"(src), "n"(N)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Copies rows [0, n) of a [*, stride] bf16 matrix (row i at base + i * stride, D values) into a
// shared tile of ROWS rows with row stride LD, zero-filling rows [n, ROWS); n >= 1, so row 0 is a
// valid (unread) source address for the zero-filled rows. 16-byte vectors: the caller checked the
// alignment. Asynchronous: visible after cp_async_wait_all and a barrier.
template <int D, int LD, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile_async(bf16_t* dst, const bf16_t* base, int64_t stride,
                                                int n) {
  constexpr int kVec = D / 8;  // 16-byte vectors per row
  static_assert(ROWS * kVec % THREADS == 0);
  const uint32_t d0 = smem_addr(dst);
#pragma unroll
  for (int j = 0; j < ROWS * kVec / THREADS; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * THREADS, r = i / kVec, cv = i % kVec;
    const bool in = r < n;
    cp_async16(d0 + 2u * static_cast<uint32_t>(r * LD + cv * 8),
               base + (in ? r : 0) * stride + cv * 8, in);
  }
}

// Positions (and doc ids) of tokens [t0, t0 + n) into shared memory, asynchronously; rows past n
// get pos -1 (invisible), doc 0.
template <int ROWS, int THREADS>
__device__ __forceinline__ void load_meta_async(const int64_t* pos, const int32_t* doc, int docs,
                                                int64_t t0, int n, int64_t* pos_s, int32_t* doc_s) {
  for (int i = static_cast<int>(threadIdx.x); i < ROWS; i += THREADS) {
    if (i < n) {
      cp_async_small<8>(pos_s + i, pos + t0 + i);
      if (docs)
        cp_async_small<4>(doc_s + i, doc + t0 + i);
      else
        doc_s[i] = 0;
    } else {
      pos_s[i] = -1;
      doc_s[i] = 0;
    }
  }
}

// The first index in [from, count) whose kind (in any of the NK rows of kinds) is not empty, or
// count.
template <int NK>
__device__ __forceinline__ int next_tile(const uint8_t (*kinds)[kClassChunk], int from, int count) {
  for (int i = from; i < count; ++i) {
    bool any = false;
#pragma unroll
    for (int r = 0; r < NK; ++r) any = any || kinds[r][i] != kEmpty;
    if (any) return i;
  }
  return count;
}

// Kinds of the block's own NT tiles (mine[0, n); q tiles if mine_is_q, else key tiles) against
// the other side's tiles [base, base + count): kinds[hf][i] for own tile hf and other tile
// base + i, empty for hf >= n (past the end). NT * kClassChunk threads, one pair each. The
// leading barrier: the previous chunk's kinds and stages are no longer read.
template <int NT>
__device__ __forceinline__ void classify_tiles(const AttnParams& p, bool mine_is_q,
                                               const TileSummary* mine, int n,
                                               const TileSummary* others, int base, int count,
                                               uint8_t (*kinds)[kClassChunk]) {
  __syncthreads();
  const int i = static_cast<int>(threadIdx.x) % kClassChunk;
  const int hf = static_cast<int>(threadIdx.x) / kClassChunk;
  if (i < count)
    kinds[hf][i] = hf >= n     ? kEmpty
                   : mine_is_q ? classify_dev(p, mine[hf], others[base + i])
                               : classify_dev(p, others[base + i], mine[hf]);
  __syncthreads();
}

template <int D>
__host__ __device__ constexpr int ld_of() {
  return D + 8;
}

// ---- forward ------------------------------------------------------------------------------

// NT = 2: 8 warps, 128 queries per block (q tiles 2 b and 2 b + 1; warps 0-3 own the first, 4-7
// the second), so each K/V tile in shared memory serves twice the queries of a 64-row block.
// Each q tile keeps its own tile kind (kinds[half]), exactly the 64 x 64 classification: a K/V
// tile is loaded when either half sees it, and a warp whose half does not skips the products.
// NT = 1: the one-q-tile block of 4 warps (same code; for grids too small to fill the GPU).
template <int D, int NT>
__global__ void __launch_bounds__(128 * NT) mma_forward_kernel(const AttnParams p) {
  constexpr int kFwdQTiles = NT, kFwdThreads = 128 * NT, kFwdRows = 64 * NT;
  static_assert(kFwdRows == kFwdQTiles * kTile && kFwdThreads == kFwdQTiles * kClassChunk);
  constexpr int LD = ld_of<D>();
  constexpr uint32_t kStageBytes = kTile * LD * sizeof(bf16_t);  // one K or V stage
  extern __shared__ __align__(16) unsigned char smem[];
  bf16_t* qs = reinterpret_cast<bf16_t*>(smem);  // kFwdRows x LD
  bf16_t* ks = qs + kFwdRows * LD;               // 2 stages of kTile x LD
  bf16_t* vs = ks + 2 * kTile * LD;              // 2 stages
  __shared__ int64_t qpos_s[kFwdRows], kpos_s[2][kTile];
  __shared__ int32_t qdoc_s[kFwdRows], kdoc_s[2][kTile];
  __shared__ uint8_t kinds[kFwdQTiles][kClassChunk];
  const bf16_t* q = static_cast<const bf16_t*>(p.q);
  const bf16_t* k = static_cast<const bf16_t*>(p.k);
  const bf16_t* v = static_cast<const bf16_t*>(p.v);
  // Query blocks in reverse launch order: under a causal mask the last ones see the most keys,
  // and starting them first leaves the short ones to fill the tail of the grid.
  const int qb = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int h = static_cast<int>(blockIdx.y), hk = h / p.group;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3, r0 = warp * 16, half = warp >> 2;
  const int64_t q0 = static_cast<int64_t>(qb) * kFwdRows;
  const int qn = p.tq - q0 < kFwdRows ? static_cast<int>(p.tq - q0) : kFwdRows;
  const int nq = min(kFwdQTiles, p.nqt - kFwdQTiles * qb);  // q tiles in this block
  const float sl2 = p.scale * kLog2e;
  const int64_t kv_stride = static_cast<int64_t>(p.hkv) * D;

  load_tile_async<D, LD, kFwdRows, kFwdThreads>(qs, q + (q0 * p.hq + h) * D,
                                                static_cast<int64_t>(p.hq) * D, qn);
  load_meta_async<kFwdRows, kFwdThreads>(p.qpos, p.qdoc, p.docs, q0, qn, qpos_s, qdoc_s);
  cp_async_commit();
  // K, V and metadata of key tile kt into stage st.
  auto issue = [&](int st, int kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * kTile;
    const int kn = detail::tile_len(p.tk - k0);
    load_tile_async<D, LD, kTile, kFwdThreads>(ks + st * kTile * LD, k + (k0 * p.hkv + hk) * D,
                                               kv_stride, kn);
    load_tile_async<D, LD, kTile, kFwdThreads>(vs + st * kTile * LD, v + (k0 * p.hkv + hk) * D,
                                               kv_stride, kn);
    load_meta_async<kTile, kFwdThreads>(p.kpos, p.kdoc, p.docs, k0, kn, kpos_s[st], kdoc_s[st]);
  };

  const uint32_t qs_a = smem_addr(qs) + 2 * lane_off_a<LD>(lane);
  const uint32_t ks_bt0 = smem_addr(ks) + 2 * lane_off_bt<LD>(lane);
  const uint32_t vs_a0 = smem_addr(vs) + 2 * lane_off_a<LD>(lane);
  uint32_t qa[D / 16][4];
  bool have_q = false;  // qa is read from qs once, after the first wait (the Q copy has landed)

  float oacc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // log2 domain; l thread-partial
  const int rows[2] = {r0 + g, r0 + g + 8};

  int stage = 0;
  for (int base = 0; base < p.nkt; base += kClassChunk) {
    const int count = min(kClassChunk, p.nkt - base);
    classify_tiles<kFwdQTiles>(p, true, p.qtiles + kFwdQTiles * qb, nq, p.ktiles, base, count,
                               kinds);
    int t = next_tile<kFwdQTiles>(kinds, 0, count);
    if (t < count) issue(stage, base + t);
    cp_async_commit();
    while (t < count) {
      cp_async_wait_all();  // tile t (and, the first time, Q) has landed
      __syncthreads();      // for every thread; nobody reads stage ^ 1 (tile t - 1) any more
      const int tn = next_tile<kFwdQTiles>(kinds, t + 1, count);
      if (tn < count) issue(stage ^ 1, base + tn);
      cp_async_commit();
      if (!have_q) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) load_a<LD>(qs_a, r0, kk * 16, qa[kk]);
        have_q = true;
      }
      const uint8_t kind = kinds[half][t];
      if (kind != kEmpty) {  // warp-uniform
        const int kn = detail::tile_len(p.tk - static_cast<int64_t>(base + t) * kTile);
        const uint32_t ks_bt = ks_bt0 + stage * kStageBytes, vs_a = vs_a0 + stage * kStageBytes;
        const int64_t* kpos = kpos_s[stage];
        const int32_t* kdoc = kdoc_s[stage];
        float s[kTile / 8][4];
#pragma unroll
        for (int j = 0; j < kTile / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int jp = 0; jp < kTile / 16; ++jp)
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t b[2][2];
            load_b_t<LD>(ks_bt, jp * 16, kk * 16, b);
            mma16816(s[2 * jp], qa[kk], b[0]);
            mma16816(s[2 * jp + 1], qa[kk], b[1]);
          }
        // Scale into the log2 domain; mask. Full tiles skip the predicate, but a ragged last key
        // tile still cuts its columns past kn.
        // (Two loops, so that the common full, whole tile is a bare multiply per element.)
        const bool per_element = kind != kFull;
        const bool ragged = kn < kTile;
        if (!per_element && !ragged) {
#pragma unroll
          for (int j = 0; j < kTile / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] *= sl2;
        } else {
#pragma unroll
          for (int j = 0; j < kTile / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int col = j * 8 + 2 * c + (e & 1), row = rows[e >> 1];
              float x = s[j][e] * sl2;
              if ((ragged && col >= kn) ||
                  (per_element && !visible_dev(p, qpos_s[row], kpos[col], qdoc_s[row], kdoc[col])))
                x = -INFINITY;
              s[j][e] = x;
            }
        }
        // Online softmax, one rescale per tile. A row's 64 scores sit in the 4 lanes of its
        // quad.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = -INFINITY;
#pragma unroll
          for (int j = 0; j < kTile / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m[r], mx);
          // A row that has seen nothing yet keeps m = -inf: subtract 0 instead (exp2(-inf) = 0),
          // never -inf - -inf = NaN.
          const float m_use = m_new == -INFINITY ? 0.0f : m_new;
          const float alpha = exp2_ftz(m[r] - m_use);
          m[r] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int j = 0; j < kTile / 8; ++j) {
            s[j][2 * r] = exp2_ftz(s[j][2 * r] - m_use);
            s[j][2 * r + 1] = exp2_ftz(s[j][2 * r + 1] - m_use);
            sum += s[j][2 * r] + s[j][2 * r + 1];
          }
          l[r] = l[r] * alpha + sum;
#pragma unroll
          for (int i = 0; i < D / 8; ++i) {
            oacc[i][2 * r] *= alpha;
            oacc[i][2 * r + 1] *= alpha;
          }
        }
        // O += P V, P's C fragments reused as A fragments (rounded to bf16).
#pragma unroll
        for (int kc = 0; kc < kTile / 16; ++kc) {
          const uint32_t a[4] = {pack_f(s[2 * kc][0], s[2 * kc][1]),
                                 pack_f(s[2 * kc][2], s[2 * kc][3]),
                                 pack_f(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                 pack_f(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
          for (int ip = 0; ip < D / 16; ++ip) {
            uint32_t b[2][2];
            load_b<LD>(vs_a, kc * 16, ip * 16, b);
            mma16816(oacc[2 * ip], a, b[0]);
            mma16816(oacc[2 * ip + 1], a, b[1]);
          }
        }
      }
      stage ^= 1;
      t = tn;
    }
  }
  cp_async_wait_all();  // no copy outlives the block (Q's, when no tile was visible)
  // Finish: the quad's partial sums, then o = acc / l, lse = (m + log2 l) ln 2.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float lt = l[r];
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    const int64_t qi = q0 + rows[r];
    if (rows[r] >= qn) continue;
    const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
    float* o = p.o + (qi * p.hq + h) * D;
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
      *reinterpret_cast<float2*>(o + i * 8 + 2 * c) =
          make_float2(oacc[i][2 * r] * inv, oacc[i][2 * r + 1] * inv);
    if (c == 0)
      p.lse[qi * p.hq + h] = lt > 0.0f ? (m[r] + log2f(lt)) * 0.6931471805599453f : -INFINITY;
  }
}

// ---- backward: dk, dv ---------------------------------------------------------------------

// Block (NT key tiles, kv head); each warp owns 16 keys (with NT = 2 warps 0-3 the first key
// tile, 4-7 the second, each half with its own tile kinds as in the forward) and computes the
// transposed products S^T = K Q^T and dP^T = V dO^T, so that P^T and dS^T come out as A fragments
// of dV += P^T dO and dK += dS^T Q. Steps: query tiles in order, within each the heads of the group
// in order; each step's Q, dO, positions, lse and delta are streamed (double-buffered) and shared
// by all the block's warps.
// NT (1 or 2) key tiles per block, 4 NT warps.
template <int D, int NT>
__global__ void __launch_bounds__(128 * NT) mma_dkdv_kernel(const AttnParams p) {
  constexpr int kDkdvKTiles = NT, kDkdvThreads = 128 * NT, kDkdvRows = 64 * NT;
  static_assert(kDkdvRows == kDkdvKTiles * kTile && kDkdvThreads == kDkdvKTiles * kClassChunk);
  constexpr int LD = ld_of<D>();
  constexpr int kHalf = kTile / 2;  // queries per inner step (keeps S^T and dP^T at 16 floats)
  constexpr uint32_t kStageBytes = kTile * LD * sizeof(bf16_t);
  extern __shared__ __align__(16) unsigned char smem[];
  bf16_t* ks = reinterpret_cast<bf16_t*>(smem);  // kDkdvRows x LD
  bf16_t* vs = ks + kDkdvRows * LD;              // kDkdvRows x LD
  bf16_t* qs = vs + kDkdvRows * LD;              // 2 stages of kTile x LD
  bf16_t* dos = qs + 2 * kTile * LD;             // 2 stages
  __shared__ int64_t qpos_s[2][kTile], kpos_s[kDkdvRows];
  __shared__ int32_t qdoc_s[2][kTile], kdoc_s[kDkdvRows];
  __shared__ float lse_s[2][kTile], delta_s[2][kTile];
  __shared__ uint8_t kinds[kDkdvKTiles][kClassChunk];
  const bf16_t* q = static_cast<const bf16_t*>(p.q);
  const bf16_t* k = static_cast<const bf16_t*>(p.k);
  const bf16_t* v = static_cast<const bf16_t*>(p.v);
  const bf16_t* dout = static_cast<const bf16_t*>(p.dout);
  const int kb = static_cast<int>(blockIdx.x), hk = static_cast<int>(blockIdx.y);
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, c = lane & 3, r0 = warp * 16, own = warp >> 2;  // own: key tile
  const int64_t k0 = static_cast<int64_t>(kb) * kDkdvRows;
  const int kn = p.tk - k0 < kDkdvRows ? static_cast<int>(p.tk - k0) : kDkdvRows;
  const int nk = min(kDkdvKTiles, p.nkt - kDkdvKTiles * kb);  // key tiles in this block
  const float sl2 = p.scale * kLog2e;
  const int rows[2] = {r0 + g, r0 + g + 8};  // key rows of this thread
  const int64_t q_stride = static_cast<int64_t>(p.hq) * D;

  load_tile_async<D, LD, kDkdvRows, kDkdvThreads>(ks, k + (k0 * p.hkv + hk) * D,
                                                  static_cast<int64_t>(p.hkv) * D, kn);
  load_tile_async<D, LD, kDkdvRows, kDkdvThreads>(vs, v + (k0 * p.hkv + hk) * D,
                                                  static_cast<int64_t>(p.hkv) * D, kn);
  load_meta_async<kDkdvRows, kDkdvThreads>(p.kpos, p.kdoc, p.docs, k0, kn, kpos_s, kdoc_s);
  cp_async_commit();
  // Q, dO, positions, lse, delta of query tile qt, head h into stage st. lse = -inf for rows
  // past qn (and for rows that saw nothing): P = 0 below.
  auto issue = [&](int st, int qt, int h) {
    const int64_t q0 = static_cast<int64_t>(qt) * kTile;
    const int qn = detail::tile_len(p.tq - q0);
    load_tile_async<D, LD, kTile, kDkdvThreads>(qs + st * kTile * LD, q + (q0 * p.hq + h) * D,
                                                q_stride, qn);
    load_tile_async<D, LD, kTile, kDkdvThreads>(dos + st * kTile * LD, dout + (q0 * p.hq + h) * D,
                                                q_stride, qn);
    load_meta_async<kTile, kDkdvThreads>(p.qpos, p.qdoc, p.docs, q0, qn, qpos_s[st], qdoc_s[st]);
    for (int i = static_cast<int>(threadIdx.x); i < kTile; i += kDkdvThreads) {
      if (i < qn) {
        cp_async_small<4>(&lse_s[st][i], p.lse_in + (q0 + i) * p.hq + h);
        cp_async_small<4>(&delta_s[st][i], p.delta + (q0 + i) * p.hq + h);
      } else {
        lse_s[st][i] = -INFINITY;
        delta_s[st][i] = 0.0f;
      }
    }
  };
  const uint32_t ks_a = smem_addr(ks) + 2 * lane_off_a<LD>(lane);
  const uint32_t vs_a = smem_addr(vs) + 2 * lane_off_a<LD>(lane);
  const uint32_t qs_a0 = smem_addr(qs) + 2 * lane_off_a<LD>(lane);
  const uint32_t qs_bt0 = smem_addr(qs) + 2 * lane_off_bt<LD>(lane);
  const uint32_t dos_a0 = smem_addr(dos) + 2 * lane_off_a<LD>(lane);
  const uint32_t dos_bt0 = smem_addr(dos) + 2 * lane_off_bt<LD>(lane);

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.0f;

  int stage = 0;
  for (int base = 0; base < p.nqt; base += kClassChunk) {
    const int count = min(kClassChunk, p.nqt - base);
    classify_tiles<kDkdvKTiles>(p, false, p.ktiles + kDkdvKTiles * kb, nk, p.qtiles, base, count,
                                kinds);
    int t = next_tile<kDkdvKTiles>(kinds, 0, count), gi = 0;
    if (t < count) issue(stage, base + t, hk * p.group);
    cp_async_commit();
    while (t < count) {
      cp_async_wait_all();  // step (t, gi) (and, the first time, K, V) has landed
      __syncthreads();      // for every thread; nobody reads stage ^ 1 (the previous step) any more
      // The next step: the next head of the group, else the next non-empty query tile's first.
      int tn = t, gn = gi + 1;
      if (gn == p.group) {
        gn = 0;
        tn = next_tile<kDkdvKTiles>(kinds, t + 1, count);
      }
      if (tn < count) issue(stage ^ 1, base + tn, hk * p.group + gn);
      cp_async_commit();

      const uint8_t kind = kinds[own][t];
      if (kind != kEmpty) {  // warp-uniform; else this warp's key tile does not see the step
        const uint32_t qs_a = qs_a0 + stage * kStageBytes, qs_bt = qs_bt0 + stage * kStageBytes;
        const uint32_t dos_a = dos_a0 + stage * kStageBytes, dos_bt = dos_bt0 + stage * kStageBytes;
        const int64_t* qpos = qpos_s[stage];
        const int32_t* qdoc = qdoc_s[stage];
        const float* lse = lse_s[stage];
        const float* dlt = delta_s[stage];
        // Not unrolled at D = 128: dk, dv hold 128 registers, and both halves unrolled spill.
#pragma unroll(D == 128 ? 1 : 2)
        for (int half = 0; half < 2; ++half) {
          float st[kHalf / 8][4], dpt[kHalf / 8][4];
#pragma unroll
          for (int j = 0; j < kHalf / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) st[j][e] = dpt[j][e] = 0.0f;
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t ka[4], va[4];
            load_a<LD>(ks_a, r0, kk * 16, ka);
            load_a<LD>(vs_a, r0, kk * 16, va);
#pragma unroll
            for (int jp = 0; jp < kHalf / 16; ++jp) {
              uint32_t b[2][2];
              load_b_t<LD>(qs_bt, half * kHalf + jp * 16, kk * 16, b);
              mma16816(st[2 * jp], ka, b[0]);
              mma16816(st[2 * jp + 1], ka, b[1]);
              load_b_t<LD>(dos_bt, half * kHalf + jp * 16, kk * 16, b);
              mma16816(dpt[2 * jp], va, b[0]);
              mma16816(dpt[2 * jp + 1], va, b[1]);
            }
          }
          // P^T and dS^T = P^T (dP^T - delta), element (key rows[e/2], query col); lse in the
          // log2 domain (-inf stays -inf).
          // (The per-element predicate in a loop of its own for partial tiles, so that full
          // ones carry no branch per element.)
          auto dst = [&](int j, int e, bool vis) {
            const int col = half * kHalf + j * 8 + 2 * c + (e & 1);
            const float lse2 = lse[col] * kLog2e;
            vis = vis && lse2 != -INFINITY && rows[e >> 1] < kn;
            const float pr = vis ? exp2_ftz(st[j][e] * sl2 - lse2) : 0.0f;
            st[j][e] = pr;
            dpt[j][e] = pr * (dpt[j][e] - dlt[col]);
          };
          if (kind == kFull) {
#pragma unroll
            for (int j = 0; j < kHalf / 8; ++j)
#pragma unroll
              for (int e = 0; e < 4; ++e) dst(j, e, true);
          } else {
#pragma unroll
            for (int j = 0; j < kHalf / 8; ++j)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int col = half * kHalf + j * 8 + 2 * c + (e & 1), row = rows[e >> 1];
                dst(j, e, visible_dev(p, qpos[col], kpos_s[row], qdoc[col], kdoc_s[row]));
              }
          }
          // dV += P^T dO, dK += dS^T Q (k dimension: this half's 32 queries).
#pragma unroll
          for (int kc = 0; kc < kHalf / 16; ++kc) {
            const uint32_t pa[4] = {pack_f(st[2 * kc][0], st[2 * kc][1]),
                                    pack_f(st[2 * kc][2], st[2 * kc][3]),
                                    pack_f(st[2 * kc + 1][0], st[2 * kc + 1][1]),
                                    pack_f(st[2 * kc + 1][2], st[2 * kc + 1][3])};
            const uint32_t da[4] = {pack_f(dpt[2 * kc][0], dpt[2 * kc][1]),
                                    pack_f(dpt[2 * kc][2], dpt[2 * kc][3]),
                                    pack_f(dpt[2 * kc + 1][0], dpt[2 * kc + 1][1]),
                                    pack_f(dpt[2 * kc + 1][2], dpt[2 * kc + 1][3])};
#pragma unroll
            for (int ip = 0; ip < D / 16; ++ip) {
              uint32_t b[2][2];
              load_b<LD>(dos_a, half * kHalf + kc * 16, ip * 16, b);
              mma16816(dv[2 * ip], pa, b[0]);
              mma16816(dv[2 * ip + 1], pa, b[1]);
              load_b<LD>(qs_a, half * kHalf + kc * 16, ip * 16, b);
              mma16816(dk[2 * ip], da, b[0]);
              mma16816(dk[2 * ip + 1], da, b[1]);
            }
          }
        }
      }
      stage ^= 1;
      t = tn;
      gi = gn;
    }
  }
  cp_async_wait_all();  // no copy outlives the block (K, V's, when no query tile was visible)
  // Accumulate into dk, dv: each element has exactly this one writer.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= kn) continue;
    const int64_t off = ((k0 + rows[r]) * p.hkv + hk) * D;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      float2* pk = reinterpret_cast<float2*>(p.dk + off + i * 8 + 2 * c);
      float2* pv = reinterpret_cast<float2*>(p.dv + off + i * 8 + 2 * c);
      float2 a = *pk, b = *pv;
      a.x += dk[i][2 * r] * p.scale;
      a.y += dk[i][2 * r + 1] * p.scale;
      b.x += dv[i][2 * r];
      b.y += dv[i][2 * r + 1];
      *pk = a;
      *pv = b;
    }
  }
}

// ---- backward: dq -------------------------------------------------------------------------

// Block (NT query tiles, query head); each warp owns 16 queries (with NT = 2 warps 0-3 the
// first tile, 4-7 the second, each with its own tile kinds as in the forward): S = Q K^T and
// dP = dO V^T as in the forward, dS = P (dP - delta) reused as the A fragment of dQ += dS K. Key
// tiles in order, streamed (double-buffered) as in the forward.
// NT (1 or 2) query tiles per block, 4 NT warps.
template <int D, int NT>
__global__ void __launch_bounds__(128 * NT) mma_dq_kernel(const AttnParams p) {
  constexpr int kDqQTiles = NT, kDqThreads = 128 * NT, kDqRows = 64 * NT;
  static_assert(kDqRows == kDqQTiles * kTile && kDqThreads == kDqQTiles * kClassChunk);
  constexpr int LD = ld_of<D>();
  constexpr uint32_t kStageBytes = kTile * LD * sizeof(bf16_t);
  extern __shared__ __align__(16) unsigned char smem[];
  bf16_t* qs = reinterpret_cast<bf16_t*>(smem);  // kDqRows x LD
  bf16_t* dos = qs + kDqRows * LD;               // kDqRows x LD
  bf16_t* ks = dos + kDqRows * LD;               // 2 stages of kTile x LD
  bf16_t* vs = ks + 2 * kTile * LD;              // 2 stages
  __shared__ int64_t qpos_s[kDqRows], kpos_s[2][kTile];
  __shared__ int32_t qdoc_s[kDqRows], kdoc_s[2][kTile];
  __shared__ uint8_t kinds[kDqQTiles][kClassChunk];
  const bf16_t* q = static_cast<const bf16_t*>(p.q);
  const bf16_t* k = static_cast<const bf16_t*>(p.k);
  const bf16_t* v = static_cast<const bf16_t*>(p.v);
  const bf16_t* dout = static_cast<const bf16_t*>(p.dout);
  // Query blocks in reverse launch order: under a causal mask the last ones see the most keys,
  // and starting them first leaves the short ones to fill the tail of the grid.
  const int qb = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int h = static_cast<int>(blockIdx.y), hk = h / p.group;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, c = lane & 3, r0 = warp * 16, own = warp >> 2;  // own: q tile
  const int64_t q0 = static_cast<int64_t>(qb) * kDqRows;
  const int qn = p.tq - q0 < kDqRows ? static_cast<int>(p.tq - q0) : kDqRows;
  const int nq = min(kDqQTiles, p.nqt - kDqQTiles * qb);  // q tiles in this block
  const float sl2 = p.scale * kLog2e;
  const int rows[2] = {r0 + g, r0 + g + 8};
  const int64_t kv_stride = static_cast<int64_t>(p.hkv) * D;

  load_tile_async<D, LD, kDqRows, kDqThreads>(qs, q + (q0 * p.hq + h) * D,
                                              static_cast<int64_t>(p.hq) * D, qn);
  load_tile_async<D, LD, kDqRows, kDqThreads>(dos, dout + (q0 * p.hq + h) * D,
                                              static_cast<int64_t>(p.hq) * D, qn);
  load_meta_async<kDqRows, kDqThreads>(p.qpos, p.qdoc, p.docs, q0, qn, qpos_s, qdoc_s);
  cp_async_commit();
  // K, V and metadata of key tile kt into stage st.
  auto issue = [&](int st, int kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * kTile;
    const int kn = detail::tile_len(p.tk - k0);
    load_tile_async<D, LD, kTile, kDqThreads>(ks + st * kTile * LD, k + (k0 * p.hkv + hk) * D,
                                              kv_stride, kn);
    load_tile_async<D, LD, kTile, kDqThreads>(vs + st * kTile * LD, v + (k0 * p.hkv + hk) * D,
                                              kv_stride, kn);
    load_meta_async<kTile, kDqThreads>(p.kpos, p.kdoc, p.docs, k0, kn, kpos_s[st], kdoc_s[st]);
  };
  float lse2[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool in = rows[r] < qn;
    lse2[r] = in ? p.lse_in[(q0 + rows[r]) * p.hq + h] * kLog2e : -INFINITY;
    delta[r] = in ? p.delta[(q0 + rows[r]) * p.hq + h] : 0.0f;
  }
  const uint32_t qs_a = smem_addr(qs) + 2 * lane_off_a<LD>(lane);
  const uint32_t dos_a = smem_addr(dos) + 2 * lane_off_a<LD>(lane);
  const uint32_t ks_a0 = smem_addr(ks) + 2 * lane_off_a<LD>(lane);
  const uint32_t ks_bt0 = smem_addr(ks) + 2 * lane_off_bt<LD>(lane);
  const uint32_t vs_bt0 = smem_addr(vs) + 2 * lane_off_bt<LD>(lane);
  float dq[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;

  int stage = 0;
  for (int base = 0; base < p.nkt; base += kClassChunk) {
    const int count = min(kClassChunk, p.nkt - base);
    classify_tiles<kDqQTiles>(p, true, p.qtiles + kDqQTiles * qb, nq, p.ktiles, base, count, kinds);
    int t = next_tile<kDqQTiles>(kinds, 0, count);
    if (t < count) issue(stage, base + t);
    cp_async_commit();
    while (t < count) {
      cp_async_wait_all();  // tile t (and, the first time, Q, dO) has landed
      __syncthreads();      // for every thread; nobody reads stage ^ 1 (tile t - 1) any more
      const int tn = next_tile<kDqQTiles>(kinds, t + 1, count);
      if (tn < count) issue(stage ^ 1, base + tn);
      cp_async_commit();

      const uint8_t kind = kinds[own][t];
      if (kind != kEmpty) {  // warp-uniform; else this warp's q tile does not see the tile
        const int kn = detail::tile_len(p.tk - static_cast<int64_t>(base + t) * kTile);
        const uint32_t ks_a = ks_a0 + stage * kStageBytes, ks_bt = ks_bt0 + stage * kStageBytes;
        const uint32_t vs_bt = vs_bt0 + stage * kStageBytes;
        const int64_t* kpos = kpos_s[stage];
        const int32_t* kdoc = kdoc_s[stage];
        float s[kTile / 8][4], dp[kTile / 8][4];
#pragma unroll
        for (int j = 0; j < kTile / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          uint32_t qa[4], da[4];
          load_a<LD>(qs_a, r0, kk * 16, qa);
          load_a<LD>(dos_a, r0, kk * 16, da);
#pragma unroll
          for (int jp = 0; jp < kTile / 16; ++jp) {
            uint32_t b[2][2];
            load_b_t<LD>(ks_bt, jp * 16, kk * 16, b);
            mma16816(s[2 * jp], qa, b[0]);
            mma16816(s[2 * jp + 1], qa, b[1]);
            load_b_t<LD>(vs_bt, jp * 16, kk * 16, b);
            mma16816(dp[2 * jp], da, b[0]);
            mma16816(dp[2 * jp + 1], da, b[1]);
          }
        }
        // (The per-element predicate in a loop of its own for partial tiles, as in dk/dv.)
        auto ds = [&](int j, int e, bool vis) {
          const int col = j * 8 + 2 * c + (e & 1), r = e >> 1;
          vis = vis && lse2[r] != -INFINITY && col < kn;
          const float pr = vis ? exp2_ftz(s[j][e] * sl2 - lse2[r]) : 0.0f;
          dp[j][e] = pr * (dp[j][e] - delta[r]);
        };
        if (kind == kFull) {
#pragma unroll
          for (int j = 0; j < kTile / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) ds(j, e, true);
        } else {
#pragma unroll
          for (int j = 0; j < kTile / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int col = j * 8 + 2 * c + (e & 1), row = rows[e >> 1];
              ds(j, e, visible_dev(p, qpos_s[row], kpos[col], qdoc_s[row], kdoc[col]));
            }
        }
#pragma unroll
        for (int kc = 0; kc < kTile / 16; ++kc) {
          const uint32_t a[4] = {pack_f(dp[2 * kc][0], dp[2 * kc][1]),
                                 pack_f(dp[2 * kc][2], dp[2 * kc][3]),
                                 pack_f(dp[2 * kc + 1][0], dp[2 * kc + 1][1]),
                                 pack_f(dp[2 * kc + 1][2], dp[2 * kc + 1][3])};
#pragma unroll
          for (int ip = 0; ip < D / 16; ++ip) {
            uint32_t b[2][2];
            load_b<LD>(ks_a, kc * 16, ip * 16, b);
            mma16816(dq[2 * ip], a, b[0]);
            mma16816(dq[2 * ip + 1], a, b[1]);
          }
        }
      }
      stage ^= 1;
      t = tn;
    }
  }
  cp_async_wait_all();  // no copy outlives the block (Q, dO's, when no key tile was visible)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= qn) continue;
    const int64_t off = ((q0 + rows[r]) * p.hq + h) * D;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      float2* pq = reinterpret_cast<float2*>(p.dq + off + i * 8 + 2 * c);
      float2 a = *pq;
      a.x += dq[i][2 * r] * p.scale;
      a.y += dq[i][2 * r + 1] * p.scale;
      *pq = a;
    }
  }
}

template <class Kernel>
void launch(Kernel kernel, dim3 grid, int threads, size_t smem, const AttnParams& p,
            cudaStream_t s) {
  // Above 48 KiB of dynamic shared memory a kernel must opt in (per kernel, cheap to repeat).
  LONGSEQ_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
  kernel<<<grid, threads, smem, s>>>(p);
  LONGSEQ_CUDA_LAUNCHED();
}

// Bytes of n tiles of kTile rows (D + 8 elements each).
template <int D>
size_t tiles_bytes(int n) {
  return static_cast<size_t>(n) * kTile * ld_of<D>() * sizeof(bf16_t);
}

// set_attention_block_tiles: 0 = chosen per launch, else forced to 1 or 2.
std::atomic<int> g_block_tiles{0};

// Whether to launch blocks of two tiles (8 warps; NT = 2): where they fill the GPU. Their
// registers allow one per SM, so with fewer such blocks than SMs, blocks of one tile (4 warps,
// two per SM) spread the same work over twice as many SMs. Either gives the same bits: each
// warp's arithmetic, tile order and skips are the same.
bool two_tile_blocks(int64_t blocks_of_two) {
  if (const int forced = g_block_tiles.load(std::memory_order_relaxed)) return forced == 2;
  int dev = 0, sms = 0;
  LONGSEQ_CUDA_CALL(cudaGetDevice(&dev));
  LONGSEQ_CUDA_CALL(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return blocks_of_two >= sms;
}

// One block per NT q tiles (the last one may hold fewer), 128 NT threads; shared memory: Q
// (NT tiles) and two stages of K and V (4 tiles), 102 KiB at D = 128 and NT = 2.
template <int D, int NT>
void forward_nt(const AttnParams& p, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((p.nqt + NT - 1) / NT), static_cast<unsigned>(p.hq));
  launch(mma_forward_kernel<D, NT>, grid, 128 * NT, tiles_bytes<D>(NT + 4), p, s);
}

// Shared memory of the backward kernels: the block's own two matrices (K, V or Q, dO) of NT
// tiles each and two stages of the two streamed ones (4 tiles): 136 KiB at D = 128 and NT = 2.
template <int D, int NT>
void dkdv_nt(const AttnParams& p, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((p.nkt + NT - 1) / NT), static_cast<unsigned>(p.hkv));
  launch(mma_dkdv_kernel<D, NT>, grid, 128 * NT, tiles_bytes<D>(2 * NT + 4), p, s);
}

template <int D, int NT>
void dq_nt(const AttnParams& p, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((p.nqt + NT - 1) / NT), static_cast<unsigned>(p.hq));
  launch(mma_dq_kernel<D, NT>, grid, 128 * NT, tiles_bytes<D>(2 * NT + 4), p, s);
}

// dk/dv first, then dq: both only read q, k, v, dout, lse and delta, and write disjoint outputs,
// so the order is free; fixed for the bits.
template <int D>
void backward_d(const AttnParams& p, cudaStream_t s) {
  if (two_tile_blocks((p.nkt + 1) / 2 * static_cast<int64_t>(p.hkv)))
    dkdv_nt<D, 2>(p, s);
  else
    dkdv_nt<D, 1>(p, s);
  if (two_tile_blocks((p.nqt + 1) / 2 * static_cast<int64_t>(p.hq)))
    dq_nt<D, 2>(p, s);
  else
    dq_nt<D, 1>(p, s);
}

template <int D>
void forward_d(const AttnParams& p, cudaStream_t s) {
  if (two_tile_blocks((p.nqt + 1) / 2 * static_cast<int64_t>(p.hq)))
    forward_nt<D, 2>(p, s);
  else
    forward_nt<D, 1>(p, s);
}

}  // namespace

void mma_forward(const AttnParams& p, cudaStream_t s) {
  if (p.d == 64)
    forward_d<64>(p, s);
  else
    forward_d<128>(p, s);
}

void mma_backward(const AttnParams& p, cudaStream_t s) {
  if (p.d == 64)
    backward_d<64>(p, s);
  else
    backward_d<128>(p, s);
}

}  // namespace longseq::kernels::cuda::detail

namespace longseq::kernels::cuda {

int set_attention_block_tiles(int tiles) {
  core::require(tiles >= 0 && tiles <= 2, "kernels.cuda.attention", "block tiles ", tiles,
                ": need 0 (chosen per launch), 1 or 2");
  return detail::g_block_tiles.exchange(tiles);
}

}  // namespace longseq::kernels::cuda
