#pragma once
// The one door to the GEMM library (OpenBLAS or oneDNN, chosen at build time by LONGSEQ_GEMM; see
// docs/gemm.md for the measurements behind the choice). Everything above kernels/ multiplies
// matrices through these functions, so swapping the library touches only gemm.cpp.
//
// Row-major: C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C, op = transpose when the flag
// is set; lda/ldb/ldc are row strides in elements of the stored (untransposed) matrices.
// Threading: each call runs on the calling thread only (the library's own pool is pinned to one
// thread) so that callers parallelise over heads/tiles within the budget they were given.
// gemm_f32_parallel splits M over up to `threads` OpenMP threads for large products.
#include <cstdint>

#include "longseq/core/dtype.hpp"

namespace longseq::kernels {

void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc);

/// bf16 inputs, fp32 accumulation and output.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const core::bf16* a, int64_t lda, const core::bf16* b, int64_t ldb, float beta,
               float* c, int64_t ldc);

/// As gemm_f32, rows of C split over `threads` threads (deterministic: each row of C is computed
/// by exactly one thread with the same blocking whatever `threads` is).
void gemm_f32_parallel(int threads, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                       float beta, float* c, int64_t ldc);

/// Name of the library behind the wrapper: "openblas" or "onednn".
const char* gemm_library();

}  // namespace longseq::kernels
