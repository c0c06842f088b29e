#include "longseq/train/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "longseq/core/error.hpp"

namespace longseq::train {

void AdamWConfig::validate() const {
  core::require(lr > 0 && std::isfinite(lr), "train", "--lr ", lr, " must be > 0");
  core::require(min_lr >= 0 && min_lr <= lr, "train", "--min-lr ", min_lr, " must be in [0, --lr ",
                lr, "]");
  core::require(warmup >= 0, "train", "--warmup ", warmup, " must be >= 0");
  core::require(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "train", "AdamW betas (", beta1,
                ", ", beta2, ") must be in [0, 1)");
  core::require(eps > 0, "train", "AdamW eps ", eps, " must be > 0");
  core::require(weight_decay >= 0, "train", "--weight-decay ", weight_decay, " must be >= 0");
}

double learning_rate(const AdamWConfig& c, int64_t step, int64_t total) {
  if (step < c.warmup) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup);
  const double span = static_cast<double>(std::max<int64_t>(1, total - c.warmup));
  const double p = std::min(1.0, static_cast<double>(step - c.warmup) / span);
  return c.min_lr + (c.lr - c.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

double sum_squares(const float* g, int64_t n) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(g[i]) * g[i];
  return ss;
}

double global_grad_norm(const float* g, int64_t n, const comm::Group& group) {
  double ss = sum_squares(g, n);
  group.all_reduce(&ss, &ss, 1, core::DType::f64);
  return std::sqrt(ss);
}

double clip_factor(double norm, double clip) {
  return clip <= 0 || !(norm > clip) ? 1.0 : clip / norm;
}

double clip_gradients(float* g, int64_t n, double norm, double clip) {
  const double f = clip_factor(norm, clip);
  if (f == 1.0) return 1.0;
  const float ff = static_cast<float>(f);
  for (int64_t i = 0; i < n; ++i) g[i] *= ff;
  return f;
}

void adamw_step(float* p, const float* g, float* m, float* v, const uint8_t* decay, int64_t n,
                const AdamWConfig& c, double lr, int64_t step) {
  const double t = static_cast<double>(step + 1);
  const float b1 = static_cast<float>(c.beta1), b2 = static_cast<float>(c.beta2);
  const float bc1 = static_cast<float>(1.0 - std::pow(c.beta1, t));
  const float bc2 = static_cast<float>(1.0 - std::pow(c.beta2, t));
  const float flr = static_cast<float>(lr), wd = static_cast<float>(c.weight_decay);
  const float eps = static_cast<float>(c.eps);
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    const float mh = m[i] / bc1;
    const float vh = v[i] / bc2;
    float upd = mh / (std::sqrt(vh) + eps);
    if (decay[i]) upd += wd * p[i];
    p[i] -= flr * upd;
  }
}

}  // namespace longseq::train
