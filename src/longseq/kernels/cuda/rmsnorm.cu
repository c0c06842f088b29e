// RMSNorm on a GPU (contracts in rmsnorm.hpp). One block of kBlock threads per row: the row's sum
// (of squares, or of weight * dout * x) in fp64 per thread, then block_sum; the elementwise pass
// after it. The weight gradient sums over rows in two stages without atomics: stage 1 gives each
// group of kRowsPerGroup rows one partial sum per column (a thread per column, rows in order),
// stage 2 adds the groups in order into dweight.
#include <cuda_runtime.h>

#include <cstdint>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/launch.cuh"
#include "longseq/kernels/cuda/rmsnorm.hpp"

namespace longseq::kernels::cuda {

namespace {

using detail::kBlock;

// Rows per partial sum of the weight gradient (stage 1). Fixed, so the bits never depend on the
// GPU.
constexpr int64_t kRowsPerGroup = 64;

// x, out may alias: every x of the row is read before block_sum's barrier, each out written after
// it by the thread that reads the same x.
__global__ void rmsnorm_forward_kernel(const float* x, const float* weight, int64_t c, float eps,
                                       float* out, float* rstd) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * c;
  float* o = out + row * c;
  double ss = 0.0;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const double v = xr[j];
    ss += v * v;
  }
  ss = detail::block_sum(ss, shared);
  const float r =
      static_cast<float>(1.0 / sqrt(ss / static_cast<double>(c) + static_cast<double>(eps)));
  if (threadIdx.x == 0) rstd[row] = r;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) o[j] = xr[j] * r * weight[j];
}

// dx = rstd * (w * dout - x * rstd^2 / C * sum(w * dout * x)), the CPU kernel's expression.
__global__ void rmsnorm_backward_dx_kernel(const float* dout, const float* x, const float* weight,
                                           const float* rstd, int64_t c, float* dx,
                                           bool accumulate) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const float* d = dout + row * c;
  const float* xr = x + row * c;
  float* o = dx + row * c;
  const float r = rstd[row];
  double dot = 0.0;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    dot += static_cast<double>(weight[j]) * d[j] * xr[j];
  dot = detail::block_sum(dot, shared);
  const float k = static_cast<float>(dot * r * r / static_cast<double>(c));
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float v = r * (weight[j] * d[j] - xr[j] * k);
    o[j] = accumulate ? o[j] + v : v;
  }
}

// Stage 1: partial[g, j] = sum over the rows of group g, in order, of dout * x * rstd. Grid: x =
// groups, y = blocks of kBlock columns.
__global__ void rmsnorm_dweight_partial_kernel(const float* dout, const float* x, const float* rstd,
                                               int64_t t, int64_t c, float* partial) {
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  const int64_t g = blockIdx.x;
  const int64_t r0 = g * kRowsPerGroup;
  const int64_t r1 = r0 + kRowsPerGroup < t ? r0 + kRowsPerGroup : t;
  float s = 0.0f;
  for (int64_t r = r0; r < r1; ++r) s += dout[r * c + j] * x[r * c + j] * rstd[r];
  partial[g * c + j] = s;
}

// Stage 2: dweight[j] += the groups' partial sums, in group order.
__global__ void rmsnorm_dweight_sum_kernel(const float* partial, int64_t groups, int64_t c,
                                           float* dweight) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < c;
       j += stride) {
    float s = 0.0f;
    for (int64_t g = 0; g < groups; ++g) s += partial[g * c + j];
    dweight[j] += s;
  }
}

void check_dims(int64_t t, int64_t c) {
  // One block per row: the grid's x dimension holds at most 2^31 - 1 blocks.
  LONGSEQ_CHECK_MSG(t >= 0 && c >= 0 && t < (int64_t{1} << 31), "rmsnorm t=", t, " c=", c);
}

}  // namespace

void rmsnorm_forward(const float* x, const float* weight, int64_t t, int64_t c, float eps,
                     float* out, float* rstd, const core::Exec& exec) {
  const cudaStream_t s = detail::stream(exec, "rmsnorm_forward");
  check_dims(t, c);
  if (t == 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(t), kBlock, 0, s>>>(x, weight, c, eps, out, rstd);
  LONGSEQ_CUDA_LAUNCHED();
}

void rmsnorm_backward(const float* dout, const float* x, const float* weight, const float* rstd,
                      int64_t t, int64_t c, float* dx, float* dweight, bool accumulate,
                      const core::Exec& exec) {
  const cudaStream_t s = detail::stream(exec, "rmsnorm_backward");
  check_dims(t, c);
  if (t == 0 || c == 0) return;
  rmsnorm_backward_dx_kernel<<<static_cast<unsigned>(t), kBlock, 0, s>>>(dout, x, weight, rstd, c,
                                                                         dx, accumulate);
  LONGSEQ_CUDA_LAUNCHED();

  const int64_t groups = (t + kRowsPerGroup - 1) / kRowsPerGroup;
  const int64_t col_blocks = (c + kBlock - 1) / kBlock;
  LONGSEQ_CHECK_MSG(col_blocks <= 65535, "rmsnorm_backward c=", c, " exceeds the grid's y limit");
  float* partial = nullptr;
  LONGSEQ_CUDA_CALL(cudaMallocAsync(reinterpret_cast<void**>(&partial),
                                    static_cast<size_t>(groups * c) * sizeof(float), s));
  const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(col_blocks));
  rmsnorm_dweight_partial_kernel<<<grid, kBlock, 0, s>>>(dout, x, rstd, t, c, partial);
  LONGSEQ_CUDA_LAUNCHED();
  rmsnorm_dweight_sum_kernel<<<detail::grid_for(c), kBlock, 0, s>>>(partial, groups, c, dweight);
  LONGSEQ_CUDA_LAUNCHED();
  LONGSEQ_CUDA_CALL(cudaFreeAsync(partial, s));
}

}  // namespace longseq::kernels::cuda
