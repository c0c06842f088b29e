#include "longseq/kernels/ref/decode_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/kernels/mask.hpp"

namespace longseq::kernels::ref {

void decode_attention(const double* q, const double* k, const double* v, const int64_t* pos,
                      const DecodeDims& dims, int64_t qpos, int64_t window, double scale, double* o,
                      double* lse) {
  // Plain copies, not a structured binding: clang before 16 refuses bindings inside OpenMP
  // regions (and in lambdas), which the clang build of CI compiles.
  const int64_t n = dims.n, hq = dims.hq, hkv = dims.hkv, d = dims.d;
  core::require(n >= 0 && hq > 0 && hkv > 0 && d > 0, "kernels.ref",
                "decode attention dims must be n >= 0 and Hq, Hkv, D > 0; got n ", n, ", Hq ", hq,
                ", Hkv ", hkv, ", D ", d);
  core::require(hq % hkv == 0, "kernels.ref", "decode attention: Hkv ", hkv, " does not divide Hq ",
                hq);
  core::require(n == 0 || pos != nullptr, "kernels.ref",
                "decode attention: key positions are null");
  const Mask mask{.causal = true, .window = window};
  for (int64_t h = 0; h < hq; ++h) {
    const int64_t g = h / (hq / hkv);
    std::vector<double> s(static_cast<size_t>(n), -std::numeric_limits<double>::infinity());
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < n; ++i) {
      if (!visible(mask, qpos, pos[i], 0, 0)) continue;
      double dot = 0;
      for (int64_t e = 0; e < d; ++e) dot += q[h * d + e] * k[(i * hkv + g) * d + e];
      s[static_cast<size_t>(i)] = scale * dot;
      m = std::max(m, s[static_cast<size_t>(i)]);
    }
    double* oh = o + h * d;
    for (int64_t e = 0; e < d; ++e) oh[e] = 0;
    if (m == -std::numeric_limits<double>::infinity()) {
      lse[h] = m;
      continue;
    }
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(s[static_cast<size_t>(i)] - m);
    for (int64_t i = 0; i < n; ++i) {
      const double p = std::exp(s[static_cast<size_t>(i)] - m) / sum;
      for (int64_t e = 0; e < d; ++e) oh[e] += p * v[(i * hkv + g) * d + e];
    }
    lse[h] = m + std::log(sum);
  }
}

}  // namespace longseq::kernels::ref
