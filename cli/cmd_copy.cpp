// `longseq copy`: token files of the copy task (src/longseq/train/copy_task.hpp), to train and
// evaluate learning across ranks (docs/long-context.md), and prompts for `generate`.
#include <algorithm>
#include <cstdio>

#include "commands.hpp"
#include "longseq/train/copy_task.hpp"

namespace longseq::cli {

std::function<int()> add_copy(CLI::App& app) {
  auto c = std::make_shared<train::CopyTaskConfig>();
  auto out = std::make_shared<std::string>();
  app.add_option("--out", *out, "token file to write")->required();
  app.add_option("--length", c->length,
                 "tokens per example (the least with --max-length): ceil(L/2) random ids, then "
                 "their first floor(L/2) again");
  app.add_option("--max-length", c->max_length,
                 "each example's length uniform in [--length, this] (0: all --length)");
  app.add_flag("--log-lengths", c->log_lengths,
               "with --max-length: log-uniform lengths (each octave as likely)");
  app.add_option("--count", c->count, "examples (with --pack: packed sequences)");
  app.add_option("--vocab", c->vocab, "ids drawn from [0, V); the file's vocabulary is V + 1");
  app.add_option("--seed", c->seed, "example i is a function of (seed, i)");
  app.add_flag("--distinct", c->distinct,
               "first half without repeated ids (unambiguous copies at any length)");
  app.add_flag("--eot", c->eot,
               "end-of-text (id V) after each example: documents for train --doc-mask");
  app.add_option("--pack", c->pack,
                 "examples with ends of text fill sequences of exactly S tokens (train --seq S "
                 "--doc-mask)");
  app.add_option("--prefix", c->prefix,
                 "write only the first P tokens of each example (a generate prompt; 0: all)");
  return [c, out] {
    train::write_copy_data(*out, *c);
    const std::vector<int64_t> lengths = train::copy_lengths(*c);
    const auto [lo, hi] = std::minmax_element(lengths.begin(), lengths.end());
    std::printf("%s: %zu copy examples of %lld to %lld tokens, %lld tokens in all", out->c_str(),
                lengths.size(), static_cast<long long>(*lo), static_cast<long long>(*hi),
                static_cast<long long>(c->file_tokens()));
    if (c->pack > 0)
      std::printf(" (%lld sequences of %lld)", static_cast<long long>(c->count),
                  static_cast<long long>(c->pack));
    std::printf(", vocabulary %lld + end-of-text %lld%s\n", static_cast<long long>(c->vocab),
                static_cast<long long>(c->vocab),
                c->distinct ? ", first halves without repeats" : "");
    return 0;
  };
}

}  // namespace longseq::cli
