// LM head + cross-entropy in fp64: one row of logits [V] at a time, softmax with the max
// subtracted. The [T, V] logits are never stored, as in the fused fast version.
#include "longseq/kernels/ref/cross_entropy.hpp"

#include <cmath>
#include <vector>

#include "longseq/core/error.hpp"

namespace longseq::kernels::ref {
namespace {

void check(const int32_t* labels, const LmHeadDims& d, int32_t ignore_index) {
  core::require(d.t >= 0 && d.c >= 0 && d.v > 0, "kernels.ref",
                "lm head dims must be t, c >= 0 and v > 0; got t ", d.t, " c ", d.c, " v ", d.v);
  for (int64_t t = 0; t < d.t; ++t)
    core::require(labels[t] == ignore_index || (labels[t] >= 0 && labels[t] < d.v), "kernels.ref",
                  "label ", labels[t], " of token ", t, " is outside [0, ", d.v,
                  ") and is not the ignore index ", ignore_index);
}

// logits of token t into z [V]; returns their logsumexp.
double token_logits(const double* hidden, const double* weight, const LmHeadDims& d, int64_t t,
                    std::vector<double>& z) {
  const double* h = hidden + t * d.c;
  double mx = -INFINITY;
  for (int64_t v = 0; v < d.v; ++v) {
    const double* w = weight + v * d.c;
    double s = 0.0;
    for (int64_t c = 0; c < d.c; ++c) s += h[c] * w[c];
    z[v] = s;
    mx = std::fmax(mx, s);
  }
  double sum = 0.0;
  for (int64_t v = 0; v < d.v; ++v) sum += std::exp(z[v] - mx);
  return mx + std::log(sum);
}

}  // namespace

CrossEntropy lm_head_ce_forward(const double* hidden, const double* weight, const int32_t* labels,
                                const LmHeadDims& dims, double* token_loss, double* lse,
                                int32_t ignore_index) {
  check(labels, dims, ignore_index);
  CrossEntropy r;
  std::vector<double> z(static_cast<size_t>(dims.v));
  for (int64_t t = 0; t < dims.t; ++t) {
    const double l = token_logits(hidden, weight, dims, t, z);
    if (lse) lse[t] = l;
    double loss = 0.0;
    if (labels[t] != ignore_index) {
      loss = l - z[labels[t]];
      r.sum += loss;
      ++r.count;
    }
    if (token_loss) token_loss[t] = loss;
  }
  return r;
}

void lm_head_ce_backward(const double* hidden, const double* weight, const int32_t* labels,
                         const LmHeadDims& dims, double grad_scale, double* dhidden,
                         double* dweight, int32_t ignore_index) {
  check(labels, dims, ignore_index);
  for (int64_t x = 0; x < dims.t * dims.c; ++x) dhidden[x] = 0.0;
  for (int64_t x = 0; x < dims.v * dims.c; ++x) dweight[x] = 0.0;
  std::vector<double> z(static_cast<size_t>(dims.v));
  for (int64_t t = 0; t < dims.t; ++t) {
    if (labels[t] == ignore_index) continue;
    const double l = token_logits(hidden, weight, dims, t, z);
    const double* h = hidden + t * dims.c;
    double* dh = dhidden + t * dims.c;
    // d loss_t / d logits = softmax(logits) - onehot(label).
    for (int64_t v = 0; v < dims.v; ++v) {
      const double dz = grad_scale * (std::exp(z[v] - l) - (v == labels[t] ? 1.0 : 0.0));
      const double* w = weight + v * dims.c;
      double* dw = dweight + v * dims.c;
      for (int64_t c = 0; c < dims.c; ++c) {
        dh[c] += dz * w[c];
        dw[c] += dz * h[c];
      }
    }
  }
}

}  // namespace longseq::kernels::ref
