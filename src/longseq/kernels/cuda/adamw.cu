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

// Fixed block count and size of sum_squares: enough blocks to fill any GPU, a fixed tree inside
// each.
constexpr int kSumBlocks = 1024;
constexpr int kSumThreads = 256;

__global__ void __launch_bounds__(kSumThreads)
    sum_squares_kernel(const float* x, int64_t n, double* partial) {
  __shared__ double acc[kSumThreads];
  const int64_t per_block = (n + kSumBlocks - 1) / kSumBlocks;
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * per_block;
  const int64_t hi = lo + per_block < n ? lo + per_block : n;
  double s = 0.0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += kSumThreads) {
    const double v = x[i];
    s += v * v;
  }
  acc[threadIdx.x] = s;
  __syncthreads();
  for (int w = kSumThreads / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) acc[threadIdx.x] += acc[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = acc[0];
}

__global__ void scale_kernel(float* x, int64_t n, float f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] *= f;
}

}  // namespace

double sum_squares(const float* x, int64_t n, const core::Exec& exec) {
  const cudaStream_t st = detail::stream(exec, "sum_squares");
  LONGSEQ_CHECK_MSG(n >= 0, "sum_squares n=", n);
  if (n == 0) return 0.0;
  double* partial = nullptr;
  LONGSEQ_CUDA_CALL(
      cudaMallocAsync(reinterpret_cast<void**>(&partial), kSumBlocks * sizeof(double), st));
  sum_squares_kernel<<<kSumBlocks, kSumThreads, 0, st>>>(x, n, partial);
  LONGSEQ_CUDA_LAUNCHED();
  double host[kSumBlocks];
  LONGSEQ_CUDA_CALL(cudaMemcpyAsync(host, partial, sizeof host, cudaMemcpyDeviceToHost, st));
  LONGSEQ_CUDA_CALL(cudaFreeAsync(partial, st));
  LONGSEQ_CUDA_CALL(cudaStreamSynchronize(st));
  double s = 0.0;
  for (double p : host) s += p;
  return s;
}

void scale(float* x, int64_t n, float f, const core::Exec& exec) {
  const cudaStream_t st = detail::stream(exec, "scale");
  LONGSEQ_CHECK_MSG(n >= 0, "scale n=", n);
  if (n == 0) return;
  scale_kernel<<<detail::grid_for(n), kBlock, 0, st>>>(x, n, f);
  LONGSEQ_CUDA_LAUNCHED();
}

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
