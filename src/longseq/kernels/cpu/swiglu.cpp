// SwiGLU's public entry points (contracts in swiglu.hpp); the loops run in the active kernel
// variant (kernels/cpu/isa/pointwise.cpp).
#include "longseq/kernels/cpu/swiglu.hpp"

#include "longseq/kernels/cpu/dispatch.hpp"

namespace longseq::kernels::cpu {

void swiglu_forward(const float* gate, const float* up, int64_t n, float* out,
                    const core::Exec& exec) {
  exec.cpu_threads("swiglu_forward");
  active_pointwise().swiglu_forward(gate, up, n, out);
}

void swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n, float* dgate,
                     float* dup, const core::Exec& exec) {
  exec.cpu_threads("swiglu_backward");
  active_pointwise().swiglu_backward(dout, gate, up, n, dgate, dup);
}

}  // namespace longseq::kernels::cpu
