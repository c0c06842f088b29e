#pragma once
// Merging attention partials (O, LSE) on a GPU: the twin of kernels/cpu/attention.hpp's
// merge_partials (fp32), same contract on device pointers; the specification is
// kernels/ref/attention.hpp's merge_partials (the kernel registry, tests/kernels/kernel_cases.hpp,
// checks one against the other).
//
// Legend: T tokens, H heads, D head dim. Row-major: o, o_other, dout [T, H, D]; lse, lse_other,
// delta [T, H]. Every pointer is device memory of the context's GPU.
//
// Execution: queued on `exec`'s stream (a CPU context is refused naming the kernel), asynchronous
// to the host. One warp per (token, head) row; every value is computed by one thread or by a
// warp's fixed butterfly, so the bits never depend on the grid. Dims are checked with
// LONGSEQ_CHECK (they come from code, not users).
#include <cstdint>

#include "longseq/core/device.hpp"

namespace longseq::kernels::cuda {

/// Combines the partial (o_other, lse_other) into (o, lse) in place:
///   lse' = logaddexp(lse, lse_other);  o' = exp(lse - lse') o + exp(lse_other - lse') o_other
/// with the CPU kernel's expressions (weights relative to the larger LSE, log1p for lse'). A side
/// with lse = -inf contributes nothing and its o is not read; both -inf give o = 0, lse = -inf.
void merge_partials(float* o, float* lse, const float* o_other, const float* lse_other, int64_t t,
                    int64_t h, int64_t d, const core::Exec& exec);

// attention_delta (the backward's rowsum(dout * o)) is declared with the attention block kernels
// in kernels/cuda/attention.hpp, beside the backward that reads it.

}  // namespace longseq::kernels::cuda
