// The element-wise kernels' bodies, compiled once per kernel variant (LONGSEQ_ISA_NS): RMSNorm,
// RoPE, SwiGLU, the partials' merge and delta, and the LM head's row passes. Contracts are in the
// public headers (rmsnorm.hpp, rope.hpp, swiglu.hpp, attention.hpp, lm_head.hpp), whose entry
// points check arguments and call the active variant's table (dispatch.hpp).
//
// These are plain loops the compiler vectorises for the variant's ISA (`omp simd`, including the
// reductions, whose lane order is then fixed by the variant: bits depend on the variant, never on
// the thread count). The one transcendental on a hot path, exp, is exp_fast below, written so it
// vectorises (std::exp is a scalar library call).
#ifndef LONGSEQ_ISA_NS
#error "kernels/cpu/isa/ sources are compiled once per variant with LONGSEQ_ISA_NS set (CMake)"
#endif

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "longseq/core/dtype.hpp"
#include "longseq/kernels/cpu/dispatch.hpp"

namespace longseq::kernels::cpu::LONGSEQ_ISA_NS {

namespace {

using core::bf16;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Below this many elements an OpenMP team costs more than the loop (and idle team threads spin).
constexpr int64_t kParallelMin = int64_t{1} << 16;

// e^x for fp32, Cephes' expf: x = n ln 2 + r with ln 2 split in two (Cody-Waite, so r is exact to
// a few ulps for |x| < 88), e^r by a degree-7 polynomial on [-ln2/2, ln2/2], 2^n built in the
// exponent field. Relative error ~1.2e-7 (tests/kernels). x < -87.3 gives 0 (e^x is then below
// the normal range, where the rows it feeds are negligible), x > 88.7 gives +inf, NaN stays NaN.
// Branch-free, so `omp simd` loops vectorise it.
inline float exp_fast(float x) {
  constexpr float kLo = -87.33654f, kHi = 88.72283f;
  const float xc = std::min(std::max(x, kLo), kHi);
  const float n = std::nearbyint(xc * 1.44269504088896341f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * z + r + 1.0f;
  // n in [-126, 128]: 2^n as bits; n = 128 (x near the top) goes through two factors.
  const int32_t ni = static_cast<int32_t>(n);
  const float s1 = std::bit_cast<float>((std::min(ni, 127) + 127) << 23);
  const float s2 = std::bit_cast<float>((ni - std::min(ni, 127) + 127) << 23);
  float y = p * s1 * s2;
  y = x < kLo ? 0.0f : y;
  y = x > kHi ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;
}

float widen(float x) {
  return x;
}
float widen(bf16 x) {
  return core::to_f32(x);
}

// ---- RMSNorm ------------------------------------------------------------------------------------

void rmsnorm_forward(const float* x, const float* weight, int64_t t, int64_t c, float eps,
                     float* out, float* rstd, int threads) {
#pragma omp parallel for num_threads(std::max(threads, 1)) \
    schedule(static) if (t * c >= kParallelMin)
  for (int64_t i = 0; i < t; ++i) {
    const float* xi = x + i * c;
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < c; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(c) + eps));
    rstd[i] = r;
    float* oi = out + i * c;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) oi[j] = xi[j] * r * weight[j];
  }
}

void rmsnorm_backward(const float* dout, const float* x, const float* weight, const float* rstd,
                      int64_t t, int64_t c, float* dx, float* dweight, bool accumulate,
                      int threads) {
  // dx = rstd * (w*dout - x * rstd^2 / C * sum(w*dout*x)); dweight = sum_t dout * x * rstd.
#pragma omp parallel for num_threads(std::max(threads, 1)) \
    schedule(static) if (t * c >= kParallelMin)
  for (int64_t i = 0; i < t; ++i) {
    const float* di = dout + i * c;
    const float* xi = x + i * c;
    const float r = rstd[i];
    double dot = 0.0;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < c; ++j) dot += static_cast<double>(weight[j]) * di[j] * xi[j];
    const float k = static_cast<float>(dot * r * r / static_cast<double>(c));
    float* o = dx + i * c;
    if (accumulate) {
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) o[j] += r * (weight[j] * di[j] - xi[j] * k);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) o[j] = r * (weight[j] * di[j] - xi[j] * k);
    }
  }
  // The weight gradient sums over tokens; a fixed token order keeps it deterministic.
  for (int64_t i = 0; i < t; ++i) {
    const float* di = dout + i * c;
    const float* xi = x + i * c;
    const float r = rstd[i];
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) dweight[j] += di[j] * xi[j] * r;
  }
}

