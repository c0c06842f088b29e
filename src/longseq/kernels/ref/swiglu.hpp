#pragma once
// The specification of the SwiGLU activation (LLaMA MLP), in fp64, elementwise.
//
// Legend: T tokens, F MLP hidden size. gate, up, out, dout, dgate, dup are [T, F] (any layout:
// the op is elementwise over n = T * F values).
//
//   out = silu(gate) * up,  silu(g) = g * sigmoid(g)
// The MLP around it is down(swiglu(gate_proj(x), up_proj(x))).
#include <cstdint>

namespace longseq::kernels::ref {

/// Forward over n elements. out may alias gate or up.
void swiglu_forward(const double* gate, const double* up, int64_t n, double* out);

/// Backward: gradients of sum(out * dout) with respect to gate and up, overwritten:
///   dgate = dout * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  dup = dout * silu(g)
/// Each element's inputs are read before its outputs are written, so dgate and dup may alias
/// dout, gate or up (but not each other).
void swiglu_backward(const double* dout, const double* gate, const double* up, int64_t n,
                     double* dgate, double* dup);

}  // namespace longseq::kernels::ref
