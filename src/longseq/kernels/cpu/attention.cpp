// Flash-style attention block kernels on the CPU (contracts in attention.hpp).
//
// Forward, per work item (query head h, query tile i), keys in tiles j = 0, 1, ...:
//   S   = (scale * log2 e) Q_i K_j^T                      GEMM [Bq, Bk], log2 domain
//   S  += mask (partial tiles only; empty tiles skipped; contiguous band tiles trimmed)
//   m'  = max(m, rowmax S);  P = 2^(S - m');  c = 2^(m - m')
//   l   = c l + rowsum P;    O_i = c O_i + P V_j          GEMM [Bq, D] accumulated in o itself
// then O_i /= l and lse = ln 2 (m + log2 l). The only scratch is one [Bq, Bk] tile per thread.
//
// Backward, per work unit (kv head, chunk c of key tiles), for each key tile j of the chunk, each
// query head of the group and each query tile i (all fixed orders):
//   P    = 2^((scale log2 e) Q_i K_j^T + mask - log2 e * lse_i)
//   dV_j += P^T dO_i;  dP = dO_i V_j^T;  dS = P (dP - delta_i)
//   dK_j += scale dS^T Q_i;  dQ_i += scale dS K_j
// dK_j, dV_j belong to one unit; dQ_i is shared by the C chunks, hence the per-chunk dq buffers
// reduced in a fixed order (attention_backward_chunks), which keeps the bits independent of the
// thread count.
#include "longseq/kernels/cpu/attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/tiles.hpp"
#include "longseq/kernels/gemm.hpp"

namespace longseq::kernels::cpu {

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

void check_dims(const AttnDims& dm) {
  LONGSEQ_CHECK_MSG(
      dm.tq >= 0 && dm.tk >= 0 && dm.hq > 0 && dm.hkv > 0 && dm.d > 0 && dm.hq % dm.hkv == 0,
      "attention dims tq=", dm.tq, " tk=", dm.tk, " hq=", dm.hq, " hkv=", dm.hkv, " d=", dm.d);
}

void check_tokens(const Mask& mask, const Tokens& qt, const Tokens& kt, const AttnDims& dm) {
  LONGSEQ_CHECK((qt.pos || dm.tq == 0) && (kt.pos || dm.tk == 0));
  if (mask.docs) LONGSEQ_CHECK((qt.doc || dm.tq == 0) && (kt.doc || dm.tk == 0));
  if (mask.block_mask) LONGSEQ_CHECK(mask.block_size > 0 && mask.num_blocks > 0);
}

// Overloads so that one template serves both input types.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_f32(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bf16* a,
          int64_t lda, const bf16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// ---- forward ----------------------------------------------------------------------------------

constexpr int64_t kBq = kForwardTileQ, kBk = kForwardTileK;

template <class T>
constexpr bool kIsBf16 = std::is_same_v<T, bf16>;

template <class T>
size_t forward_slice_floats() {
  size_t n = round_up(kBq * kBk) + 2 * round_up(kBq);      // S/P tile, m, l
  if constexpr (kIsBf16<T>) n += round_up(kBq * kBk / 2);  // P in bf16
  return n;
}

template <class T>
void forward_item(const T* q, const T* k, const T* v, const Tokens& qt, const Tokens& kt,
                  const Mask& mask, float scale, const AttnDims& dm, int64_t h, int64_t qi,
                  float* slice, float* o, float* lse) {
  const int64_t d = dm.d, g = dm.hq / dm.hkv, kvh = h / g;
  const int64_t r0 = qi * kBq, br = std::min(kBq, dm.tq - r0);
  const int64_t ldq = dm.hq * d, ldk = dm.hkv * d;
  float* s = slice;
  float* m = slice + round_up(kBq * kBk);
  float* l = m + round_up(kBq);
  [[maybe_unused]] bf16* pb = reinterpret_cast<bf16*>(l + round_up(kBq));
  const T* qtile = q + (r0 * dm.hq + h) * d;
  float* otile = o + (r0 * dm.hq + h) * d;
  for (int64_t r = 0; r < br; ++r) {
    std::fill(otile + r * ldq, otile + r * ldq + d, 0.0f);
    m[r] = kNegInf;
    l[r] = 0.0f;
  }
  const float alpha = scale * kLog2e;
  const detail::TileInfo qinfo = detail::tile_info(qt, r0, r0 + br, mask.docs);
  if (qinfo.any_valid) {
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
      gemm(false, true, nr, nc, d, alpha, qtile + rc.r0 * ldq, ldq, k + (kc0 * dm.hkv + kvh) * d,
           ldk, 0.0f, s, kBk);
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t r = rc.r0 + i;  // row of the query tile
        float* row = s + i * kBk;
        if (kind == TileKind::partial)
          detail::mask_row(mask, qt.pos[r0 + r], mask.docs ? qt.doc[r0 + r] : 0, kt.pos + kc0,
                           mask.docs ? kt.doc + kc0 : nullptr, kstart, row, nc);
        const float mnew = std::max(m[r], detail::row_max(row, nc));
        if (mnew == kNegInf) {
          // Nothing visible in this row so far: P = 0 (2^(-inf - -inf) would be NaN).
          if constexpr (kIsBf16<T>)
            std::fill(pb + i * kBk, pb + i * kBk + nc, bf16{});
          else
            std::fill(row, row + nc, 0.0f);
          continue;
        }
        float sum;
        if constexpr (kIsBf16<T>)
          sum = detail::exp2_row_to_bf16(row, pb + i * kBk, nc, mnew);
        else
          sum = detail::exp2_row_inplace(row, nc, mnew);
        if (m[r] != mnew && m[r] != kNegInf) {
          const float c = std::exp2(m[r] - mnew);
          detail::scale_row(otile + r * ldq, d, c);
          l[r] *= c;
        }
        l[r] += sum;
        m[r] = mnew;
      }
      const T* vtile = v + (kc0 * dm.hkv + kvh) * d;
      if constexpr (kIsBf16<T>)
        gemm(false, false, nr, d, nc, 1.0f, pb, kBk, vtile, ldk, 1.0f, otile + rc.r0 * ldq, ldq);
      else
        gemm(false, false, nr, d, nc, 1.0f, s, kBk, vtile, ldk, 1.0f, otile + rc.r0 * ldq, ldq);
    }
  }
  for (int64_t r = 0; r < br; ++r) {
    float* lrow = lse + (r0 + r) * dm.hq + h;
    if (l[r] > 0.0f) {
      const float inv = 1.0f / l[r];
      float* orow = otile + r * ldq;
      detail::scale_row(orow, d, inv);
      *lrow = kLn2 * (m[r] + std::log2(l[r]));
    } else {
      *lrow = kNegInf;  // o row is already 0
    }
  }
}

