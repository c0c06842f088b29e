#pragma once
// The LLaMA layers as forward/backward pairs over explicit buffers (llm.c style, no autograd).
// fp32 compute by default; every matrix product goes through kernels/gemm. The functions with a
// `compute` argument run their matrix products at that precision (kernels::gemm_parallel: bf16
// rounds both operands, accumulates and writes fp32); norms, RoPE, SwiGLU and residuals stay fp32.
// Each fast layer is tested against its fp64 specification in kernels/ref
// (tests/model/layers_test.cpp).
//
// Legend: T tokens (this rank's, padding included), C hidden, Hq/Hkv heads, D head dim,
// F intermediate, V vocabulary. Row-major everywhere: activations [T, C], q [T, Hq, D],
// k/v [T, Hkv, D], weights [out, in] as nn.Linear.
// Backward functions *accumulate* parameter gradients (dweight += ...), because one parameter
// gradient buffer collects the contributions of a whole step (and, with tied embeddings, of two
// uses); input gradients are overwritten unless stated.
// Threads: `threads` is this rank's compute-thread budget; results never depend on it (GEMMs use
// the deterministic *_parallel variants, elementwise loops are per row).
#include <cstdint>
#include <vector>

#include "longseq/core/dtype.hpp"
#include "longseq/model/rope_scaling.hpp"

namespace longseq::model {

// ---- embedding ---------------------------------------------------------------------------------

/// out[t] = weight[tokens[t]] for pos[t] >= 0; padding rows (pos < 0) are zero so that they stay
/// zero through every layer (norm of 0 is 0, attention gives padding o = 0, SwiGLU(0) = 0).
/// Throws core::Error("[model] ...") for a token id outside [0, V).
void embedding_forward(const int32_t* tokens, const int64_t* pos, const float* weight, int64_t t,
                       int64_t c, int64_t v, float* out);
/// dweight[tokens[t]] += dout[t] for non-padding rows (in token order: deterministic).
void embedding_backward(const int32_t* tokens, const int64_t* pos, const float* dout, int64_t t,
                        int64_t c, float* dweight);

// ---- RMSNorm -----------------------------------------------------------------------------------

/// out = x * rstd * weight, rstd[t] = 1/sqrt(mean(x^2) + eps) (sum of squares in fp64).
/// out may alias x. rstd [T] is saved for the backward.
void rmsnorm_forward(const float* x, const float* weight, int64_t t, int64_t c, float eps,
                     float* out, float* rstd, int threads);
/// dx = (overwrite, or += when accumulate) d/dx; dweight += d/dweight. dx must not alias x.
void rmsnorm_backward(const float* dout, const float* x, const float* weight, const float* rstd,
                      int64_t t, int64_t c, float* dx, float* dweight, bool accumulate,
                      int threads);

// ---- linear (no bias) --------------------------------------------------------------------------

/// out [T, N] = in [T, K] * weight[N, K]^T (+ out when accumulate).
void linear_forward(const float* in, const float* weight, int64_t t, int64_t k, int64_t n,
                    float* out, bool accumulate, int threads,
                    core::DType compute = core::DType::f32);
/// din [T, K] = dout [T, N] * weight (+ din when accumulate_din); dweight [N, K] += dout^T in.
/// din may be null (no input gradient wanted); din may alias `in` (dweight is computed first).
void linear_backward(const float* dout, const float* in, const float* weight, int64_t t, int64_t k,
                     int64_t n, float* din, bool accumulate_din, float* dweight, int threads,
                     core::DType compute = core::DType::f32);

// ---- RoPE on global positions ------------------------------------------------------------------

/// cos/sin of every (token, frequency) of one rank's tokens, computed once per step in fp64 and
/// shared by every layer (kernels/ref/rope.hpp convention: rotate_half, inv_freq = theta^(-2i/D)).
/// With RoPE scaling (rope_scaling.hpp) the frequencies are the scaled ones and cos, sin are
/// multiplied by the attention factor (yarn), as transformers' LlamaRotaryEmbedding does.
class RopeTable {
 public:
  RopeTable() = default;
  /// Plain RoPE: inv_freq[i] = theta^(-2i/d).
  RopeTable(const int64_t* pos, int64_t t, int64_t d, double theta);
  /// Any frequencies: d = 2 * f.inv_freq.size().
  RopeTable(const int64_t* pos, int64_t t, const RopeFrequencies& f);
  /// x [T, H, D] rotated in place by each token's angles; padding tokens (pos < 0) untouched.
  void forward(float* x, int64_t h, int threads) const;
  /// The transpose (rotation by the negated angles), in place: dx from dout.
  void backward(float* dx, int64_t h, int threads) const;
  int64_t tokens() const { return t_; }

 private:
  void rotate(float* x, int64_t h, float sign, int threads) const;
  int64_t t_ = 0, d_ = 0;
  std::vector<float> cos_, sin_;  // [T, D/2]
  std::vector<uint8_t> pad_;      // [T]
};

// ---- SwiGLU MLP, blockwise over tokens ---------------------------------------------------------

/// Elementwise out = silu(gate) * up (n values); out may alias gate or up.
void swiglu_forward(const float* gate, const float* up, int64_t n, float* out);
/// dgate, dup from dout (overwritten); may alias dout/gate/up as in kernels/ref/swiglu.hpp.
void swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n, float* dgate,
                     float* dup);

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

}  // namespace longseq::model
