// SwiGLU in fp64 with a sigmoid that cannot overflow for large |g|.
#include "longseq/kernels/ref/swiglu.hpp"

#include <cmath>

#include "longseq/core/error.hpp"

namespace longseq::kernels::ref {
namespace {

double sigmoid(double g) {
  if (g >= 0.0) return 1.0 / (1.0 + std::exp(-g));
  const double e = std::exp(g);
  return e / (1.0 + e);
}

}  // namespace

void swiglu_forward(const double* gate, const double* up, int64_t n, double* out) {
  core::require(n >= 0, "kernels.ref", "swiglu needs n >= 0; got ", n);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i], u = up[i];
    out[i] = g * sigmoid(g) * u;
  }
}

void swiglu_backward(const double* dout, const double* gate, const double* up, int64_t n,
                     double* dgate, double* dup) {
  core::require(n >= 0, "kernels.ref", "swiglu needs n >= 0; got ", n);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i], u = up[i], dy = dout[i];
    const double sg = sigmoid(g);
    dgate[i] = dy * u * sg * (1.0 + g * (1.0 - sg));
    dup[i] = dy * g * sg;
  }
}

}  // namespace longseq::kernels::ref
