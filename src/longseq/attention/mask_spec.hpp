#pragma once
// The user's mask over the whole sequence, and its chunk-level classification.
//
// A MaskSpec owns its document ids and block mask (the kernels borrow them through
// kernels::Mask). Chunk pairs are classified from position and document-id ranges:
//   empty    no (q, k) pair of the two chunks is visible: no compute and, when a whole step is
//            empty, no transfer
//   full     every pair is visible: the kernel may skip per-element masking
//   partial  anything else (the kernel evaluates the predicate per tile / element)
// Classification is conservative: "empty" and "full" are only claimed when certain.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "longseq/attention/layout.hpp"
#include "longseq/kernels/mask.hpp"

namespace longseq::attention {

struct MaskSpec {
  bool causal = false;
  int64_t window = 0;               ///< > 0: sliding window, k <= q and q - k < window
  std::vector<int32_t> doc_ids;     ///< [n] when non-empty: a token sees only its own document
  std::vector<uint8_t> block_mask;  ///< [num_blocks, num_blocks] when non-empty, 1 = visible
  int64_t block_size = 0;
  int64_t num_blocks = 0;

  /// Parses the CLI form: comma-separated terms, each one of full | causal | window:W |
  /// document:FILE (int32 .npy [n]; implies causal) | blocks:FILE:B (uint8 .npy
  /// [ceil(n/B), ceil(n/B)]). `causal` adds causality (e.g. to a block mask). `n` is the sequence
  /// length the files must match. Throws core::Error naming the term and the values.
  static MaskSpec parse(std::string_view text, bool causal, int64_t n);

  /// Document ids of n tokens from the offsets of packed sequences (flash-attn's cu_seqlens:
  /// document i holds tokens [offsets[i], offsets[i + 1])): ids 0, 1, ... in order. Throws
  /// core::Error naming the values unless offsets start at 0, never decrease and end at n.
  static std::vector<int32_t> documents_from_offsets(std::span<const int64_t> offsets, int64_t n);

  /// Checks sizes against sequence length n; throws core::Error naming the values.
  void validate(int64_t n) const;
  /// The borrowed kernel view (valid while this MaskSpec lives and is not modified).
  kernels::Mask kernel_mask() const;
  /// "causal+window:512+document(3 docs)+blocks:64" style description.
  std::string describe() const;
};

enum class PairKind : uint8_t { empty, partial, full };
std::string_view pair_kind_name(PairKind k);

/// What classification needs of one chunk.
struct ChunkInfo {
  bool any_valid = false;    ///< holds at least one non-padding token
  bool has_padding = false;  ///< holds at least one padding token
  int64_t pmin = 0, pmax = -1;
  int32_t dmin = 0, dmax = 0;
};

/// The chunk's position and document-id ranges: closed form without documents, one pass over its
/// valid tokens with them.
ChunkInfo chunk_info(const Chunk& c, int64_t n, const MaskSpec& m);
PairKind classify(const MaskSpec& m, const ChunkInfo& q, const ChunkInfo& k);

/// Visible (query, key) pairs of `m` over n tokens: exactly the number of (q, k) in [0, n)^2 for
/// which kernels::visible holds. Closed form per rectangle of positions: O(1) for full, causal and
/// window masks; O(documents) for document ids (O(runs + run pairs within the window) when ids
/// repeat or a window is set); with a block mask, one pass over the block rows' bytes inside the
/// causal / window band plus O(1) per visible block (O(runs of the block) with documents). So it
/// runs at any n, past 2^31 included, where the count is < 2^64.
uint64_t count_visible(const MaskSpec& m, int64_t n);

/// The non-empty classification of every (q chunk, k chunk) pair of a layout, precomputed once
/// per (layout, mask) since schedules query it P^2 times. Memory and time are linear in the
/// non-empty pairs: the block-striped layout under its block mask (every chunk inside one mask
/// block) visits only the visible blocks of each block row inside the causal / window band; other
/// layouts hold at most two chunks per rank and classify every pair. Classifications equal
/// classify(chunk_info(q), chunk_info(k)) for every pair.
class PairTable {
 public:
  struct Entry {
    int32_t k_rank = 0, kc = 0;
    PairKind kind = PairKind::empty;
  };
  PairTable(const Layout& layout, const MaskSpec& mask);
  PairKind kind(int q_rank, int qc, int k_rank, int kc) const;
  /// The non-empty pairs of query chunk (q_rank, qc) with the chunks of k_rank, kc ascending.
  std::span<const Entry> row(int q_rank, int qc, int k_rank) const;
  /// row(q_rank, qc, k_rank), searched from `hint` (an index into chunk_row(q_rank, qc), any value)
  /// outwards instead of over the whole row, and `hint` set to where the result begins: a caller
  /// that asks for nearby key ranks in turn (the next bundle of a ring, or the same key rank in
  /// the next query rank's row) pays O(log distance) instead of O(log row).
  std::span<const Entry> row_near(int q_rank, int qc, int k_rank, size_t& hint) const;
  /// One pair of the key-rank-major view: query chunk (q_rank, qc) with key chunk kc.
  struct ColumnEntry {
    int32_t q_rank = 0, qc = 0, kc = 0;
    PairKind kind = PairKind::empty;
  };
  /// The same pairs as row(q_rank, qc, k_rank) (kc ascending), read from the column of k_rank
  /// (all its non-empty pairs by (q_rank, qc, kc)) from `hint` outwards as row_near does: for a
  /// caller that holds the key rank and moves the query rank (a burst backward's bundles).
  std::span<const ColumnEntry> column_near(int k_rank, int q_rank, int qc, size_t& hint) const;
  /// The non-empty pairs of query chunk (q_rank, qc) with every key chunk, by (k_rank, kc).
  std::span<const Entry> chunk_row(int q_rank, int qc) const;
  /// True when some chunk pair of (q_rank, k_rank) is not empty.
  bool needs(int q_rank, int k_rank) const { return any_[q_rank * world_ + k_rank] != 0; }
  int chunks_per_rank() const { return chunks_; }
  /// Non-empty chunk pairs held.
  size_t size() const { return entries_.size(); }

 private:
  int world_, chunks_;
  std::vector<int64_t> offsets_;      // [q_rank * chunks + qc] -> first entry; one more at the end
  std::vector<Entry> entries_;        // per query chunk, by (k_rank, kc)
  std::vector<int64_t> col_offsets_;  // [k_rank] -> first column entry; one more at the end
  std::vector<ColumnEntry> columns_;  // per key rank, by (q_rank, qc, kc)
  std::vector<uint8_t> any_;          // [q_rank][k_rank]
};

}  // namespace longseq::attention
