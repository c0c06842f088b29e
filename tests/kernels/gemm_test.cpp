// kernels/gemm: the wrapper contract (gemm.hpp) against a naive fp64 loop, for whichever library
// LONGSEQ_GEMM selected. Legend: C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C.
#include "longseq/kernels/gemm.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/gemm_reference.hpp"
#include "longseq/core/rng.hpp"

namespace {

using longseq::core::bf16;
namespace k = longseq::kernels;

using namespace longseq::test::gemm;  // Case, Operands, make, naive, all_cases, rounded

// fp32 accumulation over K terms of magnitude <= 1: error grows ~ K * eps32 in the worst case.
void expect_close(const Case& c, const std::vector<float>& got, int64_t ldc,
                  const std::vector<double>& ref, const std::vector<float>& c0) {
  const double tol = 1e-6 + 4e-7 * static_cast<double>(c.kk + 2);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      const double r = ref[i * c.n + j];
      ASSERT_NEAR(got[i * ldc + j], r, tol * (1.0 + std::abs(r)))
          << "ta=" << c.ta << " tb=" << c.tb << " m=" << c.m << " n=" << c.n << " k=" << c.kk
          << " at (" << i << "," << j << ")";
    }
    for (int64_t j = c.n; j < ldc; ++j)  // padding of C untouched (NaN stays NaN)
      ASSERT_TRUE(std::isnan(got[i * ldc + j])) << "wrote past n at row " << i;
  }
  (void)c0;
}

TEST(Gemm, LibraryName) {
  const std::string lib = k::gemm_library();
  EXPECT_TRUE(lib == "openblas" || lib == "onednn") << lib;
}

TEST(Gemm, F32AllTransposesOddSizesStridesAlphaBeta) {
  uint64_t seed = 1;
  for (const Case& c : all_cases()) {
    Operands o = make(c, seed++);
    std::vector<float> got = o.c0;
    k::gemm_f32(c.ta, c.tb, c.m, c.n, c.kk, c.alpha, o.a.data(), o.lda, o.b.data(), o.ldb, c.beta,
                got.data(), o.ldc);
    expect_close(c, got, o.ldc, naive(c, o.a, o.lda, o.b, o.ldb, o.c0, o.ldc), o.c0);
    if (HasFatalFailure()) return;
  }
}

TEST(Gemm, Bf16MatchesFp64OnRoundedInputs) {
  uint64_t seed = 1000;
  for (const Case& c : all_cases()) {
    Operands o = make(c, seed++);
    const auto a16 = to_bf16_vec(o.a), b16 = to_bf16_vec(o.b);
    std::vector<float> got = o.c0;
    k::gemm_bf16(c.ta, c.tb, c.m, c.n, c.kk, c.alpha, a16.data(), o.lda, b16.data(), o.ldb, c.beta,
                 got.data(), o.ldc);
    // bf16 products are exact in fp32, so the only error is fp32 accumulation: same tolerance.
    expect_close(c, got, o.ldc, naive(c, rounded(o.a), o.lda, rounded(o.b), o.ldb, o.c0, o.ldc),
                 o.c0);
    if (HasFatalFailure()) return;
  }
}

TEST(Gemm, BetaZeroOverwritesNanAndKZeroScales) {
  const int64_t m = 5, n = 7;
  std::vector<float> a(m * 4, 1.0f), b(4 * n, 1.0f);
  std::vector<float> c(m * n, NAN);
  k::gemm_f32(false, false, m, n, 4, 1.0f, a.data(), 4, b.data(), n, 0.0f, c.data(), n);
  for (float x : c) ASSERT_EQ(x, 4.0f);
  k::gemm_f32(false, false, m, n, 0, 1.0f, a.data(), 1, b.data(), n, 0.5f, c.data(), n);
  for (float x : c) ASSERT_EQ(x, 2.0f);
  const auto a16 = to_bf16_vec(a), b16 = to_bf16_vec(b);
  std::fill(c.begin(), c.end(), NAN);
  k::gemm_bf16(false, false, m, n, 4, 1.0f, a16.data(), 4, b16.data(), n, 0.0f, c.data(), n);
  for (float x : c) ASSERT_EQ(x, 4.0f);
  k::gemm_bf16(false, false, m, n, 0, 1.0f, a16.data(), 1, b16.data(), n, 0.0f, c.data(), n);
  for (float x : c) ASSERT_EQ(x, 0.0f);
}

// Repeated calls reuse cached state (oneDNN primitives, OpenBLAS widening buffers): a second call
// with the same shape but other data and beta must not see the first call's pointers.
TEST(Gemm, RepeatedShapesUseCurrentPointers) {
  const Case c{false, true, 65, 33, 17, 1.0f, 1.0f};
  for (uint64_t seed = 50; seed < 53; ++seed) {
    Operands o = make(c, seed);
    const auto a16 = to_bf16_vec(o.a), b16 = to_bf16_vec(o.b);
    std::vector<float> got32 = o.c0, got16 = o.c0;
    k::gemm_f32(c.ta, c.tb, c.m, c.n, c.kk, c.alpha, o.a.data(), o.lda, o.b.data(), o.ldb, c.beta,
                got32.data(), o.ldc);
    k::gemm_bf16(c.ta, c.tb, c.m, c.n, c.kk, c.alpha, a16.data(), o.lda, b16.data(), o.ldb, c.beta,
                 got16.data(), o.ldc);
    expect_close(c, got32, o.ldc, naive(c, o.a, o.lda, o.b, o.ldb, o.c0, o.ldc), o.c0);
    expect_close(c, got16, o.ldc, naive(c, rounded(o.a), o.lda, rounded(o.b), o.ldb, o.c0, o.ldc),
                 o.c0);
  }
}

