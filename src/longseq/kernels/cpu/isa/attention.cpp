// The attention block kernels' bodies (contracts in kernels/cpu/attention.hpp, which checks the
// arguments and calls the active variant's table; kernels/cpu/dispatch.hpp). Compiled once per
// kernel variant (LONGSEQ_ISA_NS); the row loops come from rows.hpp.
//
// Forward, per work item (query head h, query tile i), keys in tiles j = 0, 1, ...:
//   S   = (scale * log2 e) Q_i K_j^T                      GEMM [Bq, Bk], log2 domain
//   S  += mask (partial tiles only; empty tiles skipped; contiguous band tiles trimmed)
//   m'  = max(m, rowmax S);  P = 2^(S - m');  c = 2^(m - m')
//   l   = c l + rowsum P;    O_i = c O_i + P V_j          GEMM [Bq, D], dense accumulator
// then o = O_i / l and lse = ln 2 (m + log2 l). Scratch: per thread one [Bq, Bk] tile, O_i and
// dense copies of the Q, K, V tiles (see dense_tile).
//
// Backward, per work unit (kv head, chunk c of key tiles), for each key tile j of the chunk, each
// query head of the group and each query tile i (all fixed orders):
//   P    = 2^((scale log2 e) Q_i K_j^T + mask - log2 e * lse_i)
//   dV_j += P^T dO_i;  dP = dO_i V_j^T;  dS = P (dP - delta_i)
//   dK_j += scale dS^T Q_i;  dQ_i += scale dS K_j
// dK_j, dV_j belong to one unit (dense accumulators, added to dk, dv once per key tile); dQ_i is
// shared by the C chunks, hence the per-chunk head-major dq buffers reduced in a fixed order
// (attention_backward_chunks), which keeps the bits independent of the thread count.
#include "longseq/kernels/cpu/attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "longseq/kernels/cpu/dispatch.hpp"
#include "longseq/kernels/cpu/isa/rows.hpp"
#include "longseq/kernels/cpu/tiles.hpp"
#include "longseq/kernels/gemm.hpp"

namespace longseq::kernels::cpu::LONGSEQ_ISA_NS {

namespace {

using core::bf16;
using detail::kLn2;
using detail::kLog2e;
using detail::kNegInf;
using detail::TileKind;

// Per-thread scratch slices are rounded to 64 bytes so that each tile buffer has the same
// alignment whichever thread runs a work item (alignment must not be able to change any bits).
constexpr size_t kAlignFloats = 16;
size_t round_up(size_t n) {
  return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}

int clamp_threads(int threads, int64_t items) {
  return static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, items)));
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Overloads so that one template serves both input types.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_f32_tile(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
// (Unused in the variants that widen bf16 tiles themselves.)
[[maybe_unused]] void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                           const bf16* a, int64_t lda, const bf16* b, int64_t ldb, float beta,
                           float* c, int64_t ldc) {
  gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// ---- tiles -------------------------------------------------------------------------------------

template <class T>
constexpr bool kIsBf16 = std::is_same_v<T, bf16>;

// bf16 below avx512_bf16 (emulated, design.md §10): the inputs are widened once, as the kernel
// copies its tiles dense, and P and dS are rounded to bf16 values but kept in fp32, so every
// product is an f32 GEMM on exactly the values a bf16 product would see, with none of
// gemm_bf16's per-call widening (which cost 10-15% at D = 64 on AVX2). Tile is the type of the
// dense Q/K/V/dO tiles, Prob that of the rounded P and dS.
constexpr bool kWidenBf16 = core::Isa::LONGSEQ_ISA_LEVEL != core::Isa::avx512_bf16;
template <class T>
using Tile = std::conditional_t<kIsBf16<T> && kWidenBf16, float, T>;
template <class T>
using Prob = std::conditional_t<kWidenBf16, float, bf16>;

// Floats taken by n elements of T, rounded to the 64-byte slice alignment.
template <class T>
size_t floats_for(size_t n) {
  return round_up((n * sizeof(T) + sizeof(float) - 1) / sizeof(float));
}

// Every GEMM operand and accumulator is dense (row stride = row length). q/k/v/do tiles inside
// [T, H, D] are strided whenever H > 1; given strided operands oneDNN 2.6 leaves its brgemm
// kernels (bf16: a slower path; gemm_bf16 used to copy each operand and C in and out per call,
// 8-12% of the bf16 kernel's time in memmove). So each kernel copies a tile dense where it is
// reused (Q_i for all key tiles of a forward item, K_j / V_j for all query tiles of a backward
// key tile) and keeps its accumulators (O_i, dK_j, dV_j, dQ) dense, writing them back once.
// Returns src itself when it is already dense (and of the tile type); bf16 widened to fp32 is
// always copied.
template <class In, class Out>
const Out* dense_tile(const In* src, int64_t rows, int64_t cols, int64_t ld, Out* dst) {
  if constexpr (std::is_same_v<In, Out>) {
    if (ld == cols) return src;
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * cols, src + r * ld, static_cast<size_t>(cols) * sizeof(In));
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = core::to_f32(src[r * ld + c]);
  }
  return dst;
}

