// `longseq passkey`: passkey retrieval over lengths x depths (src/longseq/train/passkey.hpp), or
// with --make-data, a token file of passkey examples to train on.
#include <cstdio>

#include "commands.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/train/passkey.hpp"
#include "table_flags.hpp"

namespace longseq::cli {

namespace {
struct PasskeyArgs {
  train::PasskeyConfig cfg;
  std::string make_data;
  int64_t length = 256, count = 2000;
};
}  // namespace

std::function<int()> add_passkey(CLI::App& app) {
  auto a = std::make_shared<PasskeyArgs>();
  add_checkpoint_dir(app, a->cfg.checkpoint, "passkey");
  app.add_option("--lengths", a->cfg.lengths, "context lengths in tokens (bytes)")->delimiter(',');
  app.add_option("--depths", a->cfg.depths, "depths of the key, fractions in [0, 1]")
      ->delimiter(',');
  app.add_option("--trials", a->cfg.trials, "keys per (length, depth) cell");
  app.add_option("--digits", a->cfg.digits, "digits of the key");
  app.add_option("--seed", a->cfg.seed, "seed of the keys (and of --make-data)");
  add_world_row(app, a->cfg.world);  // the prefill's ranks; the KV cache's shards
  add_row(app, core::rows::algo, a->cfg.algo);
  add_row(app, core::rows::balance, a->cfg.balance);
  add_row(app, core::rows::threads, a->cfg.threads);
  add_row(app, core::rows::device, a->cfg.device);  // generate()'s
  app.add_option("--out", a->cfg.out, "directory: passkey.json and the heat map passkey.svg");
  app.add_option("--make-data", a->make_data,
                 "instead: write a token file of passkey examples to train on");
  app.add_option("--length", a->length, "--make-data: tokens per example");
  app.add_option("--count", a->count, "--make-data: examples");
  return [a] {
    if (!a->make_data.empty()) {
      train::write_passkey_data(a->make_data, a->length, a->count, a->cfg.seed, a->cfg.digits);
      std::printf("wrote %s: %lld passkey examples of %lld tokens (+ answer)\n",
                  a->make_data.c_str(), static_cast<long long>(a->count),
                  static_cast<long long>(a->length));
      return 0;
    }
    core::require(!a->cfg.checkpoint.empty(), "passkey",
                  "--checkpoint-dir is required (or --make-data FILE)");
    const train::PasskeyResult r = train::run_passkey(a->cfg);
    if (comm::launcher_rank() != 0) return 0;
    double digits = 0;
    for (double d : r.digit_accuracy) digits += d / static_cast<double>(r.digit_accuracy.size());
    std::printf(
        "passkey retrieval: accuracy %.3f (digits in place %.3f) over %zu lengths x %zu depths x "
        "%lld keys\n",
        r.overall, digits, r.lengths.size(), r.depths.size(),
        static_cast<long long>(a->cfg.trials));
    for (size_t i = 0; i < r.lengths.size(); ++i) {
      std::printf("  length %6lld:", static_cast<long long>(r.lengths[i]));
      for (size_t j = 0; j < r.depths.size(); ++j)
        std::printf("  %.2f", r.accuracy[i * r.depths.size() + j]);
      std::printf("\n");
    }
    if (!a->cfg.out.empty())
      std::printf("wrote %s/passkey.json, passkey.svg and passkey_digits.svg\n",
                  a->cfg.out.c_str());
    return 0;
  };
}

}  // namespace longseq::cli
