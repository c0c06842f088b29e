// Elementwise fp32 kernels (contract in elementwise.hpp): grid-stride loops, one expression per
// output element.
#include <cuda_runtime.h>

#include <cstdint>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/elementwise.hpp"
#include "longseq/kernels/cuda/launch.cuh"

namespace longseq::kernels::cuda {

namespace {

using detail::kBlock;

__global__ void fill_kernel(float* p, int64_t n, float value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = value;
}

__global__ void add_kernel(float* into, const float* from, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    into[i] += from[i];
}

// Item i is element (i / width, i % width).
__global__ void add_rows_kernel(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch,
                                int64_t width, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t r = i / width, e = i - r * width;
    dst[r * dst_pitch + e] += src[r * src_pitch + e];
  }
}

}  // namespace

void fill(float* p, int64_t n, float value, const core::Exec& exec) {
  const cudaStream_t st = detail::stream(exec, "fill");
  LONGSEQ_CHECK_MSG(n >= 0, "fill n=", n);
  if (n == 0) return;
  fill_kernel<<<detail::grid_for(n), kBlock, 0, st>>>(p, n, value);
  LONGSEQ_CUDA_LAUNCHED();
}

void add(float* into, const float* from, int64_t n, const core::Exec& exec) {
  const cudaStream_t st = detail::stream(exec, "add");
  LONGSEQ_CHECK_MSG(n >= 0, "add n=", n);
  if (n == 0) return;
  add_kernel<<<detail::grid_for(n), kBlock, 0, st>>>(into, from, n);
  LONGSEQ_CUDA_LAUNCHED();
}

void add_rows(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t width,
              int64_t rows, const core::Exec& exec) {
  const cudaStream_t st = detail::stream(exec, "add_rows");
  LONGSEQ_CHECK_MSG(width >= 0 && rows >= 0 && dst_pitch >= width && src_pitch >= width,
                    "add_rows width=", width, " rows=", rows, " pitches ", dst_pitch, "/",
                    src_pitch);
  const int64_t n = width * rows;
  if (n == 0) return;
  add_rows_kernel<<<detail::grid_for(n), kBlock, 0, st>>>(dst, dst_pitch, src, src_pitch, width, n);
  LONGSEQ_CUDA_LAUNCHED();
}

}  // namespace longseq::kernels::cuda
