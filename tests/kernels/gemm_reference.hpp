#pragma once
// The GEMM contract's test cases and fp64 reference, shared by the CPU wrapper's test
// (tests/kernels/gemm_test.cpp) and the GPU's (tests/cuda/gemm_test.cpp), so both devices are held
// to the same cases: every transpose pair, sizes {1, 3, 65, 130}^3, row strides wider than the rows
// with NaN in the padding (a product that ignored ld, or wrote past N, shows NaN), three
// (alpha, beta) pairs. Legend: C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "longseq/core/dtype.hpp"
#include "longseq/core/rng.hpp"

namespace longseq::test::gemm {

using core::bf16;

struct Case {
  bool ta, tb;
  int64_t m, n, kk;
  float alpha, beta;
  std::string str() const {
    return "ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " m=" + std::to_string(m) +
           " n=" + std::to_string(n) + " k=" + std::to_string(kk);
  }
};

struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c0;
};

inline std::vector<float> uniform(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  longseq::core::fill_uniform(v.data(), n, seed, 0, -1.0, 1.0);
  return v;
}

inline Operands make(const Case& c, uint64_t seed) {
  Operands o;
  const int64_t ar = c.ta ? c.kk : c.m, ac = c.ta ? c.m : c.kk;
  const int64_t br = c.tb ? c.n : c.kk, bc = c.tb ? c.kk : c.n;
  o.lda = ac + 3;
  o.ldb = bc + 5;
  o.ldc = c.n + 2;
  auto fill = [&](int64_t rows, int64_t cols, int64_t ld, uint64_t s) {
    std::vector<float> v = uniform(static_cast<size_t>(std::max<int64_t>(rows, 1) * ld), s);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = cols; j < ld; ++j) v[i * ld + j] = NAN;
    return v;
  };
  o.a = fill(ar, ac, o.lda, seed);
  o.b = fill(br, bc, o.ldb, seed + 1);
  o.c0 = fill(c.m, c.n, o.ldc, seed + 2);
  return o;
}

inline std::vector<double> naive(const Case& c, const std::vector<float>& a, int64_t lda,
                                 const std::vector<float>& b, int64_t ldb,
                                 const std::vector<float>& c0, int64_t ldc) {
  std::vector<double> out(static_cast<size_t>(c.m * c.n));
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < c.kk; ++p) {
        const double av = c.ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = c.tb ? b[j * ldb + p] : b[p * ldb + j];
        s += av * bv;
      }
      const double prev = c.beta == 0.0f ? 0.0 : static_cast<double>(c0[i * ldc + j]);
      out[i * c.n + j] = c.alpha * s + c.beta * prev;
    }
  return out;
}

inline std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const int64_t sizes[] = {1, 3, 65, 130};
  const std::pair<float, float> ab[] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {-1.25f, 0.75f}};
  int idx = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : sizes)
        for (int64_t n : sizes)
          for (int64_t kk : sizes) {
            const auto [alpha, beta] = ab[idx++ % 3];
            cases.push_back({ta, tb, m, n, kk, alpha, beta});
          }
  return cases;
}

inline std::vector<bf16> to_bf16_vec(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = longseq::core::to_bf16(x[i]);
  return out;
}
inline std::vector<float> rounded(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = longseq::core::round_bf16(x[i]);
  return out;
}

/// The linear layer's fp64 reference (nn.Linear's layout, w [N, K]): out = in w^T, din = dout w,
/// dw = dout^T in, each a plain sum of products in fp64 (a matrix product has no twin in
/// kernels/ref: the spec is the sum itself). Shared by the CPU linear test and the GPU's.
struct LinearRef {
  std::vector<double> out, din, dw;
};
inline LinearRef linear_reference(const std::vector<float>& in, const std::vector<float>& w,
                                  const std::vector<float>& dout, int64_t t, int64_t k, int64_t n) {
  LinearRef r{std::vector<double>(t * n, 0.0), std::vector<double>(t * k, 0.0),
              std::vector<double>(n * k, 0.0)};
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t e = 0; e < k; ++e) {
        r.out[i * n + j] += double(in[i * k + e]) * w[j * k + e];
        r.din[i * k + e] += double(dout[i * n + j]) * w[j * k + e];
        r.dw[j * k + e] += double(dout[i * n + j]) * in[i * k + e];
      }
  return r;
}

}  // namespace longseq::test::gemm
