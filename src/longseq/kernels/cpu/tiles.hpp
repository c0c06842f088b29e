#pragma once
// Internal to kernels/cpu: tile classification, per-element masking and the vectorised
// exponential of the softmax. Not part of the public API (attention.hpp is).
//
// Classification uses only the min/max of a tile's valid positions and document ids, which bound
// every pair whatever the order of positions inside the tile: "empty" and "full" are claimed only
// when certain, everything else is "partial" and evaluated per element. So striped, zigzag or
// shuffled positions are correct, and contiguous ones (the common case) skip the most work.
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "longseq/core/dtype.hpp"
#include "longseq/core/error.hpp"
#include "longseq/kernels/mask.hpp"

namespace longseq::kernels::cpu::detail {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

/// What classification needs of one tile of tokens [begin, end).
struct TileInfo {
  bool any_valid = false;  ///< at least one non-padding token
  bool all_valid = true;   ///< no padding token
  int64_t pmin = std::numeric_limits<int64_t>::max(), pmax = -1;
  int32_t dmin = std::numeric_limits<int32_t>::max(), dmax = std::numeric_limits<int32_t>::min();
  bool contiguous = true;  ///< no padding and pos[i] = pmin + i: masks reduce to index ranges
};

inline TileInfo tile_info(const Tokens& t, int64_t begin, int64_t end, bool docs) {
  TileInfo r;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t p = t.pos[i];
    if (p < 0 || (i > begin && p != t.pos[i - 1] + 1)) r.contiguous = false;
    if (p < 0) {
      r.all_valid = false;
      continue;
    }
    r.any_valid = true;
    r.pmin = std::min(r.pmin, p);
    r.pmax = std::max(r.pmax, p);
    if (docs) {
      r.dmin = std::min(r.dmin, t.doc[i]);
      r.dmax = std::max(r.dmax, t.doc[i]);
    }
  }
  return r;
}

enum class TileKind : uint8_t { empty, partial, full };

// Block-mask rectangles larger than this are not scanned (called partial): a striped tile can
// span the whole sequence, and the per-element pass is exact anyway.
inline constexpr int64_t kMaxBlockScan = 4096;

inline TileKind classify(const Mask& m, const TileInfo& q, const TileInfo& k) {
  if (!q.any_valid || !k.any_valid) return TileKind::empty;
  bool full = q.all_valid && k.all_valid;
  if (m.causal || m.window > 0) {
    if (k.pmin > q.pmax) return TileKind::empty;  // every key after every query
    if (k.pmax > q.pmin) full = false;
  }
  if (m.window > 0) {
    if (q.pmin - k.pmax >= m.window) return TileKind::empty;  // every key too far back
    if (q.pmax - k.pmin >= m.window) full = false;
  }
  if (m.docs) {
    if (k.dmax < q.dmin || k.dmin > q.dmax) return TileKind::empty;  // disjoint documents
    if (!(q.dmin == q.dmax && k.dmin == k.dmax && q.dmin == k.dmin)) full = false;
  }
  if (m.block_mask) {
    const int64_t b = m.block_size, qb0 = q.pmin / b, qb1 = q.pmax / b, kb0 = k.pmin / b,
                  kb1 = k.pmax / b;
    LONGSEQ_CHECK_MSG(qb1 < m.num_blocks && kb1 < m.num_blocks, "positions ", q.pmax, "/", k.pmax,
                      " beyond block mask of ", m.num_blocks, " blocks of ", b);
    if ((qb1 - qb0 + 1) * (kb1 - kb0 + 1) > kMaxBlockScan) {
      full = false;
    } else {
      bool any = false, all = true;
      for (int64_t qb = qb0; qb <= qb1; ++qb)
        for (int64_t kb = kb0; kb <= kb1; ++kb) {
          const bool vis = m.block_mask[qb * m.num_blocks + kb] != 0;
          any = any || vis;
          all = all && vis;
        }
      if (!any) return TileKind::empty;
      if (!all) full = false;
    }
  }
  return full ? TileKind::full : TileKind::partial;
}