template <class T>
void forward_impl(const T* q, const T* k, const T* v, const Tokens& qt, const Tokens& kt,
                  const Mask& mask, float scale, const AttnDims& dm, int threads,
                  std::span<float> ws, float* o, float* lse) {
  check_dims(dm);
  check_tokens(mask, qt, kt, dm);
  LONGSEQ_CHECK_MSG(ws.size() >= attention_forward_workspace_floats(dm, threads),
                    "forward workspace ", ws.size(), " < ",
                    attention_forward_workspace_floats(dm, threads));
  if (dm.tq == 0) return;
  const int64_t nqt = ceil_div(dm.tq, kBq), items = nqt * dm.hq;
  const int nt = clamp_threads(threads, items);
  const size_t slice = forward_slice_floats<T>();
#pragma omp parallel num_threads(nt)
  {
    float* my = ws.data() + static_cast<size_t>(omp_get_thread_num()) * slice;
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

// Work units the backward aims for before it starts splitting kv heads into chunks (see
// attention_backward_chunks in the header for worked examples).
constexpr int64_t kBackwardUnits = 8;

template <class T>
size_t backward_slice_floats() {
  size_t n = 2 * round_up(kBbq * kBbk);                          // P, dP/dS
  if constexpr (kIsBf16<T>) n += 2 * round_up(kBbq * kBbk / 2);  // P, dS in bf16
  return n;
}

template <class T>
void backward_unit(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                   const float* delta, const Tokens& qt, const Tokens& kt, const Mask& mask,
                   float scale, const AttnDims& dm, int64_t kvh, int64_t chunk, int64_t chunks,
                   float* slice, float* dq_target, float* dk, float* dv) {
  const int64_t d = dm.d, g = dm.hq / dm.hkv;
  const int64_t ldq = dm.hq * d, ldk = dm.hkv * d;
  const int64_t nqt = ceil_div(dm.tq, kBbq), nkt = ceil_div(dm.tk, kBbk);
  float* p = slice;
  float* ds = slice + round_up(kBbq * kBbk);
  [[maybe_unused]] bf16* pb = reinterpret_cast<bf16*>(ds + round_up(kBbq * kBbk));
  [[maybe_unused]] bf16* dsb = pb + 2 * round_up(kBbq * kBbk / 2);
  const float alpha = scale * kLog2e;
  for (int64_t kj = chunk; kj < nkt; kj += chunks) {
    const int64_t c0 = kj * kBbk, bc = std::min(kBbk, dm.tk - c0);
    const detail::TileInfo kinfo = detail::tile_info(kt, c0, c0 + bc, mask.docs);
    if (!kinfo.any_valid) continue;
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
        const T* qtile = q + (q0 * dm.hq + h) * d;
        const T* dotile = dout + (q0 * dm.hq + h) * d;
        const T* ktile = k + (kc0 * dm.hkv + kvh) * d;
        const T* vtile = v + (kc0 * dm.hkv + kvh) * d;
        float* dktile = dk + (kc0 * dm.hkv + kvh) * d;
        float* dvtile = dv + (kc0 * dm.hkv + kvh) * d;
        float* dqtile = dq_target + (q0 * dm.hq + h) * d;
        gemm(false, true, nr, nc, d, alpha, qtile, ldq, ktile, ldk, 0.0f, p, kBbk);
        for (int64_t i = 0; i < nr; ++i) {
          float* row = p + i * kBbk;
          const float lse_r = lse[(q0 + i) * dm.hq + h];
          if (lse_r == kNegInf) {
            std::fill(row, row + nc, 0.0f);  // saw nothing anywhere: no gradient
            if constexpr (kIsBf16<T>) std::fill(pb + i * kBbk, pb + i * kBbk + nc, bf16{});
            continue;
          }
          if (kind == TileKind::partial)
            detail::mask_row(mask, qt.pos[q0 + i], mask.docs ? qt.doc[q0 + i] : 0, kt.pos + kc0,
                             mask.docs ? kt.doc + kc0 : nullptr, kstart, row, nc);
          if constexpr (kIsBf16<T>)
            detail::exp2_row_inplace_and_bf16(row, pb + i * kBbk, nc, lse_r * kLog2e);
          else
            detail::exp2_row_inplace(row, nc, lse_r * kLog2e);
        }
        // dV_j += P^T dO_i
        if constexpr (kIsBf16<T>)
          gemm(true, false, nc, d, nr, 1.0f, pb, kBbk, dotile, ldq, 1.0f, dvtile, ldk);
        else
          gemm(true, false, nc, d, nr, 1.0f, p, kBbk, dotile, ldq, 1.0f, dvtile, ldk);
        // dP = dO_i V_j^T, then dS = P (dP - delta)
        gemm(false, true, nr, nc, d, 1.0f, dotile, ldq, vtile, ldk, 0.0f, ds, kBbk);
        for (int64_t i = 0; i < nr; ++i) {
          float* dsrow = ds + i * kBbk;
          const float* prow = p + i * kBbk;
          const float dl = delta[(q0 + i) * dm.hq + h];
          if (lse[(q0 + i) * dm.hq + h] == kNegInf) {
            if constexpr (kIsBf16<T>)
              std::fill(dsb + i * kBbk, dsb + i * kBbk + nc, bf16{});
            else
              std::fill(dsrow, dsrow + nc, 0.0f);
          } else if constexpr (kIsBf16<T>) {
            detail::softmax_grad_row_to_bf16(prow, dsrow, dsb + i * kBbk, nc, dl);
          } else {
            detail::softmax_grad_row(prow, dsrow, nc, dl);
          }
        }
        // dK_j += scale dS^T Q_i;  dQ_i += scale dS K_j
        if constexpr (kIsBf16<T>) {
          gemm(true, false, nc, d, nr, scale, dsb, kBbk, qtile, ldq, 1.0f, dktile, ldk);
          gemm(false, false, nr, d, nc, scale, dsb, kBbk, ktile, ldk, 1.0f, dqtile, ldq);
        } else {
          gemm(true, false, nc, d, nr, scale, ds, kBbk, qtile, ldq, 1.0f, dktile, ldk);
          gemm(false, false, nr, d, nc, scale, ds, kBbk, ktile, ldk, 1.0f, dqtile, ldq);
        }
      }
    }
  }
}

