// RMSNorm in fp64, two passes per row (sum of squares, then scale).
#include "longseq/kernels/ref/rmsnorm.hpp"

#include <cmath>

#include "longseq/core/error.hpp"

namespace longseq::kernels::ref {
namespace {

void check(int64_t t, int64_t c, double eps) {
  core::require(t >= 0 && c > 0, "kernels.ref", "rmsnorm dims must be t >= 0, c > 0; got t ", t,
                " c ", c);
  core::require(eps >= 0.0, "kernels.ref", "rmsnorm eps must be >= 0; got ", eps);
}

double row_rstd(const double* x, int64_t c, double eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < c; ++i) ss += x[i] * x[i];
  return 1.0 / std::sqrt(ss / static_cast<double>(c) + eps);
}

}  // namespace

void rmsnorm_forward(const double* x, const double* weight, int64_t t, int64_t c, double eps,
                     double* out, double* rstd) {
  check(t, c, eps);
  for (int64_t r = 0; r < t; ++r) {
    const double* xr = x + r * c;
    const double s = row_rstd(xr, c, eps);
    if (rstd) rstd[r] = s;
    double* yr = out + r * c;
    for (int64_t i = 0; i < c; ++i) yr[i] = xr[i] * s * weight[i];
  }
}

void rmsnorm_backward(const double* dout, const double* x, const double* weight, int64_t t,
                      int64_t c, double eps, double* dx, double* dweight) {
  check(t, c, eps);
  for (int64_t i = 0; i < c; ++i) dweight[i] = 0.0;
  for (int64_t r = 0; r < t; ++r) {
    const double* xr = x + r * c;
    const double* gr = dout + r * c;
    const double s = row_rstd(xr, c, eps);
    // y = x * s * w with s = (mean x^2 + eps)^(-1/2), ds/dx_i = -s^3 x_i / C.
    double proj = 0.0;
    for (int64_t i = 0; i < c; ++i) {
      proj += weight[i] * gr[i] * xr[i];
      dweight[i] += gr[i] * xr[i] * s;
    }
    const double k = s * s * s * proj / static_cast<double>(c);
    double* dr = dx + r * c;
    for (int64_t i = 0; i < c; ++i) dr[i] = s * weight[i] * gr[i] - k * xr[i];
  }
}

}  // namespace longseq::kernels::ref
