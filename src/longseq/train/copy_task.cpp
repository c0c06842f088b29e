#include "longseq/train/copy_task.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <unordered_map>

#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/train/data.hpp"

namespace longseq::train {

namespace {

// The token files hold at most this many tokens here: the whole file is built in memory (4 bytes
// a token) before it is written.
constexpr int64_t kMaxTokens = int64_t{1} << 31;
// The stream of the examples' lengths (derive_seed's tag): apart from every example's own stream.
constexpr uint64_t kLengthStream = 0x6c656e67746873;  // "lengths"

int64_t first_half(int64_t length) {
  return (length + 1) / 2;
}

// Uniform in [0, n) from 64 random bits (multiply-high: a bias below n / 2^64, nil for n < 2^32).
uint64_t below(uint64_t bits, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

int64_t longest(const CopyTaskConfig& c) {
  return c.max_length > 0 ? c.max_length : c.length;
}

// Example i's length drawn from [lo, hi]: uniform, or log-uniform (exp of a uniform draw over
// [ln lo, ln(hi + 1)), floored, so that each length's chance is the log of its width).
int64_t draw_length(const CopyTaskConfig& c, int64_t i) {
  const int64_t lo = c.length, hi = longest(c);
  const uint64_t stream = core::derive_seed(c.seed, kLengthStream);
  const uint64_t ui = static_cast<uint64_t>(i);
  if (c.log_lengths) {
    const double a = std::log(static_cast<double>(lo)), b = std::log(static_cast<double>(hi + 1));
    const double l = std::floor(std::exp(a + (b - a) * core::uniform01(stream, ui)));
    return std::clamp(static_cast<int64_t>(l), lo, hi);
  }
  return lo + static_cast<int64_t>(
                  below(core::random_bits(stream, ui), static_cast<uint64_t>(hi - lo + 1)));
}

}  // namespace

void CopyTaskConfig::validate() const {
  core::require(length >= 2, "copy", "--length ", length, " must be >= 2 (a half and its repeat)");
  core::require(max_length == 0 || max_length >= length, "copy", "--max-length ", max_length,
                " must be 0 (one length) or >= --length ", length);
  core::require(!log_lengths || max_length > 0, "copy",
                "--log-lengths draws lengths from [--length, --max-length]: give --max-length");
  core::require(count >= 1, "copy", "--count ", count, " must be >= 1");
  // The end-of-text id is vocab, and a token file's header holds it as an int32.
  core::require(vocab >= 1 && vocab < INT32_MAX, "copy", "--vocab ", vocab, " must be in [1, ",
                INT32_MAX, ") (the file's vocabulary is vocab + 1, end of text = vocab)");
  core::require(prefix >= 0 && prefix <= length, "copy", "--prefix ", prefix, " must be in [0, ",
                "--length ", length, "] (0: whole examples)");
  core::require(prefix == 0 || (max_length == 0 && pack == 0), "copy", "--prefix ", prefix,
                " cuts examples of one length: not with --max-length ", max_length, " or --pack ",
                pack);
  // The last example of a packed sequence may be longer than max_length (copy_lengths): up to
  // length + max_length tokens, and less than the sequence.
  const int64_t most = pack > 0 ? std::min(pack - 1, length + longest(*this)) : longest(*this);
  core::require(!distinct || first_half(most) <= vocab, "copy", "--distinct: examples of up to ",
                most, " tokens have first halves of ", first_half(most), ", more ids than --vocab ",
                vocab, " without repeats");
  core::require(pack == 0 || pack >= length + 1, "copy", "--pack ", pack,
                " must hold one example of --length ", length,
                " and its end of text (>= ", length + 1, ")");
  const int64_t per = pack > 0 ? pack : (prefix > 0 ? prefix : longest(*this)) + (eot ? 1 : 0);
  core::require(count <= kMaxTokens / per, "copy", "--count ", count, " x ", per,
                " tokens is more than ", kMaxTokens, " tokens");
}

int64_t CopyTaskConfig::file_tokens() const {
  if (pack > 0) return count * pack;
  int64_t n = 0;
  for (int64_t l : copy_lengths(*this)) n += (prefix > 0 ? prefix : l) + (eot ? 1 : 0);
  return n;
}

std::vector<uint32_t> copy_example(const CopyTaskConfig& cfg, int64_t index, int64_t length) {
  const int64_t h = first_half(length);
  core::require(length >= 1 && cfg.vocab >= 1 && (!cfg.distinct || h <= cfg.vocab), "copy",
                "an example of ", length, " tokens", cfg.distinct ? " with --distinct" : "",
                " cannot be drawn from --vocab ", cfg.vocab);
  const uint64_t stream = core::derive_seed(cfg.seed, static_cast<uint64_t>(index));
  const uint64_t v = static_cast<uint64_t>(cfg.vocab);
  std::vector<uint32_t> out(static_cast<size_t>(length));
  if (cfg.distinct) {
    // A partial Fisher-Yates shuffle of [0, vocab) over a map of the displaced entries: O(h)
    // memory however large the vocabulary. Draw j depends on j alone, so a shorter example of the
    // same index starts with the same ids.
    std::unordered_map<uint64_t, uint64_t> moved;
    auto at = [&](uint64_t i) {
      const auto it = moved.find(i);
      return it == moved.end() ? i : it->second;
    };
    for (int64_t j = 0; j < h; ++j) {
      const uint64_t u = static_cast<uint64_t>(j);
      const uint64_t k = u + below(core::random_bits(stream, u), v - u);
      const uint64_t pick = at(k);
      moved[k] = at(u);
      out[static_cast<size_t>(j)] = static_cast<uint32_t>(pick);
    }
  } else {
    for (int64_t j = 0; j < h; ++j)
      out[static_cast<size_t>(j)] =
          static_cast<uint32_t>(below(core::random_bits(stream, static_cast<uint64_t>(j)), v));
  }
  for (int64_t t = h; t < length; ++t)
    out[static_cast<size_t>(t)] = out[static_cast<size_t>(t - h)];
  return out;
}

std::vector<int64_t> copy_lengths(const CopyTaskConfig& cfg) {
  std::vector<int64_t> lengths;
  if (cfg.pack == 0) {
    for (int64_t i = 0; i < cfg.count; ++i)
      lengths.push_back(cfg.max_length > 0 ? draw_length(cfg, i) : cfg.length);
    return lengths;
  }
  // Fill each sequence: an example that would leave less room than the shortest example and its
  // end of text takes the room itself, so every sequence ends with a whole example.
  for (int64_t s = 0; s < cfg.count; ++s) {
    int64_t room = cfg.pack;
    while (room > 0) {
      int64_t l = draw_length(cfg, static_cast<int64_t>(lengths.size()));
      if (room - (l + 1) < cfg.length + 1) l = room - 1;
      lengths.push_back(l);
      room -= l + 1;
    }
  }
  return lengths;
}

void write_copy_data(const std::string& path, const CopyTaskConfig& cfg) {
  cfg.validate();
  const uint32_t eot = static_cast<uint32_t>(cfg.vocab);
  const bool ends = cfg.eot || cfg.pack > 0;
  const std::vector<int64_t> lengths = copy_lengths(cfg);
  std::vector<uint32_t> tokens;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const std::vector<uint32_t> e = copy_example(cfg, static_cast<int64_t>(i), lengths[i]);
    tokens.insert(tokens.end(), e.begin(), e.begin() + (cfg.prefix > 0 ? cfg.prefix : lengths[i]));
    if (ends) tokens.push_back(eot);
  }
  write_token_file(path, tokens, cfg.vocab + 1, static_cast<int32_t>(eot));
}

}  // namespace longseq::train
