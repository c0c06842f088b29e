#include "longseq/model/layers.hpp"

#include <algorithm>
#include <cmath>

#include "longseq/core/error.hpp"
#include "longseq/kernels/gemm.hpp"

namespace longseq::model {

// Below this many elements an OpenMP team costs more than the loop (and idle team threads spin).
constexpr int64_t kParallelMin = int64_t{1} << 16;

// ---- embedding ---------------------------------------------------------------------------------

void embedding_forward(const int32_t* tokens, const int64_t* pos, const float* weight, int64_t t,
                       int64_t c, int64_t v, float* out) {
  for (int64_t i = 0; i < t; ++i) {
    float* o = out + i * c;
    if (pos[i] < 0) {
      std::fill(o, o + c, 0.0f);
      continue;
    }
    const int32_t id = tokens[i];
    core::require(id >= 0 && id < v, "model", "token id ", id, " at position ", pos[i],
                  " outside the vocabulary [0, ", v, ")");
    std::copy(weight + id * c, weight + (id + 1) * c, o);
  }
}

void embedding_backward(const int32_t* tokens, const int64_t* pos, const float* dout, int64_t t,
                        int64_t c, float* dweight) {
  for (int64_t i = 0; i < t; ++i) {
    if (pos[i] < 0) continue;
    float* dw = dweight + static_cast<int64_t>(tokens[i]) * c;
    const float* d = dout + i * c;
    for (int64_t j = 0; j < c; ++j) dw[j] += d[j];
  }
}

// ---- RMSNorm -----------------------------------------------------------------------------------

void rmsnorm_forward(const float* x, const float* weight, int64_t t, int64_t c, float eps,
                     float* out, float* rstd, int threads) {
#pragma omp parallel for num_threads(std::max(threads, 1)) \
    schedule(static) if (t * c >= kParallelMin)
  for (int64_t i = 0; i < t; ++i) {
    const float* xi = x + i * c;
    double ss = 0.0;
    for (int64_t j = 0; j < c; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(c) + eps));
    rstd[i] = r;
    float* oi = out + i * c;
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
    for (int64_t j = 0; j < c; ++j) dot += static_cast<double>(weight[j]) * di[j] * xi[j];
    const float k = static_cast<float>(dot * r * r / static_cast<double>(c));
    float* o = dx + i * c;
    if (accumulate)
      for (int64_t j = 0; j < c; ++j) o[j] += r * (weight[j] * di[j] - xi[j] * k);
    else
      for (int64_t j = 0; j < c; ++j) o[j] = r * (weight[j] * di[j] - xi[j] * k);
  }
  // The weight gradient sums over tokens; a fixed token order keeps it deterministic.
  for (int64_t i = 0; i < t; ++i) {
    const float* di = dout + i * c;
    const float* xi = x + i * c;
    const float r = rstd[i];
    for (int64_t j = 0; j < c; ++j) dweight[j] += di[j] * xi[j] * r;
  }
}

// ---- linear ------------------------------------------------------------------------------------

void linear_forward(const float* in, const float* weight, int64_t t, int64_t k, int64_t n,
                    float* out, bool accumulate, int threads, core::DType compute) {
  kernels::gemm_parallel(compute, threads, false, true, t, n, k, 1.0f, in, k, weight, k,
                         accumulate ? 1.0f : 0.0f, out, n);
}

void linear_backward(const float* dout, const float* in, const float* weight, int64_t t, int64_t k,
                     int64_t n, float* din, bool accumulate_din, float* dweight, int threads,
                     core::DType compute) {
  // dweight [N, K] += dout^T [N, T] * in [T, K]; first, so that din may overwrite `in`.
  kernels::gemm_parallel(compute, threads, true, false, n, k, t, 1.0f, dout, n, in, k, 1.0f,
                         dweight, k);
  if (din)
    kernels::gemm_parallel(compute, threads, false, false, t, k, n, 1.0f, dout, n, weight, k,
                           accumulate_din ? 1.0f : 0.0f, din, k);
}

// ---- RoPE --------------------------------------------------------------------------------------

RopeTable::RopeTable(const int64_t* pos, int64_t t, int64_t d, double theta)
    : RopeTable(pos, t, rope_frequencies(RopeScaling{}, theta, d, 0, 0)) {}

