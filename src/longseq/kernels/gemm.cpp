#include "longseq/kernels/gemm.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

#include "longseq/core/error.hpp"

#if defined(LONGSEQ_GEMM_OPENBLAS)
#include <cblas.h>
#endif

namespace longseq::kernels {

#if defined(LONGSEQ_GEMM_OPENBLAS)
namespace {
// OpenBLAS's own pool would oversubscribe the cores the caller already parallelises over.
void pin_single_thread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}
}  // namespace

void gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  pin_single_thread();
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const core::bf16* a,
               int64_t lda, const core::bf16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // Debian's OpenBLAS 0.3.21 is built without sbgemm: widen to f32 (exact) and use sgemm.
  const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  std::vector<float> af(static_cast<size_t>(ar * ac)), bf(static_cast<size_t>(br * bc));
  for (int64_t i = 0; i < ar; ++i)
    for (int64_t j = 0; j < ac; ++j) af[i * ac + j] = core::to_f32(a[i * lda + j]);
  for (int64_t i = 0; i < br; ++i)
    for (int64_t j = 0; j < bc; ++j) bf[i * bc + j] = core::to_f32(b[i * ldb + j]);
  gemm_f32(ta, tb, m, n, k, alpha, af.data(), ac, bf.data(), bc, beta, c, ldc);
}

const char* gemm_library() { return "openblas"; }
#endif

void gemm_f32_parallel(int threads, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                       float* c, int64_t ldc) {
  // Fixed row panels: the blocking (and so the bits) do not depend on the thread count.
  constexpr int64_t kPanel = 128;
  const int64_t panels = (m + kPanel - 1) / kPanel;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t r0 = p * kPanel, rows = std::min(kPanel, m - r0);
    const float* ap = ta ? a + r0 : a + r0 * lda;
    gemm_f32(ta, tb, rows, n, k, alpha, ap, lda, b, ldb, beta, c + r0 * ldc, ldc);
  }
}

}  // namespace longseq::kernels
