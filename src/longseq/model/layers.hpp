#pragma once
// The model-level LLaMA layers as forward/backward pairs over explicit buffers (llm.c style, no
// autograd): the embedding and the blockwise SwiGLU MLP, composed from the fast CPU kernels
// (kernels/cpu: rmsnorm, rope, swiglu, linear, lm_head, each beside its fp64 twin in kernels/ref).
// fp32 compute by default; the MLP's matrix products run at `compute` precision
// (kernels::gemm_parallel: bf16 rounds both operands, accumulates and writes fp32).
// Tested against fp64 compositions of kernels/ref in tests/model/layers_test.cpp.
//
// Legend: T tokens (this rank's, padding included), C hidden, F intermediate, V vocabulary.
// Row-major everywhere: activations [T, C], weights [out, in] as nn.Linear.
// Backward functions *accumulate* parameter gradients (dweight += ...), because one parameter
// gradient buffer collects the contributions of a whole step (and, with tied embeddings, of two
// uses); input gradients are overwritten unless stated.
// Threads: `threads` is this rank's compute-thread budget; results never depend on it.
#include <cstdint>

#include "longseq/core/dtype.hpp"

namespace longseq::model {

class Kernels;

// ---- embedding ---------------------------------------------------------------------------------

/// out[t] = weight[tokens[t]] for pos[t] >= 0; padding rows (pos < 0) are zero so that they stay
/// zero through every layer (norm of 0 is 0, attention gives padding o = 0, SwiGLU(0) = 0).
/// Throws core::Error("[model] ...") for a token id outside [0, V).
void embedding_forward(const int32_t* tokens, const int64_t* pos, const float* weight, int64_t t,
                       int64_t c, int64_t v, float* out);
/// dweight[tokens[t]] += dout[t] for non-padding rows (in token order: deterministic).
void embedding_backward(const int32_t* tokens, const int64_t* pos, const float* dout, int64_t t,
                        int64_t c, float* dweight);

// ---- SwiGLU MLP, blockwise over tokens ---------------------------------------------------------

struct MlpDims {
  int64_t t = 0, c = 0, f = 0;
  int64_t chunk = 0;                       ///< tokens per block (<= 0: all T at once)
  core::DType compute = core::DType::f32;  ///< precision of the three matrix products
};

/// Floats of workspace mlp_forward/mlp_backward need: O(chunk * F), never O(T * F).
int64_t mlp_workspace_floats(const MlpDims& d);

/// out [T, C] (+)= down(swiglu(x wgate^T, x wup^T)), computed `chunk` tokens at a time so that the
/// [T, F] intermediates never exist (blockwise FFN). accumulate: add into out (the residual).
void mlp_forward(const float* x, const float* wgate, const float* wup, const float* wdown,
                 const MlpDims& d, float* out, bool accumulate, float* workspace, int threads);
/// dx [T, C] (overwritten, or += when accumulate) and dwgate, dwup, dwdown (+=) from dout [T, C].
/// The chunk's gate/up activations are recomputed from x (2 of the 3 forward GEMMs), the price of
/// never holding [T, F].
void mlp_backward(const float* dout, const float* x, const float* wgate, const float* wup,
                  const float* wdown, const MlpDims& d, float* dx, bool accumulate, float* dwgate,
                  float* dwup, float* dwdown, float* workspace, int threads);

/// The same two on any device: every pointer (workspace included) on `k`'s device, each product
/// and activation through `k` (model/kernels.hpp). The `threads` forms are these with CpuKernels.
void mlp_forward(const float* x, const float* wgate, const float* wup, const float* wdown,
                 const MlpDims& d, float* out, bool accumulate, float* workspace, const Kernels& k);
void mlp_backward(const float* dout, const float* x, const float* wgate, const float* wup,
                  const float* wdown, const MlpDims& d, float* dx, bool accumulate, float* dwgate,
                  float* dwup, float* dwdown, float* workspace, const Kernels& k);

}  // namespace longseq::model