RopeTable::RopeTable(const int64_t* pos, int64_t t, const RopeFrequencies& f)
    : t_(t), d_(2 * static_cast<int64_t>(f.inv_freq.size())) {
  const int64_t half = d_ / 2;
  cos_.assign(static_cast<size_t>(t * half), 1.0f);
  sin_.assign(static_cast<size_t>(t * half), 0.0f);
  pad_.assign(static_cast<size_t>(t), 0);
  for (int64_t r = 0; r < t; ++r) {
    if (pos[r] < 0) {
      pad_[r] = 1;
      continue;
    }
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(pos[r]) * f.inv_freq[i];
      cos_[r * half + i] = static_cast<float>(std::cos(a) * f.attention_factor);
      sin_[r * half + i] = static_cast<float>(std::sin(a) * f.attention_factor);
    }
  }
}

void RopeTable::rotate(float* x, int64_t h, float sign, int threads) const {
  const int64_t half = d_ / 2;
#pragma omp parallel for num_threads(std::max(threads, 1)) \
    schedule(static) if (t_ * h * d_ >= kParallelMin)
  for (int64_t r = 0; r < t_; ++r) {
    if (pad_[r]) continue;
    const float* cs = cos_.data() + r * half;
    const float* sn = sin_.data() + r * half;
    for (int64_t hh = 0; hh < h; ++hh) {
      float* v = x + (r * h + hh) * d_;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half], s = sign * sn[i];
        v[i] = a * cs[i] - b * s;
        v[i + half] = b * cs[i] + a * s;
      }
    }
  }
}

void RopeTable::forward(float* x, int64_t h, int threads) const {
  rotate(x, h, 1.0f, threads);
}
void RopeTable::backward(float* dx, int64_t h, int threads) const {
  rotate(dx, h, -1.0f, threads);
}

// ---- SwiGLU MLP --------------------------------------------------------------------------------

void swiglu_forward(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float s = 1.0f / (1.0f + std::exp(-g));
    out[i] = g * s * up[i];
  }
}

void swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n, float* dgate,
                     float* dup) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], d = dout[i];
    const float s = 1.0f / (1.0f + std::exp(-g));
    dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
    dup[i] = d * g * s;
  }
}

namespace {
int64_t chunk_of(const MlpDims& d) {
  return d.chunk > 0 ? std::min(d.chunk, d.t) : d.t;
}
}  // namespace

int64_t mlp_workspace_floats(const MlpDims& d) {
  return 3 * std::max<int64_t>(chunk_of(d), 1) * d.f;
}

void mlp_forward(const float* x, const float* wgate, const float* wup, const float* wdown,
                 const MlpDims& d, float* out, bool accumulate, float* workspace, int threads) {
  const int64_t cs = chunk_of(d);
  float* g = workspace;
  float* u = workspace + cs * d.f;
  for (int64_t t0 = 0; t0 < d.t; t0 += cs) {
    const int64_t n = std::min(cs, d.t - t0);
    linear_forward(x + t0 * d.c, wgate, n, d.c, d.f, g, false, threads, d.compute);
    linear_forward(x + t0 * d.c, wup, n, d.c, d.f, u, false, threads, d.compute);
    swiglu_forward(g, u, n * d.f, g);
    linear_forward(g, wdown, n, d.f, d.c, out + t0 * d.c, accumulate, threads, d.compute);
  }
}

void mlp_backward(const float* dout, const float* x, const float* wgate, const float* wup,
                  const float* wdown, const MlpDims& d, float* dx, bool accumulate, float* dwgate,
                  float* dwup, float* dwdown, float* workspace, int threads) {
  const int64_t cs = chunk_of(d);
  float* g = workspace;
  float* u = workspace + cs * d.f;
  float* a = workspace + 2 * cs * d.f;
  for (int64_t t0 = 0; t0 < d.t; t0 += cs) {
    const int64_t n = std::min(cs, d.t - t0);
    const float* xc = x + t0 * d.c;
    const float* dc = dout + t0 * d.c;
    linear_forward(xc, wgate, n, d.c, d.f, g, false, threads, d.compute);
    linear_forward(xc, wup, n, d.c, d.f, u, false, threads, d.compute);
    swiglu_forward(g, u, n * d.f, a);
    // down: da = dout wdown, dwdown += dout^T a
    linear_backward(dc, a, wdown, n, d.f, d.c, a, false, dwdown, threads, d.compute);
    swiglu_backward(a, g, u, n * d.f, g, u);  // g <- dgate, u <- dup
    linear_backward(g, xc, wgate, n, d.c, d.f, dx + t0 * d.c, accumulate, dwgate, threads,
                    d.compute);
    linear_backward(u, xc, wup, n, d.c, d.f, dx + t0 * d.c, true, dwup, threads, d.compute);
  }
}

}  // namespace longseq::model
