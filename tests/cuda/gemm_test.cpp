// kernels/cuda/gemm (cuBLASLt) and the linear layer over it, against plain fp64 products, with the
// cases of tests/kernels/gemm_test.cpp: every transpose pair, sizes {1, 3, 65, 130}^3, row strides
// wider than the rows with NaN in the padding (a product that ignored ld, or wrote past N, shows
// NaN), three (alpha, beta) pairs. Plus what the GPU path adds: operands at every pointer
// alignment (cuBLASLt is told each one), the plain-kernel fallback on its own, beta = 0 over NaN,
// K = 0, a shape large enough for tensor-core tiles and split-K, bitwise repetition, and bf16
// output (gemm_bf16_out_bf16).
//
// Tolerance (gemm_test.cpp's rule, inputs uniform in [-1, 1]): |got - ref| <= (1e-6 + 4e-7 (K +
// 2)) (1 + |ref|), the worst-case growth of an fp32 sum of K products of magnitude <= 1 with a
// constant well above u = 6e-8. bf16: the reference is the fp64 product of the bf16-rounded
// operands (bf16 products are exact in fp32), so the same rule holds. Exact fp32 (no TF32) is
// what this checks: TF32 rounds operands to 10 mantissa bits, an error of ~1e-3 relative, far
// outside the bound at every K here.
#include "longseq/kernels/cuda/gemm.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/cuda_test_util.hpp"
#include "kernels/gemm_reference.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/rng.hpp"
#include "model/model_test_util.hpp"

namespace {

namespace kcu = longseq::kernels::cuda;
namespace lt = longseq::test;
using longseq::core::bf16;
using longseq::core::Buffer;
using longseq::core::DType;
using longseq::core::Exec;

using namespace longseq::test::gemm;  // Case, Operands, make, naive, all_cases, rounded

// Fails the test (fatally) at the first element out of bounds or padding of C written.
void expect_close(const Case& c, const std::vector<float>& got, int64_t ldc,
                  const std::vector<double>& ref, const std::string& what) {
  const double tol = 1e-6 + 4e-7 * static_cast<double>(c.kk + 2);
  if (what.ends_with(" large")) {  // the error table's entry (bench/cuda_test_errors.py)
    std::vector<double> dense(static_cast<size_t>(c.m * c.n));
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) dense[i * c.n + j] = got[i * ldc + j];
    lt::record_error(dense, ref, what.substr(0, what.size() - 6));
  }
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      const double r = ref[i * c.n + j];
      ASSERT_NEAR(got[i * ldc + j], r, tol * (1.0 + std::abs(r)))
          << what << " " << c.str() << " at (" << i << "," << j << ")";
    }
    for (int64_t j = c.n; j < ldc; ++j)
      ASSERT_TRUE(std::isnan(got[i * ldc + j])) << what << " " << c.str() << " wrote past n";
  }
}

enum class Path { f32, bf16, f32_simple, bf16_simple, f32_as_bf16 };

const char* path_name(Path p) {
  switch (p) {
    case Path::f32:
      return "gemm_f32";
    case Path::bf16:
      return "gemm_bf16";
    case Path::f32_simple:
      return "gemm_f32_simple";
    case Path::bf16_simple:
      return "gemm_bf16_simple";
    case Path::f32_as_bf16:
      return "gemm(bf16)";
  }
  return "?";
}