// ---- RoPE ---------------------------------------------------------------------------------------

void rope_rotate(float* x, int64_t t, int64_t h, int64_t d, const float* cos, const float* sin,
                 const uint8_t* pad, float sign, int threads) {
  const int64_t half = d / 2;
#pragma omp parallel for num_threads(std::max(threads, 1)) \
    schedule(static) if (t * h * d >= kParallelMin)
  for (int64_t r = 0; r < t; ++r) {
    if (pad[r]) continue;
    const float* cs = cos + r * half;
    const float* sn = sin + r * half;
    for (int64_t hh = 0; hh < h; ++hh) {
      float* v = x + (r * h + hh) * d;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half], s = sign * sn[i];
        v[i] = a * cs[i] - b * s;
        v[i + half] = b * cs[i] + a * s;
      }
    }
  }
}

// ---- SwiGLU -------------------------------------------------------------------------------------

void swiglu_forward(const float* gate, const float* up, int64_t n, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float s = 1.0f / (1.0f + exp_fast(-g));
    out[i] = g * s * up[i];
  }
}

void swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n, float* dgate,
                     float* dup) {
  // dgate may alias gate and dup may alias up (the MLP's in-place backward): each element is read
  // before it is written, lane by lane (so no dependence crosses iterations).
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], d = dout[i];
    const float s = 1.0f / (1.0f + exp_fast(-g));
    dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
    dup[i] = d * g * s;
  }
}

// ---- partials -----------------------------------------------------------------------------------

int team(int threads, int64_t rows) {
  // Rows are cheap (D multiply-adds): only split when each thread gets a useful amount.
  constexpr int64_t kRowsPerThread = 256;
  return static_cast<int>(
      std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, rows / kRowsPerThread)));
}

void merge_partials(float* o, float* lse, const float* o_other, const float* lse_other, int64_t t,
                    int64_t h, int64_t d, int threads) {
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

template <class A, class B>
void delta_impl(const A* dout, const B* o, int64_t t, int64_t h, int64_t d, int threads,
                float* delta) {
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

// ---- LM head rows -----------------------------------------------------------------------------

void lm_lse_update(const float* tile, int64_t n, int64_t bv, int64_t v, double* m, double* s,
                   int threads) {
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const float* row = tile + r * v;
    float tm = kNegInf;
#pragma omp simd reduction(max : tm)
    for (int64_t j = 0; j < bv; ++j) tm = std::max(tm, row[j]);
    double ts = 0.0;
#pragma omp simd reduction(+ : ts)
    for (int64_t j = 0; j < bv; ++j) ts += static_cast<double>(exp_fast(row[j] - tm));
    if (tm > m[r]) {
      s[r] = s[r] * std::exp(m[r] - tm) + ts;
      m[r] = tm;
    } else {
      s[r] += ts * std::exp(tm - m[r]);
    }
  }
}

void lm_softmax_rows(float* logits, const float* lse, int64_t n, int64_t v, float grad_scale,
                     int threads) {
#pragma omp parallel for num_threads(std::max(threads, 1)) schedule(static) if (n * v >= (1 << 16))
  for (int64_t r = 0; r < n; ++r) {
    float* row = logits + r * v;
    const float l = lse[r];
#pragma omp simd
    for (int64_t j = 0; j < v; ++j) row[j] = grad_scale * exp_fast(row[j] - l);
  }
}

float exp_row(float x) {
  return exp_fast(x);
}

}  // namespace

extern const PointwiseTable kPointwise;
const PointwiseTable kPointwise = {
    rmsnorm_forward,
    rmsnorm_backward,
    rope_rotate,
    swiglu_forward,
    swiglu_backward,
    merge_partials,
    delta_impl<float, float>,
    delta_impl<bf16, bf16>,
    delta_impl<bf16, float>,
    lm_lse_update,
    lm_softmax_rows,
    exp_row,
};

}  // namespace longseq::kernels::cpu::LONGSEQ_ISA_NS
