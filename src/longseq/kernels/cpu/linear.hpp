#pragma once
// A linear layer without bias (nn.Linear's layout), forward/backward pair over kernels/gemm; its
// specification is the plain fp64 product (tests/kernels/linear_test.cpp).
//
// Legend: T tokens, K input features, N output features. Row-major: in, din [T, K];
// out, dout [T, N]; weight, dweight [N, K].
//
// Precision: `compute` is the precision of the matrix products (kernels::gemm_parallel: bf16
// rounds both operands, accumulates and writes fp32). Threads: the GEMM library's, `threads` of
// them; results never depend on the count (the deterministic *_parallel GEMMs).
#include <cstdint>

#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"

namespace longseq::kernels::cpu {

/// out [T, N] = in [T, K] * weight[N, K]^T (+ out when accumulate).
void linear_forward(const float* in, const float* weight, int64_t t, int64_t k, int64_t n,
                    float* out, bool accumulate, const core::Exec& exec,
                    core::DType compute = core::DType::f32);
/// din [T, K] = dout [T, N] * weight (+ din when accumulate_din); dweight [N, K] += dout^T in.
/// din may be null (no input gradient wanted); din may alias `in` (dweight is computed first).
void linear_backward(const float* dout, const float* in, const float* weight, int64_t t, int64_t k,
                     int64_t n, float* din, bool accumulate_din, float* dweight,
                     const core::Exec& exec, core::DType compute = core::DType::f32);

}  // namespace longseq::kernels::cpu
