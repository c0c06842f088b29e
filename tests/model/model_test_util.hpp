#pragma once
// Helpers shared by tests/model: seeded inputs and the elementwise tolerance rule of
// tests/README.md (|out - ref| <= atol + rtol |ref|).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
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

/// Records a kernel output's error against its reference as gtest properties, so that a run
/// with --gtest_output=json reports the measured error beside the pass (bench/cuda_test_errors.py
/// tabulates them): err_NAME = ||a - ref||_2 / ||ref||_2 (the relative L2 error; the absolute L2
/// error where ref is all zeros) and maxerr_NAME = max |a - ref|. NaN is recorded as nan.
template <class A, class R>
void record_error(const A& a, const R& ref, const std::string& name) {
  double se = 0.0, sr = 0.0, worst = 0.0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(ref[i]);
    se += d * d;
    sr += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
    // fmax drops a NaN operand: once an element is NaN the worst error stays NaN.
    worst = std::isnan(d) || std::isnan(worst) ? std::nan("") : std::fmax(worst, std::fabs(d));
  }
  const double rel = sr > 0.0 ? std::sqrt(se / sr) : std::sqrt(se);
  // Property names become XML attribute names in --gtest_output=xml: letters, digits, '_'.
  std::string key = name;
  for (char& ch : key)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", rel);
  ::testing::Test::RecordProperty("err_" + key, buf);
  std::snprintf(buf, sizeof buf, "%.3e", worst);
  ::testing::Test::RecordProperty("maxerr_" + key, buf);
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
