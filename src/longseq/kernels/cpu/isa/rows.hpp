#pragma once
// Internal to kernels/cpu/isa: the per-element row loops of the attention kernels (masking, the
// softmax's exponential, rescaling, rounding to bf16), compiled once per kernel variant.
//
// The row loops run once per score element, so they decide how close the attention kernels get
// to the GEMM rate. They are written once over a few vector primitives (vf: a register of kLanes
// floats, vm: a lane mask) defined here for AVX-512 (16 lanes) and AVX2+FMA (8 lanes), with plain
// C++ loops for the portable variant. Tails use masked operations, so every element of a row goes
// through the same code and the reduction order is a function of the row length (and the variant)
// only: the bits never depend on the thread count.
//
// Everything here lives in the variant's own namespace (LONGSEQ_ISA_NS, set by CMake per object
// library): an inline function compiled with AVX-512 flags must never share a symbol with its
// AVX2 or portable twin (kernels/cpu/isa/README.md).
#ifndef LONGSEQ_ISA_NS
#error "kernels/cpu/isa/ sources are compiled once per variant with LONGSEQ_ISA_NS set (CMake)"
#endif

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "longseq/core/dtype.hpp"
#include "longseq/kernels/cpu/tiles.hpp"
#include "longseq/kernels/mask.hpp"

namespace longseq::kernels::cpu::LONGSEQ_ISA_NS::rows {

using detail::kNegInf;

/// 2^x in fp32 for softmax arguments: Cephes' exp2f polynomial on [-0.5, 0.5] (relative error
/// ~2e-7) scaled by 2^n. x < -126 (including -inf, i.e. masked scores) gives exactly 0; the upper
/// clamp only keeps the exponent arithmetic in range (softmax arguments are <= 0). The vector
/// forms below give the same bits for every x <= 126.
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

// ---- vector primitives
// ---------------------------------------------------------------------------
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define LONGSEQ_ROWS_SIMD 1
using vf = __m512;
using vm = __mmask16;
inline constexpr int64_t kLanes = 16;

inline vm all_lanes() {
  return static_cast<vm>(0xffff);
}
inline vm tail_mask(int64_t left) {
  return left >= 16 ? all_lanes() : static_cast<vm>((1u << static_cast<unsigned>(left)) - 1u);
}
inline vf set1(float x) {
  return _mm512_set1_ps(x);
}
// Full chunks use plain loads and stores, only the tail masked ones: masked memory operations
// are slow on AMD cores (the masked bf16 store alone was ~30% of the bf16 forward's softmax time).
// Masked-off lanes load as 0.
template <bool kTail>
inline vf load(const float* p, vm k) {
  if constexpr (kTail)
    return _mm512_maskz_loadu_ps(k, p);
  else
    return _mm512_loadu_ps(p);
}
template <bool kTail>
inline void store(float* p, vm k, vf v) {
  if constexpr (kTail)
    _mm512_mask_storeu_ps(p, k, v);
  else
    _mm512_storeu_ps(p, v);
}
inline vf add(vf a, vf b) {
  return _mm512_add_ps(a, b);
}
inline vf sub(vf a, vf b) {
  return _mm512_sub_ps(a, b);
}
inline vf mul(vf a, vf b) {
  return _mm512_mul_ps(a, b);
}
inline vf fmadd(vf a, vf b, vf c) {
  return _mm512_fmadd_ps(a, b, c);
}
// acc + v, acc max v on the lanes of k (all lanes for full chunks); other lanes keep acc.
template <bool kTail>
inline vf add_lanes(vf acc, vm k, vf v) {
  if constexpr (kTail)
    return _mm512_mask_add_ps(acc, k, acc, v);
  else
    return _mm512_add_ps(acc, v);
}
inline vf max_lanes(vf acc, vm k, vf v) {
  return _mm512_mask_max_ps(acc, k, acc, v);
}

inline vf exp2_v(vf x) {
  // No clamping (two instructions of ~13 per 16 scores): lanes below -126 (masked scores are
  // -inf, whose f is NaN) are zeroed by `keep` at the end, and softmax arguments are <= 0 (the
  // backward's s - lse at most a rounding error above; the bf16 forward's lazy rescaling at most
  // 64), so the exponent stays in range. Same bits as exp2_fast for every argument <= 126.
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
  // The merge-masked forms with an all-ones mask: GCC 12's unmasked ones start from an
  // "undefined" vector and trip -Wmaybe-uninitialized inside its own headers.
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
// vector and trip -Wmaybe-uninitialized inside its own headers.
template <int kHalf>
inline __m256 half(__m512 v) {
  return _mm256_castpd_ps(
      _mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xf, _mm512_castps_pd(v), kHalf));
}
inline float hmax(vf v) {
  const __m256 h = _mm256_max_ps(half<0>(v), half<1>(v));
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}
inline float hsum(vf v) {
  const __m256 h = _mm256_add_ps(half<0>(v), half<1>(v));
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// v rounded to bf16 (round to nearest even, NaN kept quiet: core::to_bf16's rule) into p.
template <bool kTail>
inline void store_bf16(core::bf16* p, vm k, vf v, int64_t /*left*/) {
#if defined(__AVX512BF16__)
  // Hardware rounding (also nearest even; it treats denormal inputs as zero).
  const __m256i b = std::bit_cast<__m256i>(_mm512_cvtneps_pbh(v));
#else
  // Merge-masked shifts and narrowing with all lanes set (GCC 12's unmasked forms trip
  // -Wmaybe-uninitialized inside its headers, as above).
  constexpr __mmask16 all = 0xffff;
  auto high16 = [](__m512i x) { return _mm512_mask_srli_epi32(x, all, x, 16); };
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(high16(u), _mm512_set1_epi32(1));
  const __m512i r = high16(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb));
  const __m512i nan = _mm512_or_si512(high16(u), _mm512_set1_epi32(0x40));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m256i b = _mm512_mask_cvtepi32_epi16(_mm256_setzero_si256(), all,
                                               _mm512_mask_blend_epi32(is_nan, r, nan));
#endif
  if constexpr (kTail)
    _mm256_mask_storeu_epi16(p, k, b);
  else
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), b);
}