template <class T>
void backward_impl(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                   const float* delta, const Tokens& qt, const Tokens& kt, const Mask& mask,
                   float scale, const AttnDims& dm, int threads, std::span<float> ws, float* dq,
                   float* dk, float* dv) {
  check_dims(dm);
  check_tokens(mask, qt, kt, dm);
  const size_t need = attention_backward_workspace_floats(dm, threads);
  LONGSEQ_CHECK_MSG(ws.size() >= need, "backward workspace ", ws.size(), " < ", need);
  if (dm.tq == 0 || dm.tk == 0) return;
  const int64_t chunks = attention_backward_chunks(dm);
  const int64_t units = dm.hkv * chunks;
  const size_t dq_size = static_cast<size_t>(dm.tq * dm.hq * dm.d);
  const int nt = clamp_threads(threads, std::max<int64_t>(units, dm.tq));
  const size_t slice = backward_slice_floats<T>();
  // dq buffers for chunks 1..C-1 sit after the largest possible set of thread slices.
  float* bufs = ws.data() + static_cast<size_t>(std::max(threads, 1)) * slice;
#pragma omp parallel num_threads(nt)
  {
    if (chunks > 1) {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < dm.tq; ++i)
        for (int64_t c = 1; c < chunks; ++c) {
          float* b = bufs + (c - 1) * dq_size + i * dm.hq * dm.d;
          std::fill(b, b + dm.hq * dm.d, 0.0f);
        }
    }
    float* my = ws.data() + static_cast<size_t>(omp_get_thread_num()) * slice;
    // Units (kv head, chunk); the team may be larger than the number of units (it is sized for
    // the buffer passes too): surplus threads find no unit.
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t kvh = u / chunks, c = u % chunks;
      float* target = c == 0 ? dq : bufs + (c - 1) * dq_size;
      backward_unit(q, k, v, dout, lse, delta, qt, kt, mask, scale, dm, kvh, c, chunks, my, target,
                    dk, dv);
    }
    if (chunks > 1) {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < dm.tq; ++i) {
        float* row = dq + i * dm.hq * dm.d;
        for (int64_t c = 1; c < chunks; ++c) {
          const float* b = bufs + (c - 1) * dq_size + i * dm.hq * dm.d;
#pragma omp simd
          for (int64_t x = 0; x < dm.hq * dm.d; ++x) row[x] += b[x];
        }
      }
    }
  }
}

}  // namespace

