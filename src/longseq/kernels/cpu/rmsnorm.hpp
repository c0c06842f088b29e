#pragma once
// RMSNorm (LLaMA), fast fp32 forward/backward pair; the specification is its fp64 twin
// kernels/ref/rmsnorm.hpp (tests/kernels/rmsnorm_test.cpp checks one against the other).
//
// Legend: T rows (tokens), C channels. Row-major: x, out, dout, dx [T, C]; weight, dweight [C];
// rstd [T] (saved by the forward for the backward).
//
//   rstd[t] = 1 / sqrt(mean_c x[t, c]^2 + eps)   (sum of squares in fp64)
//   out[t, c] = x[t, c] * rstd[t] * weight[c]
//
// Threads: `exec.threads` (core::Exec, a CPU context) is the caller's compute-thread budget, spent
// as an OpenMP team over rows (the runtime the GEMM library uses; no threads of its own). Results
// never depend on it: each row is computed by one thread and the weight gradient sums rows in a
// fixed order.
#include <cstdint>

#include "longseq/core/device.hpp"

namespace longseq::kernels::cpu {

/// Forward. out may alias x. rstd [T] receives 1 / RMS of each row.
void rmsnorm_forward(const float* x, const float* weight, int64_t t, int64_t c, float eps,
                     float* out, float* rstd, const core::Exec& exec);
/// Backward from the saved rstd: dx (overwritten, or += when accumulate) and dweight (+=).
/// dx must not alias x.
void rmsnorm_backward(const float* dout, const float* x, const float* weight, const float* rstd,
                      int64_t t, int64_t c, float* dx, float* dweight, bool accumulate,
                      const core::Exec& exec);

}  // namespace longseq::kernels::cpu
