// merge_partials and attention_delta (contracts in attention.hpp). Row-parallel and elementwise:
// each row is computed by one thread with a fixed order, so the bits never depend on threads.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/attention.hpp"
#include "longseq/kernels/cpu/tiles.hpp"

namespace longseq::kernels::cpu {

namespace {

using core::bf16;
using detail::kNegInf;

int team(int threads, int64_t rows) {
  // Rows are cheap (D multiply-adds): only split when each thread gets a useful amount.
  constexpr int64_t kRowsPerThread = 256;
  return static_cast<int>(
      std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, rows / kRowsPerThread)));
}

float widen(float x) {
  return x;
}
float widen(bf16 x) {
  return core::to_f32(x);
}

template <class A, class B>
void delta_impl(const A* dout, const B* o, int64_t t, int64_t h, int64_t d, int threads,
                float* delta) {
  LONGSEQ_CHECK_MSG(t >= 0 && h > 0 && d > 0, "attention_delta t=", t, " h=", h, " d=", d);
  const int64_t rows = t * h;
#pragma omp parallel for num_threads(team(threads, rows)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const A* x = dout + r * d;
    const B* y = o + r * d;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < d; ++j) sum += widen(x[j]) * widen(y[j]);
    delta[r] = sum;
  }
}

}  // namespace

void merge_partials(float* o, float* lse, const float* o_other, const float* lse_other, int64_t t,
                    int64_t h, int64_t d, int threads) {
  LONGSEQ_CHECK_MSG(t >= 0 && h > 0 && d > 0, "merge_partials t=", t, " h=", h, " d=", d);
  const int64_t rows = t * h;
#pragma omp parallel for num_threads(team(threads, rows)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float a = lse[r], b = lse_other[r];
    float* x = o + r * d;
    const float* y = o_other + r * d;
    if (b == kNegInf) {
      // The other side saw nothing. If this side saw nothing either, its o must be 0.
      if (a == kNegInf) std::fill(x, x + d, 0.0f);
      continue;
    }
    if (a == kNegInf) {
      std::copy(y, y + d, x);
      lse[r] = b;
      continue;
    }
    // Weights relative to the larger LSE: exp of a non-positive number, so no overflow however
    // large the logits; log1p keeps the small correction exact when one side dominates.
    const float mx = std::max(a, b);
    const float ea = std::exp(a - mx), eb = std::exp(b - mx);
    const float inv = 1.0f / (ea + eb);
    const float wa = ea * inv, wb = eb * inv;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) x[j] = wa * x[j] + wb * y[j];
    lse[r] = mx + std::log1p(std::exp(-std::fabs(a - b)));
  }
}

void attention_delta(const float* dout, const float* o, int64_t t, int64_t h, int64_t d,
                     int threads, float* delta) {
  delta_impl(dout, o, t, h, d, threads, delta);
}
void attention_delta(const bf16* dout, const bf16* o, int64_t t, int64_t h, int64_t d, int threads,
                     float* delta) {
  delta_impl(dout, o, t, h, d, threads, delta);
}
void attention_delta(const bf16* dout, const float* o, int64_t t, int64_t h, int64_t d, int threads,
                     float* delta) {
  delta_impl(dout, o, t, h, d, threads, delta);
}

}  // namespace longseq::kernels::cpu