// ---- forward ----------------------------------------------------------------------------------

constexpr int64_t kBq = kForwardTileQ, kBk = kForwardTileK;

// Per-thread slice: S/P tile, m, l, the dense O accumulator, dense Q, K, V tiles, P in bf16.
template <class T>
size_t forward_slice_floats(int64_t d) {
  const size_t ud = static_cast<size_t>(d);
  size_t n = round_up(kBq * kBk) + 2 * round_up(kBq) + round_up(kBq * ud);
  n += floats_for<Tile<T>>(kBq * ud) + 2 * floats_for<Tile<T>>(kBk * ud);
  if constexpr (kIsBf16<T>) n += floats_for<Prob<T>>(kBq * kBk);
  return n;
}

template <class T>
void forward_item(const T* q, const T* k, const T* v, const Tokens& qt, const Tokens& kt,
                  const Mask& mask, float scale, const AttnDims& dm, int64_t h, int64_t qi,
                  float* slice, float* o, float* lse) {
  const int64_t d = dm.d, g = dm.hq / dm.hkv, kvh = h / g;
  const int64_t r0 = qi * kBq, br = std::min(kBq, dm.tq - r0);
  const int64_t ldq = dm.hq * d, ldk = dm.hkv * d;
  float* s = slice;  // S then P, row stride nc (dense for the GEMMs)
  float* m = s + round_up(kBq * kBk);
  float* l = m + round_up(kBq);
  float* acc = l + round_up(kBq);  // O_i [br, d]
  using TT = Tile<T>;
  using PT = Prob<T>;
  constexpr size_t kPer = sizeof(float) / sizeof(TT);
  TT* qbuf = reinterpret_cast<TT*>(acc + round_up(kBq * d));
  TT* kbuf = qbuf + floats_for<TT>(kBq * d) * kPer;
  TT* vbuf = kbuf + floats_for<TT>(kBk * d) * kPer;
  [[maybe_unused]] PT* pb = reinterpret_cast<PT*>(vbuf + floats_for<TT>(kBk * d) * kPer);
  std::fill(acc, acc + br * d, 0.0f);
  std::fill(m, m + br, kNegInf);
  std::fill(l, l + br, 0.0f);
  const float alpha = scale * kLog2e;
  const detail::TileInfo qinfo = detail::tile_info(qt, r0, r0 + br, mask.docs);
  if (qinfo.any_valid) {
    const TT* qtile = dense_tile(q + (r0 * dm.hq + h) * d, br, d, ldq, qbuf);
    const int64_t nkt = ceil_div(dm.tk, kBk);
    for (int64_t kj = 0; kj < nkt; ++kj) {
      const int64_t c0 = kj * kBk, bc = std::min(kBk, dm.tk - c0);
      const detail::TileInfo kinfo = detail::tile_info(kt, c0, c0 + bc, mask.docs);
      const TileKind kind = detail::classify(mask, qinfo, kinfo);
      if (kind == TileKind::empty) continue;
      // Rows rc.r0.. of the query tile against keys c0 + rc.c0.. (the whole tile unless a band
      // mask lets contiguous tiles be cut).
      const detail::Rect rc = detail::work_rect(mask, qinfo, kinfo, kind, br, bc);
      if (rc.empty()) continue;
      const int64_t nr = rc.r1 - rc.r0, nc = rc.c1 - rc.c0, kc0 = c0 + rc.c0;
      const int64_t kstart = kinfo.contiguous ? kinfo.pmin + rc.c0 : -1;
      const TT* ktile = dense_tile(k + (kc0 * dm.hkv + kvh) * d, nc, d, ldk, kbuf);
      gemm(false, true, nr, nc, d, alpha, qtile + rc.r0 * d, d, ktile, d, 0.0f, s, nc);
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t r = rc.r0 + i;  // row of the query tile
        float* row = s + i * nc;
        if (kind == TileKind::partial)
          rows::mask_row(mask, qt.pos[r0 + r], mask.docs ? qt.doc[r0 + r] : 0, kt.pos + kc0,
                         mask.docs ? kt.doc + kc0 : nullptr, kstart, row, nc);
        if constexpr (kIsBf16<T>) {
          // Lazy rescaling (bf16 only): once a row has a running maximum m, exponentiate
          // against m in one pass and take the tile's own maximum on the way; keep m (no
          // rescale of O_i and l) unless the tile's scores exceed it by more than kLazyLog2.
          // P then reaches at most 2^kLazyLog2, far inside fp32's and bf16's range, and lse =
          // ln 2 (m + log2 l) stays exact. Saves the separate row-maximum pass, a quarter of
          // the bf16 forward's softmax work. (fp32 exponentiates in place, so the rare redo
          // would have lost S; it keeps the two passes.) The S row is intact: a tile that does
          // exceed the bound falls through to the exact path below.
          constexpr float kLazyLog2 = 64.0f;
          if (m[r] != kNegInf) {
            float smax;
            const float sum = rows::exp2_row_to_bf16_max(row, pb + i * nc, nc, m[r], &smax);
            if (smax <= m[r] + kLazyLog2) {
              l[r] += sum;
              continue;
            }
          }
        }
        const float mnew = std::max(m[r], rows::row_max(row, nc));
        if (mnew == kNegInf) {
          // Nothing visible in this row so far: P = 0 (2^(-inf - -inf) would be NaN).
          if constexpr (kIsBf16<T>)
            std::fill(pb + i * nc, pb + (i + 1) * nc, PT{});
          else
            std::fill(row, row + nc, 0.0f);
          continue;
        }
        float sum;
        if constexpr (kIsBf16<T>)
          sum = rows::exp2_row_to_bf16(row, pb + i * nc, nc, mnew);
        else
          sum = rows::exp2_row_inplace(row, nc, mnew);
        if (m[r] != mnew && m[r] != kNegInf) {
          const float c = std::exp2(m[r] - mnew);
          rows::scale_row(acc + r * d, d, c);
          l[r] *= c;
        }
        l[r] += sum;
        m[r] = mnew;
      }
      const TT* vtile = dense_tile(v + (kc0 * dm.hkv + kvh) * d, nc, d, ldk, vbuf);
      if constexpr (kIsBf16<T>)
        gemm(false, false, nr, d, nc, 1.0f, pb, nc, vtile, d, 1.0f, acc + rc.r0 * d, d);
      else
        gemm(false, false, nr, d, nc, 1.0f, s, nc, vtile, d, 1.0f, acc + rc.r0 * d, d);
    }
  }
  for (int64_t r = 0; r < br; ++r) {
    float* lrow = lse + (r0 + r) * dm.hq + h;
    float* orow = o + (r0 + r) * ldq + h * d;
    if (l[r] > 0.0f) {
      std::memcpy(orow, acc + r * d, static_cast<size_t>(d) * sizeof(float));
      rows::scale_row(orow, d, 1.0f / l[r]);
      *lrow = kLn2 * (m[r] + std::log2(l[r]));
    } else {
      std::fill(orow, orow + d, 0.0f);
      *lrow = kNegInf;
    }
  }
}

