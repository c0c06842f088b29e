#pragma once
// Finite-difference gradient checks for the fp64 reference kernels (tests/kernels/ref_*_test.cpp).
//
// Central differences, (f(x + h) - f(x - h)) / 2h with h = 1e-5: truncation error ~h^2 |f'''| / 6
// (~1e-10 for the O(1) inputs these tests use) plus rounding ~1e-16 |f| / h (~1e-11). The default
// tolerance |fd - analytic| <= 1e-7 + 1e-6 |analytic| is three orders above that and several
// below the error of any real mistake (a wrong sign, a missed term or a wrong mask entry moves a
// gradient by O(1e-2) or more on these shapes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "longseq/core/rng.hpp"

namespace longseq::test {

struct FdTol {
  double h = 1e-5;
  double atol = 1e-7;
  double rtol = 1e-6;
};

/// Compares `grad` with central differences of `loss` with respect to every element of `x`. `x` is
/// perturbed in place and restored. Returns the largest |fd - analytic|.
inline double expect_fd_grad(std::vector<double>& x, const std::vector<double>& grad,
                             const std::function<double()>& loss, const std::string& what,
                             FdTol tol = {}) {
  EXPECT_EQ(x.size(), grad.size()) << what;
  double worst = 0.0;
  int failures = 0;
  for (size_t i = 0; i < x.size() && i < grad.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + tol.h;
    const double fp = loss();
    x[i] = x0 - tol.h;
    const double fm = loss();
    x[i] = x0;
    const double fd = (fp - fm) / (2.0 * tol.h);
    const double err = std::fabs(fd - grad[i]);
    worst = std::fmax(worst, err);
    if (!(err <= tol.atol + tol.rtol * std::fabs(grad[i])) && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: analytic " << grad[i] << " finite difference " << fd
                    << " (|diff| " << err << ")";
  }
  return worst;
}

/// n standard normal values of stream `seed`.
inline std::vector<double> normal(size_t n, uint64_t seed) {
  std::vector<double> v(n);
  core::fill_normal(v.data(), n, seed);
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace longseq::test
