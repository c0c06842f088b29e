#pragma once
// AdamW (decoupled weight decay, Loshchilov & Hutter), the cosine learning-rate schedule with
// linear warm-up, and global gradient-norm clipping, all on ZeRO-3 shards.
//
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p)   (wd only where decay=1)
// which is torch.optim.AdamW. t counts from 1.
//
// Schedule: lr(s) = lr_max (s + 1) / warmup for s < warmup; then
//   lr_min + (lr_max - lr_min) (1 + cos(pi * min(1, (s - warmup) / max(1, total - warmup)))) / 2.
#include <cstdint>

#include "longseq/comm/group.hpp"

namespace longseq::train {

struct AdamWConfig {
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup = 5;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  ///< <= 0: no clipping
  /// Throws core::Error("[train] ...") naming the values when out of range.
  void validate() const;
};

/// Learning rate of step `step` (0-based) of `total` steps.
double learning_rate(const AdamWConfig& c, int64_t step, int64_t total);

/// sum of g[i]^2 over n host elements, in fp64, in element order (one rank's part of the norm).
double sum_squares(const float* g, int64_t n);

/// Global L2 norm of the gradient whose shards live on the ranks of `group` (sum_squares of each
/// shard, all-reduced; identical on every rank). Collective.
double global_grad_norm(const float* grad_shard, int64_t n, const comm::Group& group);

/// The factor clipping applies: clip / norm when clip > 0 and norm > clip, else 1 (a NaN norm is
/// not clipped).
double clip_factor(double norm, double clip);

/// Scales the shard by clip_factor(norm, clip) (rounded to fp32; no-op when it is 1). Returns the
/// factor applied.
double clip_gradients(float* grad_shard, int64_t n, double norm, double clip);

/// One AdamW step (t = step + 1) over n shard elements at learning rate lr.
void adamw_step(float* param, const float* grad, float* m, float* v, const uint8_t* decay,
                int64_t n, const AdamWConfig& c, double lr, int64_t step);

}  // namespace longseq::train
