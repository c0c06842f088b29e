#pragma once
// The specification of the LM head + cross-entropy loss, in fp64 with plain loops. The fused,
// tiled fast version (model/, design.md §6) is tested against these functions.
//
// Legend: T tokens, C hidden size (d_model), V vocabulary size.
// Layouts, row-major: hidden [T, C], weight [V, C] (one row per vocabulary entry, as the
// nn.Linear(C, V, bias=False) weight and the tied embedding), labels int32 [T].
//
//   logits[t, v] = sum_c hidden[t, c] * weight[v, c]
//   loss_t       = logsumexp_v(logits[t, :]) - logits[t, labels[t]]   (natural log)
//   loss         = sum_{t : labels[t] != ignore_index} loss_t / count
// which is torch.nn.functional.cross_entropy(hidden @ weight.T, labels, ignore_index) with
// reduction "mean". The sum and the count are exposed separately so that a distributed caller can
// all-reduce both and normalise by the global count.
//
// Errors: core::Error("[kernels.ref] ...") naming the values, for negative dims and for a label
// outside [0, V) that is not the ignore index.
#include <cstdint>

namespace longseq::kernels::ref {

struct LmHeadDims {
  int64_t t = 0, c = 0, v = 0;
};

inline constexpr int32_t kIgnoreIndex = -100;

/// The loss as a sum and a count of the non-ignored tokens.
struct CrossEntropy {
  double sum = 0.0;   ///< sum of loss_t over non-ignored tokens
  int64_t count = 0;  ///< number of non-ignored tokens
  /// sum / count; 0 when every token is ignored (torch returns NaN there; we never produce NaN).
  double mean() const { return count > 0 ? sum / static_cast<double>(count) : 0.0; }
};

/// Forward. token_loss [T] (nullable) receives loss_t, 0 for ignored tokens; lse [T] (nullable)
/// receives logsumexp of each token's logits (also for ignored tokens).
CrossEntropy lm_head_ce_forward(const double* hidden, const double* weight, const int32_t* labels,
                                const LmHeadDims& dims, double* token_loss = nullptr,
                                double* lse = nullptr, int32_t ignore_index = kIgnoreIndex);

/// Backward: gradients of `grad_scale * sum` (sum as in CrossEntropy) with respect to hidden
/// [T, C] and weight [V, C], overwritten (not accumulated). For the mean loss pass
/// grad_scale = 1 / count (times the upstream gradient); a distributed caller passes
/// 1 / global_count. Ignored tokens get dhidden = 0 and contribute nothing to dweight.
void lm_head_ce_backward(const double* hidden, const double* weight, const int32_t* labels,
                         const LmHeadDims& dims, double grad_scale, double* dhidden,
                         double* dweight, int32_t ignore_index = kIgnoreIndex);

}  // namespace longseq::kernels::ref