// Runs one case on the GPU through `path`; each operand starts `offset` elements into its device
// buffer (so that its alignment is 4 * offset or 2 * offset bytes past 256). Returns C, host-side.
std::vector<float> run_case(Path path, const Case& c, const Operands& o, const Exec& ex,
                            int64_t offset = 0) {
  auto shifted = [&](const auto& v) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    std::vector<T> s(static_cast<size_t>(offset) + v.size());
    std::copy(v.begin(), v.end(), s.begin() + offset);
    return s;
  };
  auto dc = lt::upload(shifted(o.c0));
  float* cp = dc.data() + offset;
  if (path == Path::bf16 || path == Path::bf16_simple) {
    auto da = lt::upload(shifted(to_bf16_vec(o.a))), db = lt::upload(shifted(to_bf16_vec(o.b)));
    const bf16* ap = da.data() + offset;
    const bf16* bp = db.data() + offset;
    if (path == Path::bf16)
      kcu::gemm_bf16(ex, c.ta, c.tb, c.m, c.n, c.kk, c.alpha, ap, o.lda, bp, o.ldb, c.beta, cp,
                     o.ldc);
    else
      kcu::gemm_bf16_simple(ex, c.ta, c.tb, c.m, c.n, c.kk, c.alpha, ap, o.lda, bp, o.ldb, c.beta,
                            cp, o.ldc);
  } else {
    auto da = lt::upload(shifted(o.a)), db = lt::upload(shifted(o.b));
    const float* ap = da.data() + offset;
    const float* bp = db.data() + offset;
    if (path == Path::f32)
      kcu::gemm_f32(ex, c.ta, c.tb, c.m, c.n, c.kk, c.alpha, ap, o.lda, bp, o.ldb, c.beta, cp,
                    o.ldc);
    else if (path == Path::f32_simple)
      kcu::gemm_f32_simple(ex, c.ta, c.tb, c.m, c.n, c.kk, c.alpha, ap, o.lda, bp, o.ldb, c.beta,
                           cp, o.ldc);
    else
      kcu::gemm(DType::bf16, ex, c.ta, c.tb, c.m, c.n, c.kk, c.alpha, ap, o.lda, bp, o.ldb, c.beta,
                cp, o.ldc);
  }
  const auto all = lt::download(dc, static_cast<size_t>(offset) + o.c0.size());
  return std::vector<float>(all.begin() + offset, all.end());
}

void check_path(Path path, const std::vector<Case>& cases, uint64_t seed, int64_t offset = 0) {
  const Exec ex = lt::gpu_exec();
  const bool low = path == Path::bf16 || path == Path::bf16_simple || path == Path::f32_as_bf16;
  for (const Case& c : cases) {
    const Operands o = make(c, seed++);
    const std::vector<float> got = run_case(path, c, o, ex, offset);
    const auto ref = low ? naive(c, rounded(o.a), o.lda, rounded(o.b), o.ldb, o.c0, o.ldc)
                         : naive(c, o.a, o.lda, o.b, o.ldb, o.c0, o.ldc);
    expect_close(c, got, o.ldc, ref,
                 std::string(path_name(path)) + " offset " + std::to_string(offset));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Prints what ran the products so far (cuBLASLt or the plain kernel): the GPU check's log shows it.
void report_stats(const char* when) {
  const kcu::GemmStats s = kcu::gemm_stats();
  std::cout << "[gemm stats " << when << "] cublaslt " << s.cublaslt << ", simple " << s.simple
            << ", plans " << s.plans << "\n";
  ::testing::Test::RecordProperty("gemm_cublaslt", std::to_string(s.cublaslt));
  ::testing::Test::RecordProperty("gemm_simple", std::to_string(s.simple));
}

TEST(CudaGemm, F32AllTransposesOddSizesStridesAlphaBeta) {
  LONGSEQ_NEED_GPU();
  check_path(Path::f32, all_cases(), 1);
  report_stats("after f32");
}

TEST(CudaGemm, Bf16MatchesFp64OnRoundedInputs) {
  LONGSEQ_NEED_GPU();
  check_path(Path::bf16, all_cases(), 1000);
  report_stats("after bf16");
}

TEST(CudaGemm, F32OperandsAtBf16PrecisionRoundFirst) {
  LONGSEQ_NEED_GPU();
  check_path(Path::f32_as_bf16, all_cases(), 2000);
}

// The fallback kernel on its own (it runs only where cuBLASLt offers no algorithm).
TEST(CudaGemm, SimpleKernelMatchesFp64) {
  LONGSEQ_NEED_GPU();
  check_path(Path::f32_simple, all_cases(), 3000);
  check_path(Path::bf16_simple, all_cases(), 4000);
}

// Operands 1, 2 and 3 elements past a 256-byte boundary: 4, 8, 12-byte (fp32) and 2, 4, 6-byte
// (bf16) alignment, each told to cuBLASLt's heuristic (a plan per alignment).
TEST(CudaGemm, AnyPointerAlignment) {
  LONGSEQ_NEED_GPU();
  std::vector<Case> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) cases.push_back({ta, tb, 65, 130, 67, 0.75f, 0.5f});
  for (int64_t offset : {1, 2, 3}) {
    check_path(Path::f32, cases, 5000 + offset, offset);
    check_path(Path::bf16, cases, 6000 + offset, offset);
  }
  report_stats("after alignments");
}

TEST(CudaGemm, BetaZeroOverwritesNanAndKZeroScales) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  const int64_t m = 5, n = 7;
  auto a = lt::upload(std::vector<float>(m * 4, 1.0f)),
       b = lt::upload(std::vector<float>(4 * n, 1.0f));
  auto c = lt::upload(std::vector<float>(m * n, NAN));
  kcu::gemm_f32(ex, false, false, m, n, 4, 1.0f, a.data(), 4, b.data(), n, 0.0f, c.data(), n);
  for (float x : lt::download(c, m * n)) ASSERT_EQ(x, 4.0f);
  kcu::gemm_f32(ex, false, false, m, n, 0, 1.0f, a.data(), 1, b.data(), n, 0.5f, c.data(), n);
  for (float x : lt::download(c, m * n)) ASSERT_EQ(x, 2.0f);
  auto a16 = lt::upload(to_bf16_vec(std::vector<float>(m * 4, 1.0f)));
  auto b16 = lt::upload(to_bf16_vec(std::vector<float>(4 * n, 1.0f)));
  auto c2 = lt::upload(std::vector<float>(m * n, NAN));
  kcu::gemm_bf16(ex, false, false, m, n, 4, 1.0f, a16.data(), 4, b16.data(), n, 0.0f, c2.data(), n);
  for (float x : lt::download(c2, m * n)) ASSERT_EQ(x, 4.0f);
  kcu::gemm_bf16(ex, false, false, m, n, 0, 1.0f, a16.data(), 1, b16.data(), n, 0.0f, c2.data(), n);
  for (float x : lt::download(c2, m * n)) ASSERT_EQ(x, 0.0f);
}

