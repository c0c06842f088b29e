#pragma once
// The copy task: a random first half, then the same half again. A model can predict the second
// half only by finding, for the token it reads, the earlier occurrence and copying what followed
// it (an induction head: a previous-token head feeding a matching head). Every second-half token's
// source is half an example back, so in an example as long as the sequence it sits on another rank
// under the contiguous and zigzag layouts: the second half's loss falls only if attention really
// carries information across the cut (docs/long-context.md "Learning across ranks").
//
// One example of L tokens: h = ceil(L / 2) ids drawn uniformly from [0, vocab), then their first
// L - h again, so token t equals token t - h for t >= h (an odd L repeats all but the last of the
// first half). With `distinct` the h ids are drawn without replacement (h <= vocab), so each
// second-half token occurs exactly once before: matching one token is never ambiguous, whatever
// the length (with replacement each id recurs about h / vocab times, and a head that matches one
// token cannot tell the occurrences apart).
//
// Lengths vary with `max_length` (each example's L uniform in [length, max_length], or with
// `log_lengths` log-uniform: each octave of lengths as likely): with one length the source is
// always the same distance back, and a model learns that distance (a positional head) instead of
// matching content, which fails at any other length.
//
// File (train/data.hpp token file): vocabulary vocab + 1, end of text = vocab. Examples follow each
// other; with `eot` each is followed by one end-of-text (a document: train --doc-mask keeps the
// examples packed into one sequence apart, which is how longseq trains on a batch). With `pack` S
// the examples (each with its end of text) fill sequences of exactly S tokens: train --seq S then
// reads whole examples only; the last example of each sequence takes the room the others leave
// (length .. max_length + length tokens).
#include <cstdint>
#include <string>
#include <vector>

namespace longseq::train {

struct CopyTaskConfig {
  int64_t length = 256;      ///< tokens per example (>= 2), end of text not counted; the least
  int64_t max_length = 0;    ///< > 0: each example's length uniform in [length, max_length]
  bool log_lengths = false;  ///< with max_length: log-uniform lengths instead
  int64_t count = 1000;      ///< examples; with `pack`, packed sequences
  int64_t vocab = 256;    ///< ids drawn from [0, vocab), vocab < 2^31 - 1; the file has vocab + 1
  uint64_t seed = 1;      ///< example i is a function of (seed, i, its length) alone
  bool distinct = false;  ///< first halves without repeated ids (ceil(max length / 2) <= vocab)
  bool eot = false;       ///< an end-of-text (id vocab) after each example
  int64_t pack = 0;       ///< > 0: examples with ends of text fill sequences of this many tokens
  /// Keep only the first `prefix` tokens of each example (0: all of it): prompts for `generate`,
  /// whose continuation is the rest of the example. One length only, not with `pack`.
  int64_t prefix = 0;
  /// Throws core::Error("[copy] ...") naming the offending values.
  void validate() const;
  /// Tokens the file holds.
  int64_t file_tokens() const;
};

/// Example `index` of the task at `length` tokens. Pure function of (cfg.seed, index, length,
/// cfg.vocab, cfg.distinct); a shorter example of the same index starts with the same ids. Throws
/// core::Error("[copy] ...") when the ids cannot be drawn (no vocabulary, or a distinct first half
/// longer than it).
std::vector<uint32_t> copy_example(const CopyTaskConfig& cfg, int64_t index, int64_t length);

/// The lengths of the file's examples in order: `count` of them, or with `pack` as many as fill
/// `count` sequences. Example i's length is drawn from its own counter, so it does not depend on
/// `count`.
std::vector<int64_t> copy_lengths(const CopyTaskConfig& cfg);

/// The file: example i at copy_lengths()[i] tokens (cut to the prefix), then end of text with
/// `eot` or `pack`, as a token file at `path`, written atomically. Validates `cfg` first.
void write_copy_data(const std::string& path, const CopyTaskConfig& cfg);

}  // namespace longseq::train