/// The sub-rectangle of a (query tile, key tile) pair outside which nothing is visible: rows
/// [r0, r1) and columns [c0, c1), in tile-local indices. Causal and window masks are bands in
/// position space, so for contiguous tiles whole rows and columns can be cut (the diagonal tile
/// of a causal mask then computes its triangle's bounding box, not the whole tile).
struct Rect {
  int64_t r0, r1, c0, c1;
  bool empty() const { return r0 >= r1 || c0 >= c1; }
};

inline Rect trim(const Mask& m, const TileInfo& q, const TileInfo& k, int64_t rows, int64_t cols) {
  Rect r{0, rows, 0, cols};
  if (!(m.causal || m.window > 0)) return r;
  // Visible pairs have k <= q (and q - k < window).
  if (k.contiguous) r.c1 = std::clamp<int64_t>(q.pmax - k.pmin + 1, 0, cols);
  if (q.contiguous) r.r0 = std::clamp<int64_t>(k.pmin - q.pmin, 0, rows);
  if (m.window > 0) {
    if (k.contiguous) r.c0 = std::clamp<int64_t>(q.pmin - m.window + 1 - k.pmin, 0, cols);
    if (q.contiguous) r.r1 = std::clamp<int64_t>(k.pmax + m.window - q.pmin, 0, rows);
  }
  return r;
}

/// Widens a trimmed rectangle to multiples of kTrimQuantum (clamped to the tile). The extra rows
/// and columns are masked per element anyway; what it buys is few distinct GEMM shapes: the bf16
/// path builds one oneDNN primitive per shape (tens of microseconds each, cached per thread up
/// to 256 shapes), and exact trims at arbitrary ring offsets would make new ones every step.
inline constexpr int64_t kTrimQuantum = 64;

inline Rect quantize(Rect r, int64_t rows, int64_t cols) {
  if (r.empty()) return r;
  auto down = [](int64_t x) { return x / kTrimQuantum * kTrimQuantum; };
  auto up = [](int64_t x, int64_t lim) {
    return std::min(lim, (x + kTrimQuantum - 1) / kTrimQuantum * kTrimQuantum);
  };
  return {down(r.r0), up(r.r1, rows), down(r.c0), up(r.c1, cols)};
}

/// The part of a (rows x cols) tile pair of kind `kind` that must be computed: the whole tile
/// for a full pair, the trimmed and quantised band for a partial one (empty when nothing sees).
inline Rect work_rect(const Mask& m, const TileInfo& q, const TileInfo& k, TileKind kind,
                      int64_t rows, int64_t cols) {
  return kind == TileKind::partial ? quantize(trim(m, q, k, rows, cols), rows, cols)
                                   : Rect{0, rows, 0, cols};
}

/// 2^x in fp32 for softmax arguments: Cephes' exp2f polynomial on [-0.5, 0.5] (relative error
/// ~2e-7) scaled by 2^n. x < -126 (including -inf, i.e. masked scores) gives exactly 0; the upper
/// clamp only keeps the exponent arithmetic in range (softmax arguments are <= 0).
inline float exp2_fast(float x) {
  float xc = x < -126.0f ? -126.0f : x;
  xc = xc > 126.0f ? 126.0f : xc;
  const float n = std::nearbyint(xc);
  const float f = xc - n;
  float p = 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  return x < -126.0f ? 0.0f : std::ldexp(p, static_cast<int>(n));
}