// bf16 operands, bf16 C (the LM head's logits): every case of all_cases with beta 0 (C is
// overwritten; it starts NaN, so an element not written or a write into the padding shows), on
// cuBLASLt and, through K = 0, the zero-fill kernel. Tolerance: the fp32 rule above, plus the one
// rounding of the fp32 result to bf16, half an ulp: 2^-9 |C| (2^-8 |ref| covers it with the fp32
// error on top).
TEST(CudaGemm, Bf16OutputRoundsTheFp32ResultOnce) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  uint64_t seed = 8000;
  std::vector<Case> cases = all_cases();
  cases.push_back({false, true, 5, 7, 0, 1.0f, 0.0f});  // K = 0: zeros
  for (Case c : cases) {
    c.beta = 0.0f;
    const Operands o = make(c, seed++);
    auto da = lt::upload(to_bf16_vec(o.a)), db = lt::upload(to_bf16_vec(o.b));
    auto dc = lt::upload(to_bf16_vec(std::vector<float>(o.c0.size(), NAN)));
    kcu::gemm_bf16_out_bf16(ex, c.ta, c.tb, c.m, c.n, c.kk, c.alpha, da.data(), o.lda, db.data(),
                            o.ldb, dc.data(), o.ldc);
    const std::vector<bf16> got = lt::download(dc, o.c0.size());
    const auto ref = naive(c, rounded(o.a), o.lda, rounded(o.b), o.ldb, o.c0, o.ldc);
    const double tol = 1e-6 + 4e-7 * static_cast<double>(c.kk + 2);
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        const double r = ref[i * c.n + j];
        ASSERT_NEAR(longseq::core::to_f32(got[i * o.ldc + j]), r,
                    tol * (1.0 + std::abs(r)) + 0x1p-8 * std::abs(r))
            << "gemm_bf16_out_bf16 " << c.str() << " at (" << i << "," << j << ")";
      }
      for (int64_t j = c.n; j < o.ldc; ++j)
        ASSERT_TRUE(std::isnan(longseq::core::to_f32(got[i * o.ldc + j])))
            << "gemm_bf16_out_bf16 " << c.str() << " wrote past n";
    }
  }
  report_stats("after bf16 output");
}

