#include "longseq/attention/layout.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>

#include "longseq/core/error.hpp"

namespace longseq::attention {

using core::fail;
using core::require;

Balance parse_balance(std::string_view s) {
  if (s == "contiguous") return Balance::contiguous;
  if (s == "zigzag") return Balance::zigzag;
  if (s == "striped") return Balance::striped;
  if (s == "block-striped") return Balance::block_striped;
  fail("attention", "unknown balance '", s,
       "' (expected contiguous, zigzag, striped or block-striped)");
}

std::string_view balance_name(Balance b) {
  switch (b) {
    case Balance::contiguous:
      return "contiguous";
    case Balance::zigzag:
      return "zigzag";
    case Balance::striped:
      return "striped";
    case Balance::block_striped:
      return "block-striped";
  }
  return "?";
}

// Refuses (user input) a length whose padded size does not fit in int64 instead of overflowing.
static int64_t round_up(int64_t x, int64_t m) {
  require(x <= std::numeric_limits<int64_t>::max() - m, "attention", "sequence length ", x,
          " is too large to pad to a multiple of ", m);
  return (x + m - 1) / m * m;
}

Layout::Layout(Balance balance, int64_t n, int world, int64_t block)
    : balance_(balance), n_(n), world_(world), block_(block) {
  require(world >= 1, "attention", "world must be >= 1, got ", world);
  require(n >= 1, "attention", "sequence length must be >= 1, got ", n);
  const int64_t p = world;
  chunks_.resize(world);
  switch (balance) {
    case Balance::contiguous: {
      padded_ = round_up(n, p);
      const int64_t l = padded_ / p;
      for (int r = 0; r < world; ++r) chunks_[r] = {Chunk{0, l, r * l, 1}};
      break;
    }
    case Balance::zigzag: {
      padded_ = round_up(n, 2 * p);
      const int64_t c = padded_ / (2 * p);
      for (int r = 0; r < world; ++r)
        chunks_[r] = {Chunk{0, c, r * c, 1}, Chunk{c, c, (2 * p - 1 - r) * c, 1}};
      break;
    }
    case Balance::striped: {
      padded_ = round_up(n, p);
      const int64_t l = padded_ / p;
      for (int r = 0; r < world; ++r) chunks_[r] = {Chunk{0, l, r, p}};
      break;
    }
    case Balance::block_striped: {
      require(block > 0, "attention",
              "block-striped balance needs the block mask's block size, got ", block);
      require(block % p == 0, "attention", "block-striped balance needs the block size ", block,
              " to be a multiple of world ", world);
      padded_ = round_up(n, block);
      const int64_t run = block / p, blocks = padded_ / block;
      for (int r = 0; r < world; ++r)
        for (int64_t b = 0; b < blocks; ++b)
          chunks_[r].push_back(Chunk{b * run, run, b * block + r * run, 1});
      break;
    }
  }
}

int64_t Layout::position(int rank, int64_t i) const {
  for (const Chunk& c : chunks_[rank])
    if (i >= c.local_begin && i < c.local_begin + c.len) {
      const int64_t p = c.pos_begin + (i - c.local_begin) * c.pos_stride;
      return p < n_ ? p : -1;
    }
  LONGSEQ_CHECK_MSG(false, "local index ", i, " outside rank ", rank, " of length ", local_len());
  return -1;
}

std::vector<int64_t> Layout::positions(int rank) const {
  std::vector<int64_t> out(local_len());
  for (const Chunk& c : chunks_[rank])
    for (int64_t i = 0; i < c.len; ++i) {
      const int64_t p = c.pos_begin + i * c.pos_stride;
      out[c.local_begin + i] = p < n_ ? p : -1;
    }
  return out;
}

std::pair<int, int64_t> Layout::locate(int64_t p) const {
  LONGSEQ_CHECK_MSG(p >= 0 && p < padded_, "position ", p, " outside padded length ", padded_);
  const int64_t p_world = world_;
  switch (balance_) {
    case Balance::contiguous: {
      const int64_t l = local_len();
      return {static_cast<int>(p / l), p % l};
    }
    case Balance::zigzag: {
      const int64_t c = padded_ / (2 * p_world), chunk = p / c;
      if (chunk < p_world) return {static_cast<int>(chunk), p % c};
      return {static_cast<int>(2 * p_world - 1 - chunk), c + p % c};
    }
    case Balance::striped:
      return {static_cast<int>(p % p_world), p / p_world};
    case Balance::block_striped: {
      const int64_t run = block_ / p_world, b = p / block_, in = p % block_;
      return {static_cast<int>(in / run), b * run + in % run};
    }
  }
  return {0, 0};
}

namespace {

// Calls fn(local row, global position, rows) for every run of consecutive positions of `rank`'s
// chunks (the whole chunk when its stride is 1; else one row at a time), padding included.
template <class F>
void for_each_run(const std::vector<Chunk>& chunks, F&& fn) {
  for (const Chunk& c : chunks) {
    if (c.pos_stride == 1) {
      fn(c.local_begin, c.pos_begin, c.len);
    } else {
      for (int64_t i = 0; i < c.len; ++i) fn(c.local_begin + i, c.pos_begin + i * c.pos_stride, 1);
    }
  }
}

}  // namespace

void Layout::shard_bytes(const void* global, int64_t outer, int64_t row_bytes, int rank,
                         void* local) const {
  const auto* g = static_cast<const std::byte*>(global);
  auto* l = static_cast<std::byte*>(local);
  const int64_t ll = local_len();
  for (int64_t b = 0; b < outer; ++b)
    for_each_run(chunks(rank), [&](int64_t li, int64_t p, int64_t len) {
      std::byte* dst = l + (b * ll + li) * row_bytes;
      const int64_t real = std::clamp<int64_t>(n_ - p, 0, len);  // rows before the padding
      if (real > 0) std::memcpy(dst, g + (b * n_ + p) * row_bytes, real * row_bytes);
      if (real < len) std::memset(dst + real * row_bytes, 0, (len - real) * row_bytes);
    });
}

void Layout::unshard_bytes(const void* local, int64_t outer, int64_t row_bytes, int rank,
                           void* global) const {
  const auto* l = static_cast<const std::byte*>(local);
  auto* g = static_cast<std::byte*>(global);
  const int64_t ll = local_len();
  for (int64_t b = 0; b < outer; ++b)
    for_each_run(chunks(rank), [&](int64_t li, int64_t p, int64_t len) {
      const int64_t real = std::clamp<int64_t>(n_ - p, 0, len);
      if (real > 0)
        std::memcpy(g + (b * n_ + p) * row_bytes, l + (b * ll + li) * row_bytes, real * row_bytes);
    });
}

}  // namespace longseq::attention
