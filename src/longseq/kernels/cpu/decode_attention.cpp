#include "longseq/kernels/cpu/decode_attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/kernels/mask.hpp"

namespace longseq::kernels::cpu {

void decode_attention(const float* q, const float* k, const float* v, const int64_t* pos,
                      const DecodeDims& dims, int64_t qpos, int64_t window, double scale, float* o,
                      float* lse, int threads) {
  // Plain copies, not a structured binding: clang before 16 refuses bindings inside OpenMP
  // regions (and in lambdas), which the clang build of CI compiles.
  const int64_t n = dims.n, hq = dims.hq, hkv = dims.hkv, d = dims.d;
  LONGSEQ_CHECK(n >= 0 && hq >= 0 && hkv > 0 && d >= 0 && hq % hkv == 0);
  LONGSEQ_CHECK(n == 0 || (k && v && pos));
  const int64_t row = hkv * d, group = hq / hkv;
  const Mask mask{.causal = true, .window = window};
#pragma omp parallel for num_threads(std::max(threads, 1)) schedule(static)
  for (int64_t h = 0; h < hq; ++h) {
    const float* qh = q + h * d;
    const int64_t g = h / group;
    std::vector<double> s(static_cast<size_t>(n));
    double m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      if (!visible(mask, qpos, pos[i], 0, 0)) {
        s[i] = -INFINITY;
        continue;
      }
      const float* ki = k + i * row + g * d;
      float dot = 0;
      for (int64_t e = 0; e < d; ++e) dot += qh[e] * ki[e];
      s[i] = scale * static_cast<double>(dot);
      m = std::max(m, s[i]);
    }
    float* oh = o + h * d;
    if (m == -INFINITY) {  // no visible key on this shard
      std::fill(oh, oh + d, 0.0f);
      lse[h] = -INFINITY;
      continue;
    }
    std::vector<double> acc(static_cast<size_t>(d), 0.0);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (s[i] == -INFINITY) continue;
      const double pw = std::exp(s[i] - m);
      sum += pw;
      const float* vi = v + i * row + g * d;
      for (int64_t e = 0; e < d; ++e) acc[e] += pw * static_cast<double>(vi[e]);
    }
    for (int64_t e = 0; e < d; ++e) oh[e] = static_cast<float>(acc[e] / sum);
    lse[h] = static_cast<float>(m + std::log(sum));
  }
}

}  // namespace longseq::kernels::cpu
