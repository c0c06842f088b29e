// SwiGLU on a GPU (contracts in swiglu.hpp): grid-stride elementwise loops with the CPU kernel's
// expressions.
#include <cuda_runtime.h>

#include <cstdint>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/launch.cuh"
#include "longseq/kernels/cuda/swiglu.hpp"

namespace longseq::kernels::cuda {

namespace {

using detail::kBlock;

__device__ inline float sigmoid(float g) {
  return 1.0f / (1.0f + expf(-g));
}

// No __restrict__: out may alias gate or up (each element read, then written, by one thread).
__global__ void swiglu_forward_kernel(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float g = gate[i];
    out[i] = g * sigmoid(g) * up[i];
  }
}

__global__ void swiglu_backward_kernel(const float* dout, const float* gate, const float* up,
                                       int64_t n, float* dgate, float* dup) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float g = gate[i], u = up[i], d = dout[i];
    const float s = sigmoid(g);
    dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
    dup[i] = d * g * s;
  }
}

}  // namespace

void swiglu_forward(const float* gate, const float* up, int64_t n, float* out,
                    const core::Exec& exec) {
  const cudaStream_t s = detail::stream(exec, "swiglu_forward");
  LONGSEQ_CHECK_MSG(n >= 0, "swiglu n=", n);
  if (n == 0) return;
  swiglu_forward_kernel<<<detail::grid_for(n), kBlock, 0, s>>>(gate, up, n, out);
  LONGSEQ_CUDA_LAUNCHED();
}

void swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n, float* dgate,
                     float* dup, const core::Exec& exec) {
  const cudaStream_t s = detail::stream(exec, "swiglu_backward");
  LONGSEQ_CHECK_MSG(n >= 0, "swiglu n=", n);
  if (n == 0) return;
  swiglu_backward_kernel<<<detail::grid_for(n), kBlock, 0, s>>>(dout, gate, up, n, dgate, dup);
  LONGSEQ_CUDA_LAUNCHED();
}

}  // namespace longseq::kernels::cuda