// The row loops below run once per score element, so they decide how close the forward gets to
// the GEMM rate: with AVX-512 they are written with intrinsics (GCC leaves the generic loops
// scalar in this context), with a generic fallback for other targets. Tails use masked vector
// operations, so every element of a row goes through the same code and the reduction order is a
// function of the row length only.
#if defined(__AVX512F__)
inline __m512 exp2_v(__m512 x) {
  // No clamping (two instructions of ~13 per 16 scores): lanes below -126 (masked scores are
  // -inf, whose f is NaN) are zeroed by `keep` at the end, and softmax arguments are <= 0 (the
  // backward's s - lse at most a rounding error above), so the exponent stays in range. Same
  // bits as the clamped form for every argument <= 126.
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
  // The merge-masked forms with an all-ones mask: GCC 12's unmasked ones start from an
  // "undefined" vector and trip -Wmaybe-uninitialized (-Werror) inside its own headers.
  constexpr __mmask16 all = 0xffff;
  const __m512 n =
      _mm512_mask_roundscale_ps(x, all, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(keep, _mm512_mask_scalef_ps(p, all, p, n));
}

// Horizontal reductions in a fixed order (so a function of the data only). Built from the
// merge-masked extract: GCC 12's unmasked forms (and _mm512_reduce_*) start from an "undefined"
// vector and trip -Wmaybe-uninitialized (-Werror) inside its own headers.
template <int kHalf>
inline __m256 half(__m512 v) {
  return _mm256_castpd_ps(
      _mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xf, _mm512_castps_pd(v), kHalf));
}
inline float hmax(__m512 v) {
  const __m256 h = _mm256_max_ps(half<0>(v), half<1>(v));
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}
inline float hsum(__m512 v) {
  const __m256 h = _mm256_add_ps(half<0>(v), half<1>(v));
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff)
                    : static_cast<__mmask16>((1u << static_cast<unsigned>(left)) - 1u);
}
#endif

/// Sets s[j] = -inf for every key j of the tile that query (qp, qd) must not see: the predicate
/// of mask.hpp. `kstart` >= 0 says the keys are contiguous from that position (causal and window
/// then reduce to an index range); otherwise every element is evaluated (any order of positions).
inline void mask_row(const Mask& m, int64_t qp, int32_t qd, const int64_t* kp, const int32_t* kd,
                     int64_t kstart, float* s, int64_t n) {
  if (qp < 0) {
    std::fill(s, s + n, kNegInf);
    return;
  }
  // Visible keys satisfy lo < p <= hi (lo >= -1 also rejects padding).
  const int64_t hi = (m.causal || m.window > 0) ? qp : std::numeric_limits<int64_t>::max();
  const int64_t lo = m.window > 0 ? std::max<int64_t>(qp - m.window, -1) : -1;
  if (kstart >= 0) {
    const int64_t j0 = std::clamp<int64_t>(lo + 1 - kstart, 0, n);
    const int64_t j1 =
        hi == std::numeric_limits<int64_t>::max() ? n : std::clamp<int64_t>(hi - kstart + 1, j0, n);
    std::fill(s, s + j0, kNegInf);
    std::fill(s + j1, s + n, kNegInf);
    if (m.docs)
      for (int64_t j = j0; j < j1; ++j)
        if (kd[j] != qd) s[j] = kNegInf;
  } else {
#if defined(__AVX512F__)
    const __m512i lov = _mm512_set1_epi64(lo), hiv = _mm512_set1_epi64(hi);
    const __m512i qdv = _mm512_set1_epi32(qd);
    const __m512 ninf = _mm512_set1_ps(kNegInf);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 k = tail_mask(n - j);
      const __mmask8 k0 = static_cast<__mmask8>(k), k1 = static_cast<__mmask8>(k >> 8);
      const __m512i p0 = _mm512_maskz_loadu_epi64(k0, kp + j);
      const __m512i p1 = _mm512_maskz_loadu_epi64(k1, kp + j + 8);
      const __mmask8 v0 = _mm512_mask_cmple_epi64_mask(_mm512_cmpgt_epi64_mask(p0, lov), p0, hiv);
      const __mmask8 v1 = _mm512_mask_cmple_epi64_mask(_mm512_cmpgt_epi64_mask(p1, lov), p1, hiv);
      __mmask16 vis = static_cast<__mmask16>(v0 | (static_cast<unsigned>(v1) << 8));
      if (m.docs) vis &= _mm512_cmpeq_epi32_mask(_mm512_maskz_loadu_epi32(k, kd + j), qdv);
      const __m512 x = _mm512_maskz_loadu_ps(k, s + j);
      _mm512_mask_storeu_ps(s + j, k, _mm512_mask_blend_ps(vis, ninf, x));
    }
#else
    for (int64_t j = 0; j < n; ++j) {
      const bool vis = kp[j] > lo && kp[j] <= hi && (!m.docs || kd[j] == qd);
      if (!vis) s[j] = kNegInf;
    }
#endif
  }
  if (m.block_mask) {
    const uint8_t* row = m.block_mask + (qp / m.block_size) * m.num_blocks;
    for (int64_t j = 0; j < n; ++j)
      if (kp[j] >= 0 && !row[kp[j] / m.block_size]) s[j] = kNegInf;
  }
}

