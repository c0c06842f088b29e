#pragma once
// The SwiGLU activation (LLaMA MLP), fast fp32 elementwise forward/backward pair; the
// specification is its fp64 twin kernels/ref/swiglu.hpp (tests/kernels/swiglu_test.cpp).
//
// Legend: n values (T * F of an MLP chunk, any layout).
//   out = silu(gate) * up,  silu(g) = g * sigmoid(g)
// Single-threaded: the MLP calls it on one chunk between GEMMs.
#include <cstdint>

#include "longseq/core/device.hpp"

namespace longseq::kernels::cpu {

/// out = silu(gate) * up over n values; out may alias gate or up. Runs on one thread whatever
/// `exec`'s budget: the callers hand it one token chunk at a time, too little to split.
void swiglu_forward(const float* gate, const float* up, int64_t n, float* out,
                    const core::Exec& exec);
/// dgate, dup from dout (overwritten); each element's inputs are read before its outputs are
/// written, so dgate and dup may alias dout, gate or up (not each other), as in the fp64 twin.
void swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n, float* dgate,
                     float* dup, const core::Exec& exec);

}  // namespace longseq::kernels::cpu
