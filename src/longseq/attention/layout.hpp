#pragma once
// Balance layouts: which global token positions each rank holds (design.md §3).
//
//   contiguous     rank r holds [r*L, (r+1)*L)
//   zigzag         2P chunks of c tokens; rank i holds chunks i and 2P-1-i (balances causal work)
//   striped        token t lives on rank t mod P (balances causal work at token granularity)
//   block-striped  for block masks of B tokens: every block is cut into P runs of B/P tokens and
//                  rank r holds run r of every block, so any block pattern gives every rank the
//                  same work. B must be a multiple of P.
//
// Any sequence length works: the layout pads the sequence to `padded_len()` (a multiple of what
// the layout needs) with padding tokens whose position is -1; they see nothing and nobody sees
// them. Every rank holds exactly `local_len()` tokens, padding included.
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace longseq::attention {

enum class Balance { contiguous, zigzag, striped, block_striped };

/// "contiguous" | "zigzag" | "striped" | "block-striped"; throws core::Error naming `s` otherwise.
Balance parse_balance(std::string_view s);
std::string_view balance_name(Balance b);

/// A run of a rank's local tokens: local indices [local_begin, local_begin + len) hold padded
/// positions pos_begin + i * pos_stride. Padded positions >= global_len are padding.
struct Chunk {
  int64_t local_begin = 0;
  int64_t len = 0;
  int64_t pos_begin = 0;
  int64_t pos_stride = 1;
};

/// Value type; cheap queries, pure functions of (balance, n, world, block).
class Layout {
 public:
  /// `block` is the block-mask block size (block_striped only; ignored otherwise).
  /// Throws core::Error naming the values when world < 1, n < 1 or block does not suit.
  Layout(Balance balance, int64_t n, int world, int64_t block = 0);

  Balance balance() const { return balance_; }
  int world() const { return world_; }
  int64_t global_len() const { return n_; }
  int64_t padded_len() const { return padded_; }
  int64_t local_len() const { return padded_ / world_; }
  int64_t block() const { return block_; }

  /// The rank's tokens as runs, in local order.
  const std::vector<Chunk>& chunks(int rank) const { return chunks_[rank]; }
  /// Global position of local token i on `rank`, -1 for padding.
  int64_t position(int rank, int64_t i) const;
  /// All local positions of `rank` (-1 for padding).
  std::vector<int64_t> positions(int rank) const;
  /// The inverse: (rank, local index) holding padded position p (0 <= p < padded_len()).
  std::pair<int, int64_t> locate(int64_t p) const;

  /// Copies the rank's rows out of a global [n, row] array (row = elements per token) into
  /// local [local_len, row]; padding rows are zero.
  template <class T>
  void shard(const T* global, int64_t row, int rank, T* local) const;
  /// Writes the rank's non-padding rows of local [local_len, row] into global [n, row].
  template <class T>
  void unshard(const T* local, int64_t row, int rank, T* global) const;
  /// shard() and unshard() for rows of any element type, `outer` times over: global [outer, n,
  /// row_bytes] <-> local [outer, local_len, row_bytes] (the sequence dimension of a tensor in
  /// the middle, e.g. [B, N, H, D] with outer = B and row_bytes = H * D * element size). Runs of
  /// consecutive positions move as one copy. Padding rows of `local` are zero after shard_bytes.
  void shard_bytes(const void* global, int64_t outer, int64_t row_bytes, int rank,
                   void* local) const;
  void unshard_bytes(const void* local, int64_t outer, int64_t row_bytes, int rank,
                     void* global) const;

 private:
  Balance balance_;
  int64_t n_;
  int world_;
  int64_t block_;
  int64_t padded_;
  std::vector<std::vector<Chunk>> chunks_;
};

// The typed forms are the byte forms over one outer index: every T they move (float, bf16, ids)
// is copied by its bytes, and a zero-byte row is T{}.
template <class T>
void Layout::shard(const T* global, int64_t row, int rank, T* local) const {
  static_assert(std::is_trivially_copyable_v<T>);
  shard_bytes(global, 1, row * static_cast<int64_t>(sizeof(T)), rank, local);
}

template <class T>
void Layout::unshard(const T* local, int64_t row, int rank, T* global) const {
  static_assert(std::is_trivially_copyable_v<T>);
  unshard_bytes(local, 1, row * static_cast<int64_t>(sizeof(T)), rank, global);
}

}  // namespace longseq::attention
