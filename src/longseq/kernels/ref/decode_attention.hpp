#pragma once
// The specification of decode attention, in fp64 with plain loops: one new query row against a
// rank's shard of the KV cache (model/inference.hpp). kernels/cpu/decode_attention.hpp is tested
// against it (tests/kernels/decode_attention_test.cpp).
//
// Legend: n cached tokens, Hq query heads, Hkv key/value heads (Hq = g * Hkv, query head h uses kv
// head h / g), D head dim. Layouts, row-major: q [Hq, D], k and v [n, Hkv, D], pos [n] (global
// positions, in any order: a shard holds every P-th token), o [Hq, D], lse [Hq].
//
// Mask: causal plus an optional sliding window, the predicate of kernels/mask.hpp (a key at
// position p is visible from qpos when p <= qpos and, with window > 0, qpos - p < window; pos < 0
// is padding and never visible). It is the one-query-row case of attention_forward
// (ref/attention.hpp), written out so the decode path has a twin of its own shape.
//
// Errors: core::Error("[kernels.ref] ...") naming the values when n < 0, Hq, Hkv or D is not
// positive, Hkv does not divide Hq, or positions are null for n > 0.
#include <cstdint>

namespace longseq::kernels::ref {

struct DecodeDims {
  int64_t n = 0, hq = 0, hkv = 0, d = 0;
};

/// o = softmax(scale * q k^T + mask) v per query head; lse = the natural-log logsumexp of the
/// masked scaled scores. A head that sees no key (n = 0, or every key masked) gets o = 0 and
/// lse = -inf, never NaN.
void decode_attention(const double* q, const double* k, const double* v, const int64_t* pos,
                      const DecodeDims& dims, int64_t qpos, int64_t window, double scale, double* o,
                      double* lse);

}  // namespace longseq::kernels::ref
