#pragma once
// The SwiGLU activation (LLaMA MLP) on a GPU, fp32 elementwise forward/backward pair: the twin of
// kernels/cpu/swiglu.hpp with the same contract on device pointers; the specification is the fp64
// kernels/ref/swiglu.hpp.
//
// Legend: n values (T * F of an MLP chunk, any layout).
//   out = silu(gate) * up,  silu(g) = g * sigmoid(g) = g / (1 + exp(-g))
// exp is CUDA's expf (a few ulps; the CPU kernels use their own exp_fast): a gate below about -88
// gives exp(-g) = inf, sigmoid 0 and silu -0, never NaN.
//
// Execution: queued on `exec`'s stream (a CPU context is refused naming the kernel); a grid-stride
// loop, one element per thread at a time, so the bits never depend on the grid.
#include <cstdint>

#include "longseq/core/device.hpp"

namespace longseq::kernels::cuda {

/// out = silu(gate) * up over n values; out may alias gate or up.
void swiglu_forward(const float* gate, const float* up, int64_t n, float* out,
                    const core::Exec& exec);
/// dgate, dup from dout (overwritten); each element's inputs are read before its outputs are
/// written, so dgate and dup may alias dout, gate or up (not each other), as in the fp64 twin.
///   dgate = dout * up * s * (1 + g * (1 - s)),  dup = dout * g * s,  s = sigmoid(g)
void swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n, float* dgate,
                     float* dup, const core::Exec& exec);

}  // namespace longseq::kernels::cuda
