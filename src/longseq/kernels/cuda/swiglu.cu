// SwiGLU on a GPU (contracts in swiglu.hpp): grid-stride elementwise loops with the CPU kernel's
// expressions; the forward over float4 where the pointers allow.
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

// The same over float4 (gate, up, out 16-byte aligned): n / 4 vectors in a grid-stride loop, two
// 16-byte loads in flight per thread and iteration where the scalar loop has two 4-byte ones;
// the n % 4 last elements by the first threads. Same expression per element, so the same bits.
__global__ void swiglu_forward_vec_kernel(const float* gate, const float* up, int64_t n,
                                          float* out) {
  const int64_t nv = n / 4;
  const auto* g4 = reinterpret_cast<const float4*>(gate);
  const auto* u4 = reinterpret_cast<const float4*>(up);
  auto* o4 = reinterpret_cast<float4*>(out);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = first; i < nv; i += stride) {
    const float4 g = g4[i], u = u4[i];
    o4[i] = make_float4(g.x * sigmoid(g.x) * u.x, g.y * sigmoid(g.y) * u.y,
                        g.z * sigmoid(g.z) * u.z, g.w * sigmoid(g.w) * u.w);
  }
  const int64_t i = nv * 4 + first;
  if (i < n) {
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
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (aligned16(gate) && aligned16(up) && aligned16(out))
    // grid_for(n / 4) >= 1 block of kBlock threads covers the n % 4 <= 3 last elements.
    swiglu_forward_vec_kernel<<<detail::grid_for(n / 4), kBlock, 0, s>>>(gate, up, n, out);
  else
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