// v rounded to bf16 values, kept in fp32 (core::round_bf16's rule): emulated bf16.
inline vf round_bf16_v(vf v) {
  constexpr __mmask16 all = 0xffff;
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_mask_srli_epi32(u, all, u, 16), _mm512_set1_epi32(1));
  const __m512i r =
      _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb),
                       _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  const __m512i nan =
      _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0xffff0000u))),
                      _mm512_set1_epi32(0x00400000));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(is_nan, r, nan));
}

#elif defined(__AVX2__) && defined(__FMA__)
#define LONGSEQ_ROWS_SIMD 1
using vf = __m256;
using vm = __m256i;  // all ones in the lanes that take part
inline constexpr int64_t kLanes = 8;

inline vm all_lanes() {
  return _mm256_set1_epi32(-1);
}
inline vm tail_mask(int64_t left) {
  const int32_t l = static_cast<int32_t>(std::min<int64_t>(left, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(l), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline vf set1(float x) {
  return _mm256_set1_ps(x);
}
// vmaskmov neither reads nor faults on masked-off lanes (they load as 0).
template <bool kTail>
inline vf load(const float* p, vm k) {
  if constexpr (kTail)
    return _mm256_maskload_ps(p, k);
  else
    return _mm256_loadu_ps(p);
}
template <bool kTail>
inline void store(float* p, vm k, vf v) {
  if constexpr (kTail)
    _mm256_maskstore_ps(p, k, v);
  else
    _mm256_storeu_ps(p, v);
}
inline vf add(vf a, vf b) {
  return _mm256_add_ps(a, b);
}
inline vf sub(vf a, vf b) {
  return _mm256_sub_ps(a, b);
}
inline vf mul(vf a, vf b) {
  return _mm256_mul_ps(a, b);
}
inline vf fmadd(vf a, vf b, vf c) {
  return _mm256_fmadd_ps(a, b, c);
}
template <bool kTail>
inline vf add_lanes(vf acc, vm k, vf v) {
  if constexpr (kTail)
    return _mm256_add_ps(acc, _mm256_and_ps(v, _mm256_castsi256_ps(k)));
  else
    return _mm256_add_ps(acc, v);
}
inline vf max_lanes(vf acc, vm k, vf v) {
  return _mm256_max_ps(acc, _mm256_blendv_ps(_mm256_set1_ps(kNegInf), v, _mm256_castsi256_ps(k)));
}

inline vf exp2_v(vf x) {
  // As the AVX-512 form: no clamp, lanes below -126 (and -inf, NaN inside) zeroed by `keep`;
  // 2^n is built in the exponent field, exact for -126 <= n <= 127.
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

inline float hmax(vf v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}
inline float hsum(vf v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// v rounded to bf16 (core::to_bf16's rule: nearest even, NaN kept quiet) into p[0, left).
template <bool kTail>
inline void store_bf16(core::bf16* p, vm /*k*/, vf v, int64_t left) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  // Lanes hold values <= 0xffff, so the signed-to-unsigned pack is exact; it packs within
  // 128-bit halves, and the permute brings lanes 0-3 and 4-7 together.
  const __m256i packed = _mm256_packus_epi32(_mm256_blendv_epi8(r, nan, is_nan), r);
  const __m128i b = _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
  if constexpr (kTail) {
    alignas(16) uint16_t tmp[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b);
    std::memcpy(p, tmp, static_cast<size_t>(std::min<int64_t>(left, 8)) * sizeof(uint16_t));
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), b);
  }
}

// v rounded to bf16 values, kept in fp32 (core::round_bf16's rule): emulated bf16.
inline vf round_bf16_v(vf v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i r =
      _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), high);
  const __m256i nan = _mm256_or_si256(_mm256_and_si256(u, high), _mm256_set1_epi32(0x00400000));
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(r, nan, is_nan));
}
#endif

