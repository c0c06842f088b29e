#pragma once
// Helpers shared by tests/model: seeded inputs and the elementwise tolerance rule of
// tests/README.md (|out - ref| <= atol + rtol |ref|).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "longseq/core/rng.hpp"

namespace longseq::test {

inline std::vector<float> normal_f(size_t n, uint64_t seed, double stddev = 1.0) {
  std::vector<float> v(n);
  core::fill_normal(v.data(), n, seed, 0, 0.0, stddev);
  return v;
}

inline std::vector<double> widen(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

/// Expects |a - ref| <= atol + rtol |ref| elementwise; reports the first few failures and returns
/// the largest |a - ref|.
template <class A, class R>
double expect_close(const A& a, const R& ref, double atol, double rtol, const std::string& what) {
  EXPECT_EQ(a.size(), ref.size()) << what;
  double worst = 0.0;
  int failures = 0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i) {
    const double x = static_cast<double>(a[i]), r = static_cast<double>(ref[i]);
    const double err = std::fabs(x - r);
    worst = std::fmax(worst, err);
    if (!(err <= atol + rtol * std::fabs(r)) && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << x << " want " << r << " (|diff| " << err
                    << ")";
  }
  return worst;
}

}  // namespace longseq::test
