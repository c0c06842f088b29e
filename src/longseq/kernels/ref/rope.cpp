// RoPE in fp64 on global positions, rotate_half pairing (i, i + D/2).
#include "longseq/kernels/ref/rope.hpp"

#include <cmath>

#include "longseq/core/error.hpp"

namespace longseq::kernels::ref {
namespace {

void check(int64_t t, int64_t h, int64_t d, double theta) {
  core::require(t >= 0 && h > 0 && d > 0 && d % 2 == 0, "kernels.ref",
                "rope needs t >= 0, h > 0 and an even head dim d > 0; got t ", t, " h ", h, " d ",
                d);
  core::require(theta > 0.0, "kernels.ref", "rope theta must be > 0; got ", theta);
}

// Rotates every (i, i + D/2) pair of every head of every token by sign * angle.
void rotate(const double* x, const int64_t* pos, int64_t t, int64_t h, int64_t d, double theta,
            double sign, double* out) {
  const int64_t half = d / 2;
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t i = 0; i < half; ++i) {
      const bool pad = pos[r] < 0;
      const double inv_freq =
          std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      const double a = pad ? 0.0 : static_cast<double>(pos[r]) * inv_freq;
      const double cs = std::cos(a), sn = sign * std::sin(a);
      for (int64_t hh = 0; hh < h; ++hh) {
        const int64_t base = (r * h + hh) * d;
        const double x0 = x[base + i], x1 = x[base + i + half];
        out[base + i] = x0 * cs - x1 * sn;
        out[base + i + half] = x1 * cs + x0 * sn;
      }
    }
  }
}

}  // namespace

void rope_forward(const double* x, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                  double theta, double* out) {
  check(t, h, d, theta);
  rotate(x, pos, t, h, d, theta, 1.0, out);
}

void rope_backward(const double* dout, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                   double theta, double* dx) {
  check(t, h, d, theta);
  rotate(dout, pos, t, h, d, theta, -1.0, dx);
}

}  // namespace longseq::kernels::ref