#if defined(LONGSEQ_ROWS_SIMD)
// v rounded to bf16 into p[0, left): narrowed to bf16 storage, or (emulated bf16) kept in fp32.
template <bool kTail>
inline void store_rounded(core::bf16* p, vm k, vf v, int64_t left) {
  store_bf16<kTail>(p, k, v, left);
}
template <bool kTail>
inline void store_rounded(float* p, vm k, vf v, int64_t /*left*/) {
  store<kTail>(p, k, round_bf16_v(v));
}

// f.operator()<kTail>(j, mask) over [0, n) in chunks of kLanes: full chunks first, then the tail.
template <class F>
inline void chunks(int64_t n, F&& f) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) f.template operator()<false>(j, all_lanes());
  if (j < n) f.template operator()<true>(j, tail_mask(n - j));
}
#endif

// ---- row kernels -----------------------------------------------------------------------------

// x rounded to bf16 (scalar): bf16 storage, or its value in fp32 (emulated bf16).
inline void put_rounded(core::bf16* p, float x) {
  *p = core::to_bf16(x);
}
inline void put_rounded(float* p, float x) {
  *p = core::round_bf16(x);
}

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
#if defined(__AVX512F__) && defined(LONGSEQ_ROWS_SIMD)
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
    // (AVX2 and portable: the compiler vectorises this where it can; striped tiles only.)
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

inline float row_max(const float* s, int64_t n) {
#if defined(LONGSEQ_ROWS_SIMD)
  vf m = set1(kNegInf);
  chunks(n, [&]<bool kTail>(int64_t j, vm k) { m = max_lanes(m, k, load<kTail>(s + j, k)); });
  return hmax(m);
#else
  float m = kNegInf;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  return m;
#endif
}