// ---- public entry points ------------------------------------------------------------------------

size_t attention_forward_workspace_floats(const AttnDims& dims, int threads) {
  (void)dims;
  // bf16 slices are the larger ones; one size for both types keeps the query type-free.
  return static_cast<size_t>(std::max(threads, 1)) * forward_slice_floats<bf16>();
}

void attention_block_forward(const float* q, const float* k, const float* v, const Tokens& qt,
                             const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                             int threads, std::span<float> workspace, float* o, float* lse) {
  forward_impl(q, k, v, qt, kt, mask, scale, dims, threads, workspace, o, lse);
}

void attention_block_forward(const bf16* q, const bf16* k, const bf16* v, const Tokens& qt,
                             const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                             int threads, std::span<float> workspace, float* o, float* lse) {
  forward_impl(q, k, v, qt, kt, mask, scale, dims, threads, workspace, o, lse);
}

int64_t attention_backward_chunks(const AttnDims& dims) {
  const int64_t nkt = std::max<int64_t>(1, ceil_div(dims.tk, kBbk));
  const int64_t want = ceil_div(kBackwardUnits, std::max<int64_t>(dims.hkv, 1));
  return std::clamp<int64_t>(want, 1, nkt);
}

size_t attention_backward_workspace_floats(const AttnDims& dims, int threads) {
  const size_t slices = static_cast<size_t>(std::max(threads, 1)) * backward_slice_floats<bf16>();
  const size_t bufs = static_cast<size_t>(attention_backward_chunks(dims) - 1) *
                      static_cast<size_t>(dims.tq * dims.hq * dims.d);
  return slices + bufs;
}

void attention_block_backward(const float* q, const float* k, const float* v, const float* dout,
                              const float* lse, const float* delta, const Tokens& qt,
                              const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                              int threads, std::span<float> workspace, float* dq, float* dk,
                              float* dv) {
  backward_impl(q, k, v, dout, lse, delta, qt, kt, mask, scale, dims, threads, workspace, dq, dk,
                dv);
}

void attention_block_backward(const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
                              const float* lse, const float* delta, const Tokens& qt,
                              const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                              int threads, std::span<float> workspace, float* dq, float* dk,
                              float* dv) {
  backward_impl(q, k, v, dout, lse, delta, qt, kt, mask, scale, dims, threads, workspace, dq, dk,
                dv);
}

}  // namespace longseq::kernels::cpu
