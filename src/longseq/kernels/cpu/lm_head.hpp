#pragma once
// LM head + cross-entropy, fused (BurstEngine §3.3, Algorithm 3) and unfused (for comparison).
//
// Legend: T tokens of this rank, C hidden, V vocabulary, Bs token tile.
// hidden [T, C] (the final norm's output), weight [V, C] (lm_head or the tied embedding),
// labels int32 [T] (the next token, or ignore_index), dhidden [T, C], dweight [V, C].
//
//   logits = hidden weight^T,  loss_t = logsumexp(logits[t]) - logits[t, labels[t]]
//   returned: sum of loss_t over non-ignored tokens, and their count (kernels/ref/cross_entropy)
//   gradients of grad_scale * sum: dlogits = grad_scale * (softmax(logits) - onehot(label))
//
// Note on Algorithm 3 as printed: its lines 12-13 add the one-hot term, (dLogits + E); the
// gradient of logsumexp(l) - l_y is softmax(l) - onehot(y), so the one-hot term is *subtracted*
// here (tests/kernels/lm_head_test.cpp checks the result against kernels/ref and finite
// differences, which would catch the printed sign).
//
// Distributed use: every rank passes grad_scale = 1 / (global count of non-ignored tokens over
// the data x context group) so that the sum of all ranks' gradients is the gradient of the global
// mean loss; the loss sums and counts are all-reduced by the caller.
//
// Fused: loops over token tiles of Bs rows. Per tile it computes the logits [Bs, V] by vocabulary
// tiles with an online logsumexp (Algorithm 3 lines 3-6), the loss, then turns the tile's logits
// into dlogits in place and runs the two gradient GEMMs immediately: forward and backward in one
// pass, logits never recomputed, memory O(Bs * V + T), never [T, V].
// Unfused: materialises logits [T, V], then the softmax gradient, then the GEMMs (what a plain
// framework does: O(T * V) memory). Same numbers up to summation order.
#include <cstdint>

#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"

namespace longseq::kernels::cpu {

inline constexpr int32_t kIgnoreIndex = -100;

struct LmHeadDims {
  int64_t t = 0, c = 0, v = 0;
};

struct LmHeadOptions {
  int64_t token_tile = 0;     ///< Bs; <= 0: auto, about 2^25 / V rows within [16, 1024]
  int64_t vocab_tile = 4096;  ///< Bv of the online logsumexp
  int32_t ignore_index = kIgnoreIndex;
  core::Exec exec = core::Exec::cpu(1);  ///< where the head runs (a CPU thread budget here)
  /// Precision of the three matrix products (logits, dhidden, dweight); the logsumexp, softmax
  /// and loss are fp32/fp64 either way.
  core::DType compute = core::DType::f32;
};

struct LossPart {
  double sum = 0.0;   ///< sum of loss_t over non-ignored tokens
  int64_t count = 0;  ///< non-ignored tokens
};

/// Non-ignored labels in labels[0, t); throws core::Error("[model] ...") for a label outside
/// [0, v) that is not the ignore index.
int64_t count_targets(const int32_t* labels, int64_t t, int64_t v,
                      int32_t ignore_index = kIgnoreIndex);

/// Token tile rows the fused path uses for these dims/options.
int64_t lm_head_token_tile(const LmHeadDims& d, const LmHeadOptions& o);
/// Workspace floats the fused path needs: token_tile * V.
int64_t lm_head_fused_workspace_floats(const LmHeadDims& d, const LmHeadOptions& o);

/// Fused loss + gradients. dhidden overwritten; dweight accumulated (+=). Blocking.
LossPart lm_head_ce_fused(const float* hidden, const float* weight, const int32_t* labels,
                          const LmHeadDims& d, double grad_scale, float* dhidden, float* dweight,
                          const LmHeadOptions& o);
/// Unfused reference path: allocates [T, V] logits. Same contract.
LossPart lm_head_ce_unfused(const float* hidden, const float* weight, const int32_t* labels,
                            const LmHeadDims& d, double grad_scale, float* dhidden, float* dweight,
                            const LmHeadOptions& o);

}  // namespace longseq::kernels::cpu
