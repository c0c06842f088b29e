#pragma once
// What the kernels under kernels/cuda/ share (included by their .cu files only, never by a public
// header): the stream of an execution context, launch checks, grid sizes, and the one block
// reduction (llm.c's pattern: warp shuffles, then one value per warp through shared memory).
//
// Determinism: every reduction here has a fixed shape (a butterfly inside a warp, then the warps in
// index order), so a kernel's bits depend on its launch configuration, which the kernels derive
// from the problem size only, never from the GPU model or timing. No kernel here uses
// floating-point atomics.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "longseq/core/device.hpp"
#include "longseq/kernels/cuda/device.hpp"

namespace longseq::kernels::cuda::detail {

/// Threads per block of the row and elementwise kernels: 8 full warps (block_sum needs whole
/// warps).
constexpr int kBlock = 256;

/// The context's stream, after refusing a CPU context naming `kernel` (stream_of).
inline cudaStream_t stream(const core::Exec& exec, const char* kernel) {
  return static_cast<cudaStream_t>(stream_of(exec, kernel));
}

/// Blocks of a grid-stride loop over n items, kBlock threads each: one item per thread up to a cap
/// of 2^16 blocks (16M threads, far past what an H100 keeps resident), the loop covering the rest.
/// Elementwise kernels give the same bits for any grid.
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 16));
}

/// Checks the launch just queued (a bad configuration is reported here; a fault while running,
/// at the next synchronising call).
#define LONGSEQ_CUDA_LAUNCHED() LONGSEQ_CUDA_CALL(cudaGetLastError())

/// Sum over a warp; every lane gets the same bits (each butterfly step adds the same two values,
/// in either order, and addition is commutative).
template <class T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
/// `shared` holds 32 values; it may be reused as soon as this returns. Every thread of the block
/// must call it.
template <class T>
__device__ inline T block_sum(T v, T* shared) {
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : T(0);
  v = warp_sum(v);
  __syncthreads();
  return v;
}

}  // namespace longseq::kernels::cuda::detail
