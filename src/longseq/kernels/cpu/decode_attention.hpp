#pragma once
// CPU decode attention: one new query row against a rank's shard of the KV cache, the partial
// (O, LSE) that model/inference.cpp all-gathers and merges over the ranks (design.md §2). Its
// specification is kernels/ref/decode_attention.hpp (same legend, layouts and mask); tested
// against it in tests/kernels/decode_attention_test.cpp.
//
// Legend: n cached tokens, Hq query heads, Hkv key/value heads (Hq = g * Hkv, query head h uses kv
// head h / g; K/V are never repeated), D head dim. Layouts, row-major: q [Hq, D], k and v
// [n, Hkv, D], pos [n], o [Hq, D], lse [Hq].
//
// Precision: q.k is accumulated in fp32 (D terms), the softmax and the P.V sum in fp64. A decode
// step is memory-bound (every cached K and V byte is read once per step, O(n Hkv D) bytes against
// O(n Hq D) flops), so the fp64 accumulators cost little beside the reads.
//
// Threads: heads are split over at most `threads` OpenMP threads (threads <= 0 means 1); each
// head's sums run in one fixed order, so the outputs are bit-identical for every thread count.
//
// Errors: dims and pointers come from code (the model's config and its cache): LONGSEQ_CHECK.
#include <cstdint>

#include "longseq/kernels/ref/decode_attention.hpp"

namespace longseq::kernels::cpu {

/// Same dims as the reference: n, hq, hkv, d (hq a multiple of hkv).
using DecodeDims = ref::DecodeDims;

/// o [Hq, D] = softmax(scale * q k^T + mask) v and lse [Hq] = logsumexp(scale * q k^T + mask)
/// (natural log), both overwritten; the mask is causal at qpos plus, with window > 0, the sliding
/// window (kernels/mask.hpp). A head that sees no key gets o = 0, lse = -inf: merging that partial
/// is a no-op. Blocking; uses at most `threads` threads; allocates O(n + D) per thread.
void decode_attention(const float* q, const float* k, const float* v, const int64_t* pos,
                      const DecodeDims& dims, int64_t qpos, int64_t window, double scale, float* o,
                      float* lse, int threads);

}  // namespace longseq::kernels::cpu