template <class T>
void forward_impl(const T* q, const T* k, const T* v, const Tokens& qt, const Tokens& kt,
                  const Mask& mask, float scale, const AttnDims& dm, int threads, float* ws,
                  float* o, float* lse) {
  if (dm.tq == 0) return;
  const int64_t nqt = ceil_div(dm.tq, kBq), items = nqt * dm.hq;
  const int nt = clamp_threads(threads, items);
  const size_t slice = forward_slice_floats<T>(dm.d);
#pragma omp parallel num_threads(nt)
  {
    float* my = ws + static_cast<size_t>(omp_get_thread_num()) * slice;
    // Head-major (consecutive items share K/V in cache: +3-7% measured), and within a head the
    // later query tiles first: under a causal mask they carry the most key tiles, so dynamic
    // scheduling ends with the cheap ones and the threads finish together.
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t h = it / nqt, qi = nqt - 1 - it % nqt;
      forward_item(q, k, v, qt, kt, mask, scale, dm, h, qi, my, o, lse);
    }
  }
}

// ---- backward ---------------------------------------------------------------------------------

constexpr int64_t kBbq = kBackwardTileQ, kBbk = kBackwardTileK;

// Per-thread slice: P, dP/dS, the dense dK_j and dV_j accumulators, dense Q, dO, K, V tiles, and
// P, dS in bf16.
template <class T>
size_t backward_slice_floats(int64_t d) {
  const size_t ud = static_cast<size_t>(d);
  size_t n = 2 * round_up(kBbq * kBbk) + 2 * round_up(kBbk * ud);
  n += 2 * floats_for<Tile<T>>(kBbq * ud) + 2 * floats_for<Tile<T>>(kBbk * ud);
  if constexpr (kIsBf16<T>) n += 2 * floats_for<Prob<T>>(kBbq * kBbk);
  return n;
}