// Panels of gemm_panel_rows(): m spans several panels plus a ragged one.
TEST(Gemm, ParallelBitIdenticalForOneAndTwoThreads) {
  const int64_t m = 2 * k::gemm_panel_rows() + 37;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Case c{ta, tb, m, 70, 45, 0.75f, 0.5f};
      Operands o = make(c, 77 + 2 * ta + tb);
      const auto a16 = to_bf16_vec(o.a), b16 = to_bf16_vec(o.b);
      std::vector<float> f1 = o.c0, f2 = o.c0, h1 = o.c0, h2 = o.c0;
      k::gemm_f32_parallel(1, ta, tb, c.m, c.n, c.kk, c.alpha, o.a.data(), o.lda, o.b.data(), o.ldb,
                           c.beta, f1.data(), o.ldc);
      k::gemm_f32_parallel(2, ta, tb, c.m, c.n, c.kk, c.alpha, o.a.data(), o.lda, o.b.data(), o.ldb,
                           c.beta, f2.data(), o.ldc);
      k::gemm_bf16_parallel(1, ta, tb, c.m, c.n, c.kk, c.alpha, a16.data(), o.lda, b16.data(),
                            o.ldb, c.beta, h1.data(), o.ldc);
      k::gemm_bf16_parallel(2, ta, tb, c.m, c.n, c.kk, c.alpha, a16.data(), o.lda, b16.data(),
                            o.ldb, c.beta, h2.data(), o.ldc);
      // memcmp, not ==: bit-identical, NaN padding included.
      ASSERT_EQ(0, std::memcmp(f1.data(), f2.data(), f1.size() * sizeof(float)));
      ASSERT_EQ(0, std::memcmp(h1.data(), h2.data(), h1.size() * sizeof(float)));
      expect_close(c, f1, o.ldc, naive(c, o.a, o.lda, o.b, o.ldb, o.c0, o.ldc), o.c0);
      expect_close(c, h1, o.ldc, naive(c, rounded(o.a), o.lda, rounded(o.b), o.ldb, o.c0, o.ldc),
                   o.c0);
    }
}

// Mixed precision's entry: f32 is gemm_f32_parallel bit for bit; bf16 is gemm_bf16_parallel on the
// rounded operands bit for bit (strided operands with NaN padding: only op()'s elements are read).
TEST(Gemm, MixedPrecisionEntryEqualsTheTypedKernels) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int threads : {1, 2}) {
        const Case c{ta, tb, k::gemm_panel_rows() + 19, 33, 70, 1.5f, 0.25f};
        Operands o = make(c, 500 + 4 * ta + 2 * tb + threads);
        const auto a16 = to_bf16_vec(o.a), b16 = to_bf16_vec(o.b);
        std::vector<float> f = o.c0, fm = o.c0, h = o.c0, hm = o.c0;
        k::gemm_f32_parallel(threads, ta, tb, c.m, c.n, c.kk, c.alpha, o.a.data(), o.lda,
                             o.b.data(), o.ldb, c.beta, f.data(), o.ldc);
        k::gemm_parallel(longseq::core::DType::f32, threads, ta, tb, c.m, c.n, c.kk, c.alpha,
                         o.a.data(), o.lda, o.b.data(), o.ldb, c.beta, fm.data(), o.ldc);
        k::gemm_bf16_parallel(threads, ta, tb, c.m, c.n, c.kk, c.alpha, a16.data(), o.lda,
                              b16.data(), o.ldb, c.beta, h.data(), o.ldc);
        k::gemm_parallel(longseq::core::DType::bf16, threads, ta, tb, c.m, c.n, c.kk, c.alpha,
                         o.a.data(), o.lda, o.b.data(), o.ldb, c.beta, hm.data(), o.ldc);
        ASSERT_EQ(0, std::memcmp(f.data(), fm.data(), f.size() * sizeof(float)));
        ASSERT_EQ(0, std::memcmp(h.data(), hm.data(), h.size() * sizeof(float)));
        // and bf16 really rounds: the results differ from fp32 somewhere
        EXPECT_NE(0, std::memcmp(f.data(), h.data(), f.size() * sizeof(float)));
      }
}

int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

// The single-thread contract, observed from the OS: in a fresh process (death-test child, so no
// earlier test has started OpenMP workers) with OpenMP asking for 8 threads and nesting allowed,
// calls made outside and inside a 2-thread parallel region must not start threads beyond the
// region's one worker. A library that used its own pool or a nested team would add threads.
void single_thread_body() {
  omp_set_num_threads(8);
  omp_set_max_active_levels(4);
  const int64_t n = 384;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  const auto a16 = to_bf16_vec(a), b16 = to_bf16_vec(b);
  const int before = thread_count();
  k::gemm_f32(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  k::gemm_bf16(false, true, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c.data(), n);
  if (omp_get_max_threads() != 8) std::_Exit(3);  // the wrapper restored the caller's setting
  if (thread_count() != before) std::_Exit(1);
  if (c[0] != 0.125f * n) std::_Exit(4);
#pragma omp parallel num_threads(2)
  {
    std::vector<float> cl(n * n);
    k::gemm_f32(true, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, cl.data(), n);
    k::gemm_bf16(false, false, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, cl.data(), n);
  }
  if (thread_count() > before + 1) std::_Exit(2);
  std::_Exit(0);
}

TEST(GemmDeathTest, EachCallUsesOnlyTheCallingThread) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(single_thread_body(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