#if defined(__AVX512F__)
// Row loops run full 16-lane chunks with plain loads and stores and only the tail with masked
// ones: masked memory operations are slow on this AMD core (the masked bf16 store alone was ~30%
// of the bf16 forward's softmax time). The lanes compute the same values either way, so the bits
// depend on the row length only.
template <bool kTail>
inline __m512 load16(const float* p, __mmask16 k) {
  if constexpr (kTail)
    return _mm512_maskz_loadu_ps(k, p);
  else
    return _mm512_loadu_ps(p);
}
template <bool kTail>
inline void store16(float* p, __mmask16 k, __m512 v) {
  if constexpr (kTail)
    _mm512_mask_storeu_ps(p, k, v);
  else
    _mm512_storeu_ps(p, v);
}
#if defined(__AVX512BF16__)
template <bool kTail>
inline void store16_bf16(core::bf16* p, __mmask16 k, __m512 v) {
  const __m256i b = std::bit_cast<__m256i>(_mm512_cvtneps_pbh(v));
  if constexpr (kTail)
    _mm256_mask_storeu_epi16(p, k, b);
  else
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), b);
}
#endif
// acc + v on the lanes of k (all lanes for full chunks).
template <bool kTail>
inline __m512 add16(__m512 acc, __mmask16 k, __m512 v) {
  if constexpr (kTail)
    return _mm512_mask_add_ps(acc, k, acc, v);
  else
    return _mm512_add_ps(acc, v);
}
// f.operator()<kTail>(j, mask) over [0, n) in chunks of 16.
template <class F>
inline void chunks16(int64_t n, F&& f) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) f.template operator()<false>(j, static_cast<__mmask16>(0xffff));
  if (j < n) f.template operator()<true>(j, tail_mask(n - j));
}
#endif

inline float row_max(const float* s, int64_t n) {
#if defined(__AVX512F__)
  __m512 m = _mm512_set1_ps(kNegInf);
  chunks16(n, [&]<bool kTail>(int64_t j, __mmask16 k) {
    m = _mm512_mask_max_ps(m, k, m, load16<kTail>(s + j, k));
  });
  return hmax(m);
#else
  float m = kNegInf;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  return m;
#endif
}

/// s[j] = 2^(s[j] - m) in place; returns the sum of the results.
inline float exp2_row_inplace(float* s, int64_t n, float m) {
#if defined(__AVX512F__)
  const __m512 mv = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  chunks16(n, [&]<bool kTail>(int64_t j, __mmask16 k) {
    const __m512 p = exp2_v(_mm512_sub_ps(load16<kTail>(s + j, k), mv));
    store16<kTail>(s + j, k, p);
    acc = add16<kTail>(acc, k, p);
  });
  return hsum(acc);
#else
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = exp2_fast(s[j] - m);
    sum += s[j];
  }
  return sum;
#endif
}

