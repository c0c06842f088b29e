#pragma once
// The specification of attention, in fp64 with plain loops. Every fast kernel and every
// distributed algorithm is tested against these functions; they favour obviousness over speed.
//
// Legend: Tq query tokens, Tk key tokens, Hq query heads, Hkv key/value heads (Hq = g * Hkv, query
// head h uses kv head h / g; K/V are never repeated), D head dim.
// Layouts, row-major: q [Tq, Hq, D], k and v [Tk, Hkv, D], o and do [Tq, Hq, D], lse [Tq, Hq].
//
// Errors: core::Error("[kernels.ref] ...") naming the values when Hkv does not divide Hq, a dim is
// out of range, mask.docs is set without document ids, or a position lies beyond the block mask
// (block_size * num_blocks), which the predicate could not evaluate.
#include <cstdint>

#include "longseq/kernels/mask.hpp"

namespace longseq::kernels::ref {

struct AttnDims {
  int64_t tq = 0, tk = 0, hq = 0, hkv = 0, d = 0;
  /// The CPU backward's dq chunking (attention_backward_chunks) is sized for this many kv heads
  /// (0: hkv). A caller that runs the heads of one call in several calls of fewer heads names the
  /// whole count, so the chunks, and with them the bits of dq, stay those of the one call.
  int64_t chunk_hkv = 0;
};

/// o = softmax(scale * q k^T + mask) v per head; lse = natural-log logsumexp of the masked scaled
/// scores. A row that sees no key gets o = 0 and lse = -inf (never NaN).
void attention_forward(const double* q, const double* k, const double* v, const Tokens& qt,
                       const Tokens& kt, const Mask& mask, double scale, const AttnDims& dims,
                       double* o, double* lse);

/// Gradients of sum(o * do) with respect to q, k, v (outputs overwritten, not accumulated).
/// Rows that see no key contribute nothing.
void attention_backward(const double* q, const double* k, const double* v, const double* dout,
                        const Tokens& qt, const Tokens& kt, const Mask& mask, double scale,
                        const AttnDims& dims, double* dq, double* dk, double* dv);

/// delta[r] = sum_c o[r, c] * dout[r, c] for r < t * h: the `D = rowsum(dO * O)` that the
/// LSE-based backward (design.md §2) takes instead of O. o and dout [t, h, d], delta [t, h].
void attention_d(const double* o, const double* dout, int64_t t, int64_t h, int64_t d,
                 double* delta);

/// The merge of two attention partials over disjoint key sets, [T, H] rows of D, in place: with
/// a = lse[r], b = lse_other[r], m = max(a, b),
///   lse'[r] = m + log(exp(a - m) + exp(b - m))
///   o'[r]   = exp(a - lse'[r]) o[r] + exp(b - lse'[r]) o_other[r]
/// which is the attention over the union of the two key sets (the softmax denominators add). A
/// side with lse = -inf saw no key: it contributes nothing and its o is not read; both -inf give
/// o = 0, lse = -inf. The fast kernels' merge_partials (kernels/cpu/attention.hpp) is checked
/// against this.
void merge_partials(double* o, double* lse, const double* o_other, const double* lse_other,
                    int64_t t, int64_t h, int64_t d);

}  // namespace longseq::kernels::ref
