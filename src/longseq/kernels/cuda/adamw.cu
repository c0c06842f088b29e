// AdamW on a GPU (contract in adamw.hpp): train::adamw_step's loop body, one element per thread of
// a grid-stride loop; the scalars are computed on the host exactly as the CPU step computes them.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/adamw.hpp"
#include "longseq/kernels/cuda/launch.cuh"

namespace longseq::kernels::cuda {

namespace {

using detail::kBlock;

struct Scalars {
  float b1, b2, bc1, bc2, lr, wd, eps;
};

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, const uint8_t* decay,
                             int64_t n, Scalars k) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float gi = g[i];
    const float mi = k.b1 * m[i] + (1.0f - k.b1) * gi;
    const float vi = k.b2 * v[i] + (1.0f - k.b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float mh = mi / k.bc1;
    const float vh = vi / k.bc2;
    float upd = mh / (sqrtf(vh) + k.eps);
    if (decay[i]) upd += k.wd * p[i];
    p[i] -= k.lr * upd;
  }
}

}  // namespace

void adamw_step(float* param, const float* grad, float* m, float* v, const uint8_t* decay,
                int64_t n, const AdamWStep& s, const core::Exec& exec) {
  const cudaStream_t st = detail::stream(exec, "adamw_step");
  LONGSEQ_CHECK_MSG(n >= 0 && s.step >= 0, "adamw_step n=", n, " step=", s.step);
  if (n == 0) return;
  // train::adamw_step's scalars, bit for bit.
  const double t = static_cast<double>(s.step + 1);
  Scalars k{};
  k.b1 = static_cast<float>(s.beta1);
  k.b2 = static_cast<float>(s.beta2);
  k.bc1 = static_cast<float>(1.0 - std::pow(s.beta1, t));
  k.bc2 = static_cast<float>(1.0 - std::pow(s.beta2, t));
  k.lr = static_cast<float>(s.lr);
  k.wd = static_cast<float>(s.weight_decay);
  k.eps = static_cast<float>(s.eps);
  adamw_kernel<<<detail::grid_for(n), kBlock, 0, st>>>(param, grad, m, v, decay, n, k);
  LONGSEQ_CUDA_LAUNCHED();
}

}  // namespace longseq::kernels::cuda
