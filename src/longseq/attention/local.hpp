#pragma once
// Attention over whole sequences held by one process: no group, no layout. The block kernels of
// kernels/cpu run over each sequence of a batch, with a MaskSpec over its positions 0..T-1. This
// is what the Python package's single-process attention runs on CPU tensors (design.md §11), and
// what the distributed passes equal at world 1.
//
// Legend: B sequences of T tokens, Hq query heads, Hkv key/value heads (Hq = g * Hkv), D head dim.
//   q [B, T, Hq, D], k and v [B, T, Hkv, D], o and dO [B, T, Hq, D], lse [B, T, Hq] (natural log),
//   dq like q, dk and dv like k; row-major, contiguous, host memory, no two overlapping.
// q, k, v, dO, o and the gradients share one dtype, f32 or bf16; lse is always f32.
//   f32:  the kernels read the caller's inputs and write the caller's o, lse and gradients in
//         place: nothing of a tensor's size is allocated.
//   bf16: the kernels read the bf16 inputs directly; o and dq are computed in fp32 scratch of a
//         chunk of query rows, dk and dv in fp32 of one sequence (they accumulate over the
//         chunks), then rounded to nearest even into the caller's bf16 tensors, as a bf16
//         FlashAttention returns them. The backward's D = rowsum(dO * O) reads the bf16 o.
// Rows that see no key get o = 0, lse = -inf and zero gradients. Work beyond the kernels: the
// positions 0..T-1 and document ids of one sequence, and the kernels' workspaces
// (O(threads * tile^2)), and the backward's dq accumulators of at most 1024 query rows: calls
// run on chunks of query rows against every key, so no scratch grows with T.
//
// Threads: at most `threads` (the kernels' contract: bit-identical for every thread count).
// Blocking. Errors: core::Error("[attention] ...") naming the values for shapes that do not fit
// (Hkv not dividing Hq, a mask of another length, a count of masks that is neither 1 nor B).
#include <cstdint>
#include <span>

#include "longseq/attention/mask_spec.hpp"
#include "longseq/core/dtype.hpp"

namespace longseq::attention {

struct LocalDims {
  int64_t batch = 1, tokens = 0, hq = 0, hkv = 0, d = 0;
  /// Throws core::Error naming the values unless every extent is positive and Hkv divides Hq.
  void validate() const;
};

/// The masks of a batch: one shared by every sequence, or one per sequence (document ids differ
/// between packed rows). Each must fit T tokens (MaskSpec::validate).
using LocalMasks = std::span<const MaskSpec* const>;

/// o = softmax(scale * q k^T + mask) v and its lse; `scale` 0 means 1/sqrt(D).
void local_attention_forward(const void* q, const void* k, const void* v, core::DType dtype,
                             const LocalDims& dims, LocalMasks masks, double scale, int threads,
                             void* o, float* lse);

/// dq, dk, dv (overwritten) from dO and the forward's o and lse. `dlse` [B, T, Hq] (f32, or
/// null for none) is the loss's gradient with respect to lse, for losses that use the lse too:
/// d lse_i / d s_ij = P_ij, so it enters as D_i - dlse_i in dS = P (dP - D), at no other cost.
void local_attention_backward(const void* dout, const void* q, const void* k, const void* v,
                              const void* o, const float* lse, core::DType dtype,
                              const LocalDims& dims, LocalMasks masks, double scale, int threads,
                              void* dq, void* dk, void* dv, const float* dlse = nullptr);

}  // namespace longseq::attention
