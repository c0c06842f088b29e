#pragma once
// The one door to the GEMM library (OpenBLAS or oneDNN, chosen at build time by LONGSEQ_GEMM; see
// docs/gemm.md for the measurements behind the choice). Everything above kernels/ multiplies
// matrices through these functions, so swapping the library touches only gemm.cpp.
//
// Legend: C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C, op = transpose when the flag is
// set. Row-major; lda/ldb/ldc are the row strides, in elements, of the matrices as stored (A is
// stored [K, M] when trans_a). beta == 0 overwrites C (NaN/garbage in C is not propagated); K == 0
// gives C = beta * C. Sizes and strides are checked with LONGSEQ_CHECK (they come from code, not
// users).
//
// Threading: gemm_f32/gemm_bf16 run on the calling thread only, inside or outside an OpenMP
// parallel region, whatever omp_set_num_threads / OMP_NUM_THREADS say, so callers parallelise
// over heads/tiles within the thread budget they were given and never oversubscribe.
// (OpenBLAS: openblas_set_num_threads(1) once. oneDNN, OpenMP runtime: the OpenMP nthreads ICV of
// the calling task is set to 1 for the duration of the call; see docs/gemm.md.) Calls from
// different threads may run concurrently. The *_parallel variants split C's rows into fixed
// panels of gemm_panel_rows() rows over `threads` OpenMP threads; each panel is one single-thread
// call, so the result is bit-identical for every `threads` value.
#include <cstdint>
#include <string>

#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"

namespace longseq::kernels {

void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc);

/// As gemm_f32, for a small product called many times with a few shapes (attention's tiles):
/// with oneDNN, dense operands, no transposed A and every dimension <= 1024 it runs on a matmul
/// primitive cached per thread and shape (faster per call; a new shape costs ~0.3 ms once).
/// Anything else, and other libraries: exactly gemm_f32.
void gemm_f32_tile(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc);

/// bf16 inputs, fp32 accumulation and output. Where the active kernel variant has no bf16
/// arithmetic (core::bf16_native false: every CPU without AVX512_BF16, and OpenBLAS builds) this
/// is gemm_bf16_widened.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const core::bf16* a, int64_t lda, const core::bf16* b, int64_t ldb, float beta,
               float* c, int64_t ldc);

/// bf16 emulated: both operands widened to f32 (exact) and multiplied by gemm_f32_tile; the same
/// contract as gemm_bf16, with another summation order.
void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const core::bf16* a, int64_t lda, const core::bf16* b, int64_t ldb,
                       float beta, float* c, int64_t ldc);

/// As gemm_f32, rows of C split over `threads` threads (deterministic: each row of C is computed
/// by exactly one thread with the same blocking whatever `threads` is). threads <= 0 means 1.
void gemm_f32_parallel(const core::Exec& exec, bool trans_a, bool trans_b, int64_t m, int64_t n,
                       int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                       int64_t ldb, float beta, float* c, int64_t ldc);

/// As gemm_bf16, rows of C split over `threads` threads; bit-identical for every `threads`.
void gemm_bf16_parallel(const core::Exec& exec, bool trans_a, bool trans_b, int64_t m, int64_t n,
                        int64_t k, float alpha, const core::bf16* a, int64_t lda,
                        const core::bf16* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// Mixed precision's matrix product: fp32 operands multiplied at `compute` precision.
/// f32: gemm_f32_parallel. bf16: A and B are rounded to bf16 (round-to-nearest-even) into scratch
/// of the calling thread (only the elements op() reads), then gemm_bf16_parallel: fp32
/// accumulation and output, bit-identical for every `threads` (emulated bf16: the rounded values
/// stay in f32 and gemm_f32_parallel multiplies them). Operands that already hold bf16
/// values (weights gathered in bf16) convert exactly. Other dtypes are a caller bug
/// (LONGSEQ_CHECK).
void gemm_parallel(core::DType compute, const core::Exec& exec, bool trans_a, bool trans_b,
                   int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                   const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// Rows of C per panel in the *_parallel variants (fixed, so the bits never depend on threads).
int64_t gemm_panel_rows();

/// Name of the library behind the wrapper: "openblas" or "onednn".
const char* gemm_library();

/// The instruction set the library runs on this CPU: oneDNN's effective ISA ("avx2",
/// "avx512_core_bf16", "avx512_core_amx", ...; capped to a forced LONGSEQ_ISA), or OpenBLAS's core
/// name. For `longseq info` and benchmark headers.
std::string gemm_isa();

/// FLOP/s of one thread on a 1024^3 product at `dt` (f32: gemm_f32; bf16: gemm_bf16, fp32
/// accumulation): one warm-up, then the best of `repeats` on the thread's CPU clock
/// (core::thread_cpu_seconds, so other jobs on the machine do not count). The one peak
/// measurement: the trainer's MFU denominator and `longseq calibrate`'s profile peak.
double single_thread_gemm_flops(core::DType dt, int repeats = 3);

}  // namespace longseq::kernels