// Large enough for tensor-core tiles (bf16), many thread blocks and split-K; repeated calls with
// the same plan give the same bits.
TEST(CudaGemm, LargeShapeMatchesAndRepeatsBitwise) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  for (bool tb : {false, true}) {
    const Case c{false, tb, 257, 511, 1031, 1.0f, 0.0f};
    const Operands o = make(c, 7000 + tb);
    const auto f1 = run_case(Path::f32, c, o, ex), f2 = run_case(Path::f32, c, o, ex);
    expect_close(c, f1, o.ldc, naive(c, o.a, o.lda, o.b, o.ldb, o.c0, o.ldc), "gemm_f32 large");
    const auto h1 = run_case(Path::bf16, c, o, ex), h2 = run_case(Path::bf16, c, o, ex);
    expect_close(c, h1, o.ldc, naive(c, rounded(o.a), o.lda, rounded(o.b), o.ldb, o.c0, o.ldc),
                 "gemm_bf16 large");
    // NaN padding compares unequal: compare the bits.
    ASSERT_EQ(f1.size(), f2.size());
    EXPECT_EQ(0, std::memcmp(f1.data(), f2.data(), f1.size() * sizeof(float))) << "f32 repeat";
    EXPECT_EQ(0, std::memcmp(h1.data(), h2.data(), h1.size() * sizeof(float))) << "bf16 repeat";
  }
  report_stats("after large");
}

// ---- linear -------------------------------------------------------------------------------------

// tests/kernels/linear_test.cpp's shapes and tolerance (1e-5 + 1e-4 rel: sums of K, N or T
// products of normal inputs and normal(0, 0.3) weights), plus a T past a few warps; accumulate
// modes; din may be null or overwrite `in`.
TEST(CudaLinear, ForwardBackwardMatchProductsAtBothPrecisions) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  using Dims = std::tuple<int64_t, int64_t, int64_t>;
  for (auto [t, k, n] : {Dims{7, 12, 9}, Dims{100, 33, 70}}) {
    auto in = lt::normal_f(t * k, 6), w = lt::normal_f(n * k, 7, 0.3),
         dout = lt::normal_f(t * n, 8);
    for (DType p : {DType::f32, DType::bf16}) {
      const bool f32 = p == DType::f32;
      const LinearRef r = f32 ? linear_reference(in, w, dout, t, k, n)
                              : linear_reference(rounded(in), rounded(w), rounded(dout), t, k, n);
      const std::string at = std::string(f32 ? "f32" : "bf16") + " t" + std::to_string(t);
      auto din_ = lt::upload(in), dw_ = lt::upload(w), ddo = lt::upload(dout);
      Buffer<float> out(t * n, ex.device), dwt(n * k, ex.device), dinb(t * k, ex.device);
      kcu::linear_forward(din_.data(), dw_.data(), t, k, n, out.data(), false, ex, p);
      lt::expect_close(lt::download(out, t * n), r.out, 1e-5, 1e-4, "linear out " + at);
      // accumulate: out += the same product again.
      kcu::linear_forward(din_.data(), dw_.data(), t, k, n, out.data(), true, ex, p);
      std::vector<double> twice = r.out;
      for (double& x : twice) x *= 2;
      lt::expect_close(lt::download(out, t * n), twice, 2e-5, 1e-4, "linear out accumulate " + at);
      kcu::linear_backward(ddo.data(), din_.data(), dw_.data(), t, k, n, dinb.data(), false,
                           dwt.data(), ex, p);
      lt::expect_close(lt::download(dinb, t * k), r.din, 1e-5, 1e-4, "linear din " + at);
      lt::expect_close(lt::download(dwt, n * k), r.dw, 1e-5, 1e-4, "linear dweight " + at);
      // No din wanted: only dweight (accumulated a second time).
      kcu::linear_backward(ddo.data(), din_.data(), dw_.data(), t, k, n, nullptr, false, dwt.data(),
                           ex, p);
      std::vector<double> dw2 = r.dw;
      for (double& x : dw2) x *= 2;
      lt::expect_close(lt::download(dwt, n * k), dw2, 2e-5, 1e-4, "linear dweight x2 " + at);
      // din overwrites `in` (dweight is queued first and still sees the input).
      Buffer<float> dwt2(n * k, ex.device);
      kcu::linear_backward(ddo.data(), din_.data(), dw_.data(), t, k, n, din_.data(), false,
                           dwt2.data(), ex, p);
      lt::expect_close(lt::download(dwt2, n * k), r.dw, 1e-5, 1e-4, "linear dweight aliased " + at);
      lt::expect_close(lt::download(din_, t * k), r.din, 1e-5, 1e-4, "linear din aliased " + at);
    }
  }
}

}  // namespace