/// s[j] = 2^(s[j] - m) in place; returns the sum of the results.
inline float exp2_row_inplace(float* s, int64_t n, float m) {
#if defined(LONGSEQ_ROWS_SIMD)
  const vf mv = set1(m);
  vf acc = set1(0.0f);
  chunks(n, [&]<bool kTail>(int64_t j, vm k) {
    const vf p = exp2_v(sub(load<kTail>(s + j, k), mv));
    store<kTail>(s + j, k, p);
    acc = add_lanes<kTail>(acc, k, p);
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
template <bool kMax, class Out>
inline float exp2_row_to_bf16_impl(const float* s, Out* p, int64_t n, float m, float* smax) {
#if defined(LONGSEQ_ROWS_SIMD)
  const vf mv = set1(m);
  vf acc = set1(0.0f);
  [[maybe_unused]] vf mx = set1(kNegInf);
  chunks(n, [&]<bool kTail>(int64_t j, vm k) {
    const vf x = load<kTail>(s + j, k);
    if constexpr (kMax) mx = max_lanes(mx, k, x);
    const vf e = exp2_v(sub(x, mv));
    store_rounded<kTail>(p + j, k, e, n - j);
    acc = add_lanes<kTail>(acc, k, e);
  });
  if constexpr (kMax) *smax = hmax(mx);
  return hsum(acc);
#else
  float sum = 0.0f;
  [[maybe_unused]] float mx = kNegInf;
  for (int64_t j = 0; j < n; ++j) {
    if constexpr (kMax) mx = std::max(mx, s[j]);
    const float e = exp2_fast(s[j] - m);
    put_rounded(p + j, e);
    sum += e;
  }
  if constexpr (kMax) *smax = mx;
  return sum;
#endif
}
template <class Out>
inline float exp2_row_to_bf16(const float* s, Out* p, int64_t n, float m) {
  return exp2_row_to_bf16_impl<false>(s, p, n, m, nullptr);
}
template <class Out>
inline float exp2_row_to_bf16_max(const float* s, Out* p, int64_t n, float m, float* smax) {
  return exp2_row_to_bf16_impl<true>(s, p, n, m, smax);
}

/// x[j] *= c.
inline void scale_row(float* x, int64_t n, float c) {
#if defined(LONGSEQ_ROWS_SIMD)
  const vf cv = set1(c);
  chunks(n, [&]<bool kTail>(int64_t j, vm k) {
    store<kTail>(x + j, k, mul(load<kTail>(x + j, k), cv));
  });
#else
  for (int64_t j = 0; j < n; ++j) x[j] *= c;
#endif
}

/// ds[j] = p[j] * (ds[j] - delta): the softmax backward of one row, dP in ds on entry.
inline void softmax_grad_row(const float* p, float* ds, int64_t n, float delta) {
#if defined(LONGSEQ_ROWS_SIMD)
  const vf dv = set1(delta);
  chunks(n, [&]<bool kTail>(int64_t j, vm k) {
    const vf x = sub(load<kTail>(ds + j, k), dv);
    store<kTail>(ds + j, k, mul(load<kTail>(p + j, k), x));
  });
#else
  for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - delta);
#endif
}

/// ds[j] = bf16(p[j] * (dp[j] - delta)): the bf16 backward's dS, in one pass.
template <class Out>
inline void softmax_grad_row_to_bf16(const float* p, const float* dp, Out* ds, int64_t n,
                                     float delta) {
#if defined(LONGSEQ_ROWS_SIMD)
  const vf dv = set1(delta);
  chunks(n, [&]<bool kTail>(int64_t j, vm k) {
    const vf x = sub(load<kTail>(dp + j, k), dv);
    store_rounded<kTail>(ds + j, k, mul(load<kTail>(p + j, k), x), n - j);
  });
#else
  for (int64_t j = 0; j < n; ++j) put_rounded(ds + j, p[j] * (dp[j] - delta));
#endif
}

/// p[j] = 2^(s[j] - m) in place, and also written to pb as bf16 (bf16 backward: P is needed in
/// fp32 for dS and in bf16 for the dV product).
template <class Out>
inline void exp2_row_inplace_and_bf16(float* s, Out* pb, int64_t n, float m) {
#if defined(LONGSEQ_ROWS_SIMD)
  const vf mv = set1(m);
  chunks(n, [&]<bool kTail>(int64_t j, vm k) {
    const vf e = exp2_v(sub(load<kTail>(s + j, k), mv));
    store<kTail>(s + j, k, e);
    store_rounded<kTail>(pb + j, k, e, n - j);
  });
#else
  exp2_row_inplace(s, n, m);
  for (int64_t j = 0; j < n; ++j) put_rounded(pb + j, s[j]);
#endif
}

/// out[j] = bf16(x[j]) for j < n (the rounding of the rows above, for tests of every variant).
inline void to_bf16_row(const float* x, core::bf16* out, int64_t n) {
#if defined(LONGSEQ_ROWS_SIMD)
  chunks(n, [&]<bool kTail>(int64_t j, vm k) {
    store_bf16<kTail>(out + j, k, load<kTail>(x + j, k), n - j);
  });
#else
  for (int64_t j = 0; j < n; ++j) out[j] = core::to_bf16(x[j]);
#endif
}

}  // namespace longseq::kernels::cpu::LONGSEQ_ISA_NS::rows
