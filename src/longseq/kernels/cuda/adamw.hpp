#pragma once
// The trainer's AdamW step on a GPU: the twin of train::adamw_step (train/optimizer.hpp), same
// formula, same fp32 arithmetic, same bias corrections computed in fp64 on the host and rounded
// to fp32 (torch.optim.AdamW):
//
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p)   (wd only where decay=1)
//
// with t = step + 1. Legend: n shard elements; param, grad, m, v fp32 [n], decay uint8 [n], all
// device memory of the context's GPU. Execution: queued on `exec`'s stream (a CPU context is
// refused naming the kernel); a grid-stride loop, each element by one thread.
#include <cstdint>

#include "longseq/core/device.hpp"

namespace longseq::kernels::cuda {

/// One step's hyper-parameters (train::AdamWConfig's, with this step's learning rate).
struct AdamWStep {
  double lr = 0.0;  ///< this step's learning rate (train::learning_rate)
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  int64_t step = 0;  ///< 0-based step; the bias corrections use t = step + 1
};

/// One AdamW step over n elements: param, m, v updated in place.
void adamw_step(float* param, const float* grad, float* m, float* v, const uint8_t* decay,
                int64_t n, const AdamWStep& s, const core::Exec& exec);

/// The sum of x[i]^2 over n elements (device memory), in fp64: each of a fixed number of blocks
/// sums a fixed stretch in a fixed order, and the host adds the block sums in block order, so
/// the bits depend only on x and n (the gradient norm of train::global_grad_norm, whose own
/// order differs: equal to rounding). Blocking: waits for the stream and returns the value.
double sum_squares(const float* x, int64_t n, const core::Exec& exec);
/// x[i] *= s over n elements (the gradient clipping of train::clip_gradients).
void scale(float* x, int64_t n, float s, const core::Exec& exec);

}  // namespace longseq::kernels::cuda
