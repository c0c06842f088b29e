#include "longseq/kernels/cpu/swiglu.hpp"

#include <cmath>

namespace longseq::kernels::cpu {

void swiglu_forward(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float s = 1.0f / (1.0f + std::exp(-g));
    out[i] = g * s * up[i];
  }
}

void swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n, float* dgate,
                     float* dup) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], d = dout[i];
    const float s = 1.0f / (1.0f + std::exp(-g));
    dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
    dup[i] = d * g * s;
  }
}

}  // namespace longseq::kernels::cpu
