// `longseq eval`: a checkpoint's loss and perplexity over sequences of a token file, overall and
// by position, with the distributed engine (src/longseq/train/eval.hpp).
#include <cstdio>

#include "commands.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/train/eval.hpp"
#include "table_flags.hpp"

namespace longseq::cli {

std::function<int()> add_eval(CLI::App& app) {
  auto c = std::make_shared<train::EvalConfig>();
  add_checkpoint_dir(app, c->checkpoint, "eval");
  app.add_option("--data", c->data, "token file, or .txt tokenized byte-level")->required();
  app.add_option("--seq", c->seq, "tokens per sequence (N)")->required();
  add_world_row(app, c->world);
  add_row(app, core::rows::algo, c->algo);
  add_row(app, core::rows::balance, c->balance);
  add_row(app, core::rows::mask, c->mask);
  app.add_option("--sequences", c->sequences,
                 "evaluate the first K sequences of the file (0: all)");
  app.add_option("--buckets", c->buckets, "position buckets of the loss curve (at most N - 1)");
  add_row(app, core::rows::threads, c->threads);
  add_row(app, core::rows::precision, c->precision);
  add_row(app, core::rows::device, c->device);
  app.add_option("--out", c->out, "directory: eval.json and loss_by_position.svg")->required();
  return [c] {
    core::require(!c->checkpoint.empty(), "eval", "--checkpoint-dir is required");
    const train::EvalResult r = train::evaluate(*c);
    if (comm::launcher_rank() == 0) {
      std::printf(
          "eval: %lld sequences x %lld tokens, world %d, %s, %s: loss %.4f, perplexity %.3f "
          "(%lld labelled tokens, %.1f s)\n",
          static_cast<long long>(r.sequences), static_cast<long long>(c->seq), c->world,
          c->algo.c_str(), c->balance.c_str(), r.loss, r.perplexity,
          static_cast<long long>(r.tokens), r.seconds);
      for (const auto& b : r.positions)
        std::printf("  positions [%7lld, %7lld)  loss %.4f\n", static_cast<long long>(b.start),
                    static_cast<long long>(b.end), b.loss);
      std::printf("wrote %s/eval.json and %s/loss_by_position.svg\n", c->out.c_str(),
                  c->out.c_str());
    }
    return 0;
  };
}

}  // namespace longseq::cli
