// SwiGLU on a GPU (contracts in swiglu.hpp): grid-stride elementwise loops with the CPU kernel's
// expressions, over float4 where the pointers allow.
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

// The CPU kernel's expressions, shared by the scalar and float4 loops.
__device__ inline float swiglu_out(float g, float u) {
  return g * sigmoid(g) * u;
}
__device__ inline void swiglu_grad(float d, float g, float u, float& dg, float& du) {
  const float s = sigmoid(g);
  dg = d * u * s * (1.0f + g * (1.0f - s));
  du = d * g * s;
}

// No __restrict__: out may alias gate or up (each element read, then written, by one thread).
__global__ void swiglu_forward_kernel(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = swiglu_out(gate[i], up[i]);
  }
}

// The same over float4 (gate, up, out 16-byte aligned): n / 4 vectors in a grid-stride loop, two
// 16-byte loads in flight per thread and iteration where the scalar loop has two 4-byte ones;
// the n % 4 last elements by the first threads. The same expression per element.
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
    o4[i] = make_float4(swiglu_out(g.x, u.x), swiglu_out(g.y, u.y), swiglu_out(g.z, u.z),
                        swiglu_out(g.w, u.w));
  }
  const int64_t i = nv * 4 + first;
  if (i < n) {
    out[i] = swiglu_out(gate[i], up[i]);
  }
}

__global__ void swiglu_backward_kernel(const float* dout, const float* gate, const float* up,
                                       int64_t n, float* dgate, float* dup) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float a, b;
    swiglu_grad(dout[i], gate[i], up[i], a, b);
    dgate[i] = a;
    dup[i] = b;
  }
}

// The backward over float4 (all five pointers 16-byte aligned), as the forward's: a thread's three
// loads come before its two stores, so dgate may alias gate and dup up.
__global__ void swiglu_backward_vec_kernel(const float* dout, const float* gate, const float* up,
                                           int64_t n, float* dgate, float* dup) {
  const int64_t nv = n / 4;
  const auto* d4 = reinterpret_cast<const float4*>(dout);
  const auto* g4 = reinterpret_cast<const float4*>(gate);
  const auto* u4 = reinterpret_cast<const float4*>(up);
  auto* dg4 = reinterpret_cast<float4*>(dgate);
  auto* du4 = reinterpret_cast<float4*>(dup);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = first; i < nv; i += stride) {
    const float4 d = d4[i], g = g4[i], u = u4[i];
    float4 a, b;
    swiglu_grad(d.x, g.x, u.x, a.x, b.x);
    swiglu_grad(d.y, g.y, u.y, a.y, b.y);
    swiglu_grad(d.z, g.z, u.z, a.z, b.z);
    swiglu_grad(d.w, g.w, u.w, a.w, b.w);
    dg4[i] = a;
    du4[i] = b;
  }
  const int64_t i = nv * 4 + first;
  if (i < n) {
    float a, b;
    swiglu_grad(dout[i], gate[i], up[i], a, b);
    dgate[i] = a;
    dup[i] = b;
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
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (aligned16(dout) && aligned16(gate) && aligned16(up) && aligned16(dgate) && aligned16(dup))
    swiglu_backward_vec_kernel<<<detail::grid_for(n / 4), kBlock, 0, s>>>(dout, gate, up, n, dgate,
                                                                          dup);
  else
    swiglu_backward_kernel<<<detail::grid_for(n), kBlock, 0, s>>>(dout, gate, up, n, dgate, dup);
  LONGSEQ_CUDA_LAUNCHED();
}

}  // namespace longseq::kernels::cuda
