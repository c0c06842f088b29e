// merge_partials on a GPU (contract in merge.hpp; attention_delta is in attention.cu). One warp per (token, head)
// row, kBlock / 32 rows per block, a grid-stride loop over rows: a row's lse is read by every lane
// before lane 0 overwrites it (a __syncwarp between), and its D values are split over the lanes.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/launch.cuh"
#include "longseq/kernels/cuda/merge.hpp"

namespace longseq::kernels::cuda {

namespace {

using detail::kBlock;
constexpr int kRowsPerBlock = kBlock / 32;

// Blocks for `rows` warps-rows, capped as grid_for caps its grids (the loop covers the rest).
unsigned row_grid(int64_t rows) {
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  return static_cast<unsigned>(
      blocks < 1 ? 1 : (blocks > (int64_t{1} << 16) ? int64_t{1} << 16 : blocks));
}

// The CPU kernel's expressions (kernels/cpu/isa/pointwise.cpp), row by row.
__global__ void merge_kernel(float* o, float* lse, const float* o_other, const float* lse_other,
                             int64_t rows, int64_t d) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = warp; r < rows; r += warps) {
    const float a = lse[r], b = lse_other[r];
    // Every lane has read lse[r] before lane 0 may overwrite it below.
    __syncwarp();
    float* x = o + r * d;
    const float* y = o_other + r * d;
    if (b == -INFINITY) {
      // The other side saw nothing. If this side saw nothing either, its o must be 0.
      if (a == -INFINITY)
        for (int64_t j = lane; j < d; j += 32) x[j] = 0.0f;
      continue;
    }
    if (a == -INFINITY) {
      for (int64_t j = lane; j < d; j += 32) x[j] = y[j];
      if (lane == 0) lse[r] = b;
      continue;
    }
    // Weights relative to the larger LSE: exp of a non-positive number, so no overflow however
    // large the logits; log1p keeps the small correction exact when one side dominates.
    const float mx = fmaxf(a, b);
    const float ea = expf(a - mx), eb = expf(b - mx);
    const float inv = 1.0f / (ea + eb);
    const float wa = ea * inv, wb = eb * inv;
    for (int64_t j = lane; j < d; j += 32) x[j] = wa * x[j] + wb * y[j];
    if (lane == 0) lse[r] = mx + log1pf(expf(-fabsf(a - b)));
  }
}

void check_dims(int64_t t, int64_t h, int64_t d, const char* what) {
  LONGSEQ_CHECK_MSG(t >= 0 && h > 0 && d > 0, what, " t=", t, " h=", h, " d=", d);
}

}  // namespace

void merge_partials(float* o, float* lse, const float* o_other, const float* lse_other, int64_t t,
                    int64_t h, int64_t d, const core::Exec& exec) {
  const cudaStream_t s = detail::stream(exec, "merge_partials");
  check_dims(t, h, d, "merge_partials");
  if (t == 0) return;
  merge_kernel<<<row_grid(t * h), kBlock, 0, s>>>(o, lse, o_other, lse_other, t * h, d);
  LONGSEQ_CUDA_LAUNCHED();
}

}  // namespace longseq::kernels::cuda