// dq_bufs: `chunks` zeroed head-major [Hq, Tq, D] buffers; this unit accumulates into its own.
template <class T>
void backward_unit(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                   const float* delta, const Tokens& qt, const Tokens& kt, const Mask& mask,
                   float scale, const AttnDims& dm, int64_t kvh, int64_t chunk, int64_t chunks,
                   float* slice, float* dq_buf, float* dk, float* dv) {
  const int64_t d = dm.d, g = dm.hq / dm.hkv;
  const int64_t ldq = dm.hq * d, ldk = dm.hkv * d;
  const int64_t nqt = ceil_div(dm.tq, kBbq), nkt = ceil_div(dm.tk, kBbk);
  float* p = slice;  // P, then dP/dS: row stride nc
  float* ds = p + round_up(kBbq * kBbk);
  float* dka = ds + round_up(kBbq * kBbk);  // dK_j [bc, d]
  float* dva = dka + round_up(kBbk * d);    // dV_j [bc, d]
  using TT = Tile<T>;
  using PT = Prob<T>;
  constexpr size_t kPer = sizeof(float) / sizeof(TT);
  TT* qbuf = reinterpret_cast<TT*>(dva + round_up(kBbk * d));
  TT* dobuf = qbuf + floats_for<TT>(kBbq * d) * kPer;
  TT* kbuf = dobuf + floats_for<TT>(kBbq * d) * kPer;
  TT* vbuf = kbuf + floats_for<TT>(kBbk * d) * kPer;
  [[maybe_unused]] PT* pb = reinterpret_cast<PT*>(vbuf + floats_for<TT>(kBbk * d) * kPer);
  [[maybe_unused]] PT* dsb = pb + floats_for<PT>(kBbq * kBbk) * (sizeof(float) / sizeof(PT));
  const float alpha = scale * kLog2e;
  for (int64_t kj = chunk; kj < nkt; kj += chunks) {
    const int64_t c0 = kj * kBbk, bc = std::min(kBbk, dm.tk - c0);
    const detail::TileInfo kinfo = detail::tile_info(kt, c0, c0 + bc, mask.docs);
    if (!kinfo.any_valid) continue;
    // The dense K_j, V_j and the zeroed dK_j, dV_j are made at the first visible pair, not
    // before: a key tile that no query tile of this call sees costs nothing. Callers that split
    // the queries (the single-process backward's row chunks; ring blocks under a causal mask)
    // meet many such tiles (causal, T = 8192 in chunks of 1,024 rows: 112 of the 256 (chunk,
    // key tile) pairs).
    const TT* kdense = nullptr;
    const TT* vdense = nullptr;
    bool touched = false;
    for (int64_t h = kvh * g; h < (kvh + 1) * g; ++h) {
      for (int64_t qi = 0; qi < nqt; ++qi) {
        const int64_t r0 = qi * kBbq, br = std::min(kBbq, dm.tq - r0);
        const detail::TileInfo qinfo = detail::tile_info(qt, r0, r0 + br, mask.docs);
        const TileKind kind = detail::classify(mask, qinfo, kinfo);
        if (kind == TileKind::empty) continue;
        const detail::Rect rc = detail::work_rect(mask, qinfo, kinfo, kind, br, bc);
        if (rc.empty()) continue;
        // The sub-tile: query rows r0 + rc.r0 + i, keys c0 + rc.c0 + j.
        const int64_t nr = rc.r1 - rc.r0, nc = rc.c1 - rc.c0, q0 = r0 + rc.r0, kc0 = c0 + rc.c0;
        const int64_t kstart = kinfo.contiguous ? kinfo.pmin + rc.c0 : -1;
        if (!touched) {
          kdense = dense_tile(k + (c0 * dm.hkv + kvh) * d, bc, d, ldk, kbuf);
          vdense = dense_tile(v + (c0 * dm.hkv + kvh) * d, bc, d, ldk, vbuf);
          std::fill(dka, dka + bc * d, 0.0f);
          std::fill(dva, dva + bc * d, 0.0f);
          touched = true;
        }
        const TT* qtile = dense_tile(q + (q0 * dm.hq + h) * d, nr, d, ldq, qbuf);
        const TT* dotile = dense_tile(dout + (q0 * dm.hq + h) * d, nr, d, ldq, dobuf);
        const TT* ktile = kdense + rc.c0 * d;
        const TT* vtile = vdense + rc.c0 * d;
        float* dktile = dka + rc.c0 * d;
        float* dvtile = dva + rc.c0 * d;
        float* dqtile = dq_buf + (h * dm.tq + q0) * d;
        gemm(false, true, nr, nc, d, alpha, qtile, d, ktile, d, 0.0f, p, nc);
        for (int64_t i = 0; i < nr; ++i) {
          float* row = p + i * nc;
          const float lse_r = lse[(q0 + i) * dm.hq + h];
          if (lse_r == kNegInf) {
            std::fill(row, row + nc, 0.0f);  // saw nothing anywhere: no gradient
            if constexpr (kIsBf16<T>) std::fill(pb + i * nc, pb + (i + 1) * nc, PT{});
            continue;
          }
          if (kind == TileKind::partial)
            rows::mask_row(mask, qt.pos[q0 + i], mask.docs ? qt.doc[q0 + i] : 0, kt.pos + kc0,
                           mask.docs ? kt.doc + kc0 : nullptr, kstart, row, nc);
          if constexpr (kIsBf16<T>)
            rows::exp2_row_inplace_and_bf16(row, pb + i * nc, nc, lse_r * kLog2e);
          else
            rows::exp2_row_inplace(row, nc, lse_r * kLog2e);
        }
        // dV_j += P^T dO_i
        if constexpr (kIsBf16<T>)
          gemm(true, false, nc, d, nr, 1.0f, pb, nc, dotile, d, 1.0f, dvtile, d);
        else
          gemm(true, false, nc, d, nr, 1.0f, p, nc, dotile, d, 1.0f, dvtile, d);
        // dP = dO_i V_j^T, then dS = P (dP - delta)
        gemm(false, true, nr, nc, d, 1.0f, dotile, d, vtile, d, 0.0f, ds, nc);
        for (int64_t i = 0; i < nr; ++i) {
          float* dsrow = ds + i * nc;
          const float* prow = p + i * nc;
          const float dl = delta[(q0 + i) * dm.hq + h];
          if (lse[(q0 + i) * dm.hq + h] == kNegInf) {
            if constexpr (kIsBf16<T>)
              std::fill(dsb + i * nc, dsb + (i + 1) * nc, PT{});
            else
              std::fill(dsrow, dsrow + nc, 0.0f);
          } else if constexpr (kIsBf16<T>) {
            rows::softmax_grad_row_to_bf16(prow, dsrow, dsb + i * nc, nc, dl);
          } else {
            rows::softmax_grad_row(prow, dsrow, nc, dl);
          }
        }
        // dK_j += scale dS^T Q_i;  dQ_i += scale dS K_j
        if constexpr (kIsBf16<T>) {
          gemm(true, false, nc, d, nr, scale, dsb, nc, qtile, d, 1.0f, dktile, d);
          gemm(false, false, nr, d, nc, scale, dsb, nc, ktile, d, 1.0f, dqtile, d);
        } else {
          gemm(true, false, nc, d, nr, scale, ds, nc, qtile, d, 1.0f, dktile, d);
          gemm(false, false, nr, d, nc, scale, ds, nc, ktile, d, 1.0f, dqtile, d);
        }
      }
    }
    if (!touched) continue;
    for (int64_t r = 0; r < bc; ++r) {
      float* dkrow = dk + (c0 + r) * ldk + kvh * d;
      float* dvrow = dv + (c0 + r) * ldk + kvh * d;
      const float* ka = dka + r * d;
      const float* va = dva + r * d;
#pragma omp simd
      for (int64_t x = 0; x < d; ++x) {
        dkrow[x] += ka[x];
        dvrow[x] += va[x];
      }
    }
  }
}

