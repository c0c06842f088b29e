#include "longseq/kernels/cpu/lm_head.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/kernels/cpu/dispatch.hpp"
#include "longseq/kernels/gemm.hpp"

namespace longseq::kernels::cpu {

int64_t count_targets(const int32_t* labels, int64_t t, int64_t v, int32_t ignore_index) {
  int64_t n = 0;
  for (int64_t i = 0; i < t; ++i) {
    if (labels[i] == ignore_index) continue;
    core::require(labels[i] >= 0 && labels[i] < v, "model", "label ", labels[i], " at row ", i,
                  " outside the vocabulary [0, ", v, ") and not the ignore index ", ignore_index);
    ++n;
  }
  return n;
}

int64_t lm_head_token_tile(const LmHeadDims& d, const LmHeadOptions& o) {
  int64_t bs = o.token_tile;
  // A 128 MiB logits tile: the GEMMs stay efficient (>= 256 rows at V = 128K) while the memory is
  // independent of T (0.8% of the [T, V] logits at T = 32K, V = 128K).
  // Rounded to whole pairs of 128-row GEMM panels so two threads split a tile evenly.
  if (bs <= 0) {
    bs = std::clamp<int64_t>((int64_t{1} << 25) / std::max<int64_t>(d.v, 1), 16, 1024);
    if (bs >= 256) bs = bs / 256 * 256;
  }
  return std::max<int64_t>(1, std::min(bs, std::max<int64_t>(d.t, 1)));
}

int64_t lm_head_fused_workspace_floats(const LmHeadDims& d, const LmHeadOptions& o) {
  return lm_head_token_tile(d, o) * d.v;
}

namespace {

// Rows [0, n) of `logits` [n, V] (their lse known): returns the loss sum, then the rows become
// grad_scale * (softmax - onehot), or 0 for ignored rows. Per-row losses are summed in row order
// afterwards, so the result does not depend on the thread count. The exponentials run in the
// active kernel variant (kernels/cpu/isa/pointwise.cpp).
double softmax_grad_rows(float* logits, const float* lse, const int32_t* labels, int64_t n,
                         int64_t v, double grad_scale, int32_t ignore, int threads) {
  double sum = 0.0;
  for (int64_t r = 0; r < n; ++r)
    if (labels[r] != ignore) sum += static_cast<double>(lse[r]) - logits[r * v + labels[r]];
  const float gs = static_cast<float>(grad_scale);
  active_pointwise().lm_softmax_rows(logits, lse, n, v, gs, threads);
  for (int64_t r = 0; r < n; ++r) {
    float* row = logits + r * v;
    if (labels[r] == ignore)
      std::fill(row, row + v, 0.0f);
    else
      row[labels[r]] -= gs;  // the one-hot term is subtracted (Algorithm 3 prints "+ E")
  }
  return sum;
}

// Online logsumexp of one vocabulary tile of rows [n, bv] (row stride v), merged into (m, s):
// running max and sum of exp(x - m), Algorithm 3 lines 5-6. Rows are independent, so they are
// split over threads without changing any row's bits; the exponent is taken in float (x - tm <=
// 0, so no overflow) and summed in double.
void lse_update(const float* tile, int64_t n, int64_t bv, int64_t v, double* m, double* s,
                int threads) {
  active_pointwise().lm_lse_update(tile, n, bv, v, m, s, threads);
}

}  // namespace

LossPart lm_head_ce_fused(const float* hidden, const float* weight, const int32_t* labels,
                          const LmHeadDims& d, double grad_scale, float* dhidden, float* dweight,
                          const LmHeadOptions& o) {
  const int threads = o.exec.cpu_threads("lm_head_ce_fused");
  LossPart out;
  out.count = count_targets(labels, d.t, d.v, o.ignore_index);
  const int64_t bs = lm_head_token_tile(d, o);
  const int64_t bv = std::max<int64_t>(1, std::min(o.vocab_tile > 0 ? o.vocab_tile : d.v, d.v));
  core::Buffer<float> logits(static_cast<size_t>(bs * d.v));
  std::vector<double> m(static_cast<size_t>(bs)), s(static_cast<size_t>(bs));
  std::vector<float> lse(static_cast<size_t>(bs));
  for (int64_t t0 = 0; t0 < d.t; t0 += bs) {
    const int64_t n = std::min(bs, d.t - t0);
    const float* h = hidden + t0 * d.c;
    std::fill(m.begin(), m.end(), -std::numeric_limits<double>::infinity());
    std::fill(s.begin(), s.end(), 0.0);
    for (int64_t v0 = 0; v0 < d.v; v0 += bv) {
      const int64_t nv = std::min(bv, d.v - v0);
      // logits[:, v0:v0+nv] = H_i W_j^T
      kernels::gemm_parallel(o.compute, threads, false, true, n, nv, d.c, 1.0f, h, d.c,
                             weight + v0 * d.c, d.c, 0.0f, logits.data() + v0, d.v);
      lse_update(logits.data() + v0, n, nv, d.v, m.data(), s.data(), threads);
    }
    for (int64_t r = 0; r < n; ++r) lse[r] = static_cast<float>(m[r] + std::log(s[r]));
    out.sum += softmax_grad_rows(logits.data(), lse.data(), labels + t0, n, d.v, grad_scale,
                                 o.ignore_index, threads);
    // dH_i = dLogits W  [n, C];  dW += dLogits^T H_i  [V, C]
    kernels::gemm_parallel(o.compute, threads, false, false, n, d.c, d.v, 1.0f, logits.data(), d.v,
                           weight, d.c, 0.0f, dhidden + t0 * d.c, d.c);
    kernels::gemm_parallel(o.compute, threads, true, false, d.v, d.c, n, 1.0f, logits.data(), d.v,
                           h, d.c, 1.0f, dweight, d.c);
  }
  return out;
}

LossPart lm_head_ce_unfused(const float* hidden, const float* weight, const int32_t* labels,
                            const LmHeadDims& d, double grad_scale, float* dhidden, float* dweight,
                            const LmHeadOptions& o) {
  const int threads = o.exec.cpu_threads("lm_head_ce_unfused");
  LossPart out;
  out.count = count_targets(labels, d.t, d.v, o.ignore_index);
  core::Buffer<float> logits(static_cast<size_t>(d.t * d.v));
  kernels::gemm_parallel(o.compute, threads, false, true, d.t, d.v, d.c, 1.0f, hidden, d.c, weight,
                         d.c, 0.0f, logits.data(), d.v);
  std::vector<double> m(static_cast<size_t>(d.t), -std::numeric_limits<double>::infinity());
  std::vector<double> s(static_cast<size_t>(d.t), 0.0);
  lse_update(logits.data(), d.t, d.v, d.v, m.data(), s.data(), threads);
  std::vector<float> lse(static_cast<size_t>(d.t));
  for (int64_t r = 0; r < d.t; ++r) lse[r] = static_cast<float>(m[r] + std::log(s[r]));
  out.sum = softmax_grad_rows(logits.data(), lse.data(), labels, d.t, d.v, grad_scale,
                              o.ignore_index, threads);
  kernels::gemm_parallel(o.compute, threads, false, false, d.t, d.c, d.v, 1.0f, logits.data(), d.v,
                         weight, d.c, 0.0f, dhidden, d.c);
  kernels::gemm_parallel(o.compute, threads, true, false, d.v, d.c, d.t, 1.0f, logits.data(), d.v,
                         hidden, d.c, 1.0f, dweight, d.c);
  return out;
}

}  // namespace longseq::kernels::cpu
