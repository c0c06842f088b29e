#pragma once
// Matrix products on a GPU through cuBLASLt, and the linear layer over them: the twins of
// kernels/gemm.hpp and kernels/cpu/linear.hpp, same row-major contracts on device pointers.
//
// Legend: C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C, op = transpose when the flag is
// set. Row-major; lda/ldb/ldc are the row strides, in elements, of the matrices as stored (A is
// stored [K, M] when trans_a). beta == 0 overwrites C (NaN in C is not propagated); K == 0 gives
// C = beta * C. Sizes and strides are checked with LONGSEQ_CHECK (they come from code, not users).
// Every pointer is device memory of the context's GPU.
//
// Precision: gemm_f32 multiplies in exact fp32 (CUBLAS_COMPUTE_32F: TF32 is never used);
// gemm_bf16 takes bf16 operands and accumulates and writes fp32 (CUBLAS_COMPUTE_32F, C and D
// fp32); gemm_bf16_out_bf16 the same with C and D bf16 (the fp32 result rounded once). `gemm` is
// kernels::gemm_parallel's twin: fp32 operands multiplied at `compute` precision (bf16: both
// operands rounded to bf16, round-to-nearest-even, into stream-ordered scratch).
//
// How: the row-major product is the column-major product C^T = op(B)^T op(A)^T, handed to
// cublasLtMatmul as such (no copies). One cuBLASLt handle per GPU, one 32 MiB workspace per (GPU,
// stream), and one plan per shape (descriptors and the heuristic's first algorithm, keyed by
// dtype, transposes, sizes, strides and the operands' pointer alignment), all created on first use
// and kept for the life of the process (never destroyed: the CUDA runtime may be gone by the time
// static destructors run). Where the heuristic offers no algorithm for a shape, the product runs
// on a plain CUDA kernel (one thread per element of C, fp32 accumulation in K order) and
// gemm_stats() counts it. Thread-safe; calls on different streams may run concurrently.
// Determinism: cuBLAS gives the same bits run to run for a given toolkit, GPU architecture and SM
// count ("Results reproducibility" in its documentation), here with a workspace per stream as
// that section asks; the plan (and so the algorithm) of a shape is fixed once chosen.
#include <cstdint>

#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"

namespace longseq::kernels::cuda {

void gemm_f32(const core::Exec& exec, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
              float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
              float* c, int64_t ldc);

/// bf16 operands, fp32 accumulation and output.
void gemm_bf16(const core::Exec& exec, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               float alpha, const core::bf16* a, int64_t lda, const core::bf16* b, int64_t ldb,
               float beta, float* c, int64_t ldc);

/// bf16 operands, fp32 accumulation, C = alpha op(A) op(B) rounded once to bf16 (nearest even);
/// C is overwritten (no beta). For a product whose output only feeds bf16 work (the LM head's
/// logits at bf16 compute): half the bytes of an fp32 C.
void gemm_bf16_out_bf16(const core::Exec& exec, bool trans_a, bool trans_b, int64_t m, int64_t n,
                        int64_t k, float alpha, const core::bf16* a, int64_t lda,
                        const core::bf16* b, int64_t ldb, core::bf16* c, int64_t ldc);

/// fp32 operands multiplied at `compute` precision (f32: gemm_f32; bf16: operands rounded to bf16,
/// then gemm_bf16). Other dtypes are a caller bug (LONGSEQ_CHECK).
void gemm(core::DType compute, const core::Exec& exec, bool trans_a, bool trans_b, int64_t m,
          int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc);

/// dst [n] (bf16) = src [n] (fp32) rounded to nearest even, queued on the context's stream: for a
/// caller that multiplies the same fp32 operand at bf16 precision many times (the LM head's
/// weight) and so rounds it once instead of in every `gemm` call.
void round_to_bf16(const float* src, int64_t n, core::bf16* dst, const core::Exec& exec);

/// The plain-kernel path of gemm_f32 / gemm_bf16 (what a shape without a cuBLASLt algorithm runs
/// on), callable directly so that its own test covers it.
void gemm_f32_simple(const core::Exec& exec, bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                     int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_bf16_simple(const core::Exec& exec, bool trans_a, bool trans_b, int64_t m, int64_t n,
                      int64_t k, float alpha, const core::bf16* a, int64_t lda, const core::bf16* b,
                      int64_t ldb, float beta, float* c, int64_t ldc);

/// What the products of this process ran on so far.
struct GemmStats {
  int64_t cublaslt = 0;  ///< products run by cublasLtMatmul
  int64_t simple = 0;    ///< products run by the plain kernel (no cuBLASLt algorithm for the shape)
  int64_t plans = 0;     ///< distinct shapes planned (heuristic queries)
};
GemmStats gemm_stats();

/// out [T, N] = in [T, K] * weight[N, K]^T (+ out when accumulate): kernels/cpu/linear.hpp's.
void linear_forward(const float* in, const float* weight, int64_t t, int64_t k, int64_t n,
                    float* out, bool accumulate, const core::Exec& exec,
                    core::DType compute = core::DType::f32);
/// din [T, K] = dout [T, N] * weight (+ din when accumulate_din); dweight [N, K] += dout^T in.
/// din may be null (no input gradient wanted); din may alias `in` (dweight is queued first, on the
/// same stream).
void linear_backward(const float* dout, const float* in, const float* weight, int64_t t, int64_t k,
                     int64_t n, float* din, bool accumulate_din, float* dweight,
                     const core::Exec& exec, core::DType compute = core::DType::f32);

}  // namespace longseq::kernels::cuda
