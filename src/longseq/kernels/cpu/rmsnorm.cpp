#include "longseq/kernels/cpu/rmsnorm.hpp"

#include <algorithm>
#include <cmath>

namespace longseq::kernels::cpu {

namespace {
// Below this many elements an OpenMP team costs more than the loop (and idle team threads spin).
constexpr int64_t kParallelMin = int64_t{1} << 16;
}  // namespace

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

}  // namespace longseq::kernels::cpu
