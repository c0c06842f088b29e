#pragma once
// RMSNorm (LLaMA) on a GPU, fp32 forward/backward pair: the twin of kernels/cpu/rmsnorm.hpp with
// the same contract on device pointers; the specification is the fp64 kernels/ref/rmsnorm.hpp
// (tests/cuda/kernels_test.cpp and the kernel registry check one against the other).
//
// Legend: T rows (tokens), C channels. Row-major: x, out, dout, dx [T, C]; weight, dweight [C];
// rstd [T] (saved by the forward for the backward). Every pointer is device memory of the
// context's GPU.
//
//   rstd[t] = 1 / sqrt(mean_c x[t, c]^2 + eps)   (sum of squares in fp64, as on the CPU)
//   out[t, c] = x[t, c] * rstd[t] * weight[c]
//
// Execution: queued on `exec`'s stream (a CUDA context; a CPU one is refused naming the kernel),
// asynchronous to the host. One thread block per row (the backward: per group of
// kRmsNormRowsPerGroup rows); C a multiple of 4 up to 8192 with 16-byte aligned pointers takes a
// float4 path that keeps the row in registers, anything else a scalar one. Results are
// deterministic: every sum has a fixed order that depends on T, C and the path only; the weight
// gradient is summed in two stages (fixed row groups, then the groups in a fixed order), without
// atomics.
#include <cstdint>

#include "longseq/core/device.hpp"

namespace longseq::kernels::cuda {

/// Rows per partial sum of the weight gradient (the backward's first stage): fixed, so the bits
/// never depend on the GPU; small enough that T / 16 blocks fill a GPU at training's T.
constexpr int64_t kRmsNormRowsPerGroup = 16;

/// Forward. out may alias x. rstd [T] receives 1 / RMS of each row.
void rmsnorm_forward(const float* x, const float* weight, int64_t t, int64_t c, float eps,
                     float* out, float* rstd, const core::Exec& exec);
/// Backward from the saved rstd: dx (overwritten, or += when accumulate) and dweight (+=, in
/// fp32). dx must not alias x. Uses ceil(T / kRmsNormRowsPerGroup) x C floats of stream-ordered
/// scratch (cudaMallocAsync), written once and read once.
void rmsnorm_backward(const float* dout, const float* x, const float* weight, const float* rstd,
                      int64_t t, int64_t c, float* dx, float* dweight, bool accumulate,
                      const core::Exec& exec);

}  // namespace longseq::kernels::cuda