/// p[j] = 2^(s[j] - m) written as bf16 (round to nearest even); returns the fp32 sum of the
/// unrounded values. One pass: the fp32 probabilities are never stored (bf16 forward). With
/// kMax, the same pass also puts the row's maximum score in *smax (-inf for an all-masked row):
/// the bf16 forward's one-pass row for every key tile after the first (see forward_item).
template <bool kMax>
inline float exp2_row_to_bf16_impl(const float* s, core::bf16* p, int64_t n, float m, float* smax) {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  const __m512 mv = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  [[maybe_unused]] __m512 mx = _mm512_set1_ps(kNegInf);
  chunks16(n, [&]<bool kTail>(int64_t j, __mmask16 k) {
    const __m512 x = load16<kTail>(s + j, k);
    if constexpr (kMax) mx = _mm512_mask_max_ps(mx, k, mx, x);
    const __m512 e = exp2_v(_mm512_sub_ps(x, mv));
    store16_bf16<kTail>(p + j, k, e);
    acc = add16<kTail>(acc, k, e);
  });
  if constexpr (kMax) *smax = hmax(mx);
  return hsum(acc);
#else
  float sum = 0.0f;
  [[maybe_unused]] float mx = kNegInf;
  for (int64_t j = 0; j < n; ++j) {
    if constexpr (kMax) mx = std::max(mx, s[j]);
    const float e = exp2_fast(s[j] - m);
    p[j] = core::to_bf16(e);
    sum += e;
  }
  if constexpr (kMax) *smax = mx;
  return sum;
#endif
}
inline float exp2_row_to_bf16(const float* s, core::bf16* p, int64_t n, float m) {
  return exp2_row_to_bf16_impl<false>(s, p, n, m, nullptr);
}
inline float exp2_row_to_bf16_max(const float* s, core::bf16* p, int64_t n, float m, float* smax) {
  return exp2_row_to_bf16_impl<true>(s, p, n, m, smax);
}

/// x[j] *= c.
inline void scale_row(float* x, int64_t n, float c) {
#if defined(__AVX512F__)
  const __m512 cv = _mm512_set1_ps(c);
  chunks16(n, [&]<bool kTail>(int64_t j, __mmask16 k) {
    store16<kTail>(x + j, k, _mm512_mul_ps(load16<kTail>(x + j, k), cv));
  });
#else
  for (int64_t j = 0; j < n; ++j) x[j] *= c;
#endif
}

/// ds[j] = p[j] * (ds[j] - delta): the softmax backward of one row, dP in ds on entry.
inline void softmax_grad_row(const float* p, float* ds, int64_t n, float delta) {
#if defined(__AVX512F__)
  const __m512 dv = _mm512_set1_ps(delta);
  chunks16(n, [&]<bool kTail>(int64_t j, __mmask16 k) {
    const __m512 x = _mm512_sub_ps(load16<kTail>(ds + j, k), dv);
    store16<kTail>(ds + j, k, _mm512_mul_ps(load16<kTail>(p + j, k), x));
  });
#else
  for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - delta);
#endif
}

/// ds[j] = bf16(p[j] * (dp[j] - delta)): the bf16 backward's dS, in one pass.
inline void softmax_grad_row_to_bf16(const float* p, const float* dp, core::bf16* ds, int64_t n,
                                     float delta) {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  const __m512 dv = _mm512_set1_ps(delta);
  chunks16(n, [&]<bool kTail>(int64_t j, __mmask16 k) {
    const __m512 x = _mm512_sub_ps(load16<kTail>(dp + j, k), dv);
    store16_bf16<kTail>(ds + j, k, _mm512_mul_ps(load16<kTail>(p + j, k), x));
  });
#else
  for (int64_t j = 0; j < n; ++j) ds[j] = core::to_bf16(p[j] * (dp[j] - delta));
#endif
}

/// p[j] = 2^(s[j] - m) in place, and also written to pb as bf16 (bf16 backward: P is needed in
/// fp32 for dS and in bf16 for the dV product).
inline void exp2_row_inplace_and_bf16(float* s, core::bf16* pb, int64_t n, float m) {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  const __m512 mv = _mm512_set1_ps(m);
  chunks16(n, [&]<bool kTail>(int64_t j, __mmask16 k) {
    const __m512 e = exp2_v(_mm512_sub_ps(load16<kTail>(s + j, k), mv));
    store16<kTail>(s + j, k, e);
    store16_bf16<kTail>(pb + j, k, e);
  });
#else
  exp2_row_inplace(s, n, m);
  for (int64_t j = 0; j < n; ++j) pb[j] = core::to_bf16(s[j]);
#endif
}

}  // namespace longseq::kernels::cpu::detail
