#pragma once
// Attention masks as predicates over *global* token positions (design.md §3), so a block of
// queries and a block of keys can be masked correctly wherever the balance layout put them.
//
// Positions are int64 per token. A negative position marks a padding token: it sees no key and no
// query sees it (the distributed layer pads any sequence length this way; the user never pads).
#include <cstdint>

namespace longseq::kernels {

/// Which (query, key) pairs may attend. The fields combine with AND:
///   causal          k <= q
///   window > 0      k <= q and q - k < window   (sliding window is always causal)
///   docs            doc(q) == doc(k)            (packed documents; add `causal` for LM training)
///   block_mask      block_mask[(q / block_size) * num_blocks + k / block_size] != 0
/// Pointers are borrowed; the mask must outlive every call that uses it.
struct Mask {
  bool causal = false;
  int64_t window = 0;
  bool docs = false;
  const uint8_t* block_mask = nullptr;  ///< [num_blocks, num_blocks] row-major, 1 = visible
  int64_t block_size = 0;
  int64_t num_blocks = 0;

  bool is_full() const { return !causal && window <= 0 && !docs && block_mask == nullptr; }
};

/// Token metadata for one block of rows: global position and (when mask.docs) document id.
/// pos[i] < 0 marks padding. doc may be null when the mask has no documents.
struct Tokens {
  const int64_t* pos = nullptr;
  const int32_t* doc = nullptr;
};

/// The predicate itself; every kernel (ref, cpu, later cuda) must agree with it.
inline bool visible(const Mask& m, int64_t qp, int64_t kp, int32_t qd, int32_t kd) {
  if (qp < 0 || kp < 0) return false;
  if ((m.causal || m.window > 0) && kp > qp) return false;
  if (m.window > 0 && qp - kp >= m.window) return false;
  if (m.docs && qd != kd) return false;
  if (m.block_mask && !m.block_mask[(qp / m.block_size) * m.num_blocks + kp / m.block_size])
    return false;
  return true;
}

inline bool visible(const Mask& m, const Tokens& q, int64_t i, const Tokens& k, int64_t j) {
  return visible(m, q.pos[i], k.pos[j], q.doc ? q.doc[i] : 0, k.doc ? k.doc[j] : 0);
}

}  // namespace longseq::kernels