template <class T>
void backward_impl(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                   const float* delta, const Tokens& qt, const Tokens& kt, const Mask& mask,
                   float scale, const AttnDims& dm, int threads, int64_t chunks, float* ws,
                   float* dq, float* dk, float* dv) {
  if (dm.tq == 0 || dm.tk == 0) return;
  const int64_t units = dm.hkv * chunks;
  const size_t dq_size = static_cast<size_t>(dm.tq * dm.hq * dm.d);
  const int nt = clamp_threads(threads, std::max<int64_t>(units, dm.tq));
  const size_t slice = backward_slice_floats<T>(dm.d);
  // The chunks' head-major dq buffers sit after the largest possible set of thread slices.
  float* bufs = ws + static_cast<size_t>(std::max(threads, 1)) * slice;
  const int64_t d = dm.d, hq = dm.hq, tq = dm.tq;
#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < chunks * hq; ++i) {
      float* b = bufs + static_cast<size_t>(i * tq * d);
      std::fill(b, b + tq * d, 0.0f);
    }
    float* my = ws + static_cast<size_t>(omp_get_thread_num()) * slice;
    // Units (kv head, chunk); the team may be larger than the number of units (it is sized for
    // the buffer passes too): surplus threads find no unit.
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t kvh = u / chunks, c = u % chunks;
      backward_unit(q, k, v, dout, lse, delta, qt, kt, mask, scale, dm, kvh, c, chunks, my,
                    bufs + static_cast<size_t>(c) * dq_size, dk, dv);
    }
    // dq += buffer 0 + buffer 1 + ... in this order, whatever the thread count.
#pragma omp for schedule(static)
    for (int64_t i = 0; i < tq; ++i) {
      for (int64_t h = 0; h < hq; ++h) {
        float* row = dq + (i * hq + h) * d;
        for (int64_t c = 0; c < chunks; ++c) {
          const float* b = bufs + static_cast<size_t>(c) * dq_size + (h * tq + i) * d;
#pragma omp simd
          for (int64_t x = 0; x < d; ++x) row[x] += b[x];
        }
      }
    }
  }
}

// ---- the table ---------------------------------------------------------------------------------

size_t forward_slice(int64_t d, bool bf16_inputs) {
  return bf16_inputs ? forward_slice_floats<bf16>(d) : forward_slice_floats<float>(d);
}
size_t backward_slice(int64_t d, bool bf16_inputs) {
  return bf16_inputs ? backward_slice_floats<bf16>(d) : backward_slice_floats<float>(d);
}

float exp2_row(float* s, int64_t n, float m) {
  return rows::exp2_row_inplace(s, n, m);
}

}  // namespace

extern const PointwiseTable kPointwise;  // pointwise.cpp of the same variant
extern const KernelTable kTable;
const KernelTable kTable = {
    core::Isa::LONGSEQ_ISA_LEVEL,
    forward_slice,
    backward_slice,
    forward_impl<float>,
    forward_impl<bf16>,
    backward_impl<float>,
    backward_impl<bf16>,
    exp2_row,
    rows::mask_row,
    rows::to_bf16_row,
    &kPointwise,
};

}  // namespace longseq::kernels::cpu::LONGSEQ_ISA_NS
