// `longseq train`: the training loop of src/longseq/train/trainer.hpp behind a preset plus
// overrides. The flags are the rows of train/config.hpp's table (add a flag there, not here);
// every flag's default is the preset's value; --help shows the "main" preset's
// (tests/train/cli_train_test.cpp checks that --help lists every row with it).
#include <csignal>
#include <cstdio>
#include <optional>
#include <string>

#include "commands.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/trainer.hpp"
#include "table_flags.hpp"

namespace longseq::cli {

namespace {

// The "main" preset, whose values --help shows; a missing data directory leaves the help
// without defaults rather than failing every command.
std::optional<train::TrainConfig> main_preset() {
  try {
    return train::preset("main");
  } catch (const core::Error&) {
    return std::nullopt;
  }
}

}  // namespace

std::function<int()> add_train(CLI::App& app) {
  auto preset = std::make_shared<std::string>("main");
  std::string names;
  for (const auto& n : train::preset_names()) names += (names.empty() ? "" : " | ") + n;
  app.add_option("--preset", *preset,
                 names +
                     " | FILE.json (keys of metrics.json's config); the defaults below are the "
                     "main preset's, another preset's keys replace them");
  const std::optional<train::TrainConfig> m = main_preset();
  auto flags = TableFlags::add(app, train::train_fields(), m ? &*m : nullptr);
  return [preset, flags] {
    train::TrainConfig c = train::preset(*preset);
    if (flags->given("init_from")) {
      // The model comes from the directory's config.json; explicit model flags still apply and
      // are then checked against it (TrainConfig::parse names a difference).
      train::TrainConfig given = c;
      flags->apply(train::train_fields(), given);
      c.model = train::read_hf_config(given.init_from);
    }
    flags->apply(train::train_fields(), c);
    c.validate();  // a bad value is refused before the banner prints it ("world 0 (dp 1 x cp 0)")
    const bool banner = !c.quiet && comm::launcher_rank() == 0;  // once under mpirun
    if (banner)
      std::printf(
          "longseq train: preset %s, %s\n  %lld steps, seq %lld, world %d (dp %d x cp %d), "
          "algo %s, balance %s, checkpoint %s, loss %s, %s, ZeRO-3 over %d ranks\n",
          c.preset.c_str(), c.model.describe().c_str(), static_cast<long long>(c.steps),
          static_cast<long long>(c.seq), c.world, c.dp, c.cp(), c.algo.c_str(), c.balance.c_str(),
          c.checkpoint.c_str(), c.loss.c_str(), c.precision.c_str(), c.world);
    c.abort_on_failure = true;
    const train::TrainSummary s = train::train(c);
    if (banner && !s.steps.empty())
      std::printf("loss %.4f -> %.4f over steps %lld..%lld; peak %.1f GFLOP/s measured%s\n",
                  s.steps.front().loss, s.steps.back().loss,
                  static_cast<long long>(s.steps.front().step),
                  static_cast<long long>(s.steps.back().step), s.peak_gflops,
                  c.out.empty() ? "" : ("; wrote " + c.out + "/metrics.json").c_str());
    if (s.stop_signal != 0) {
      // The shell's convention for a process ended by a signal (docs/reliability.md).
      if (comm::launcher_rank() == 0)
        std::fprintf(stderr, "[train] stopped by %s after a whole step%s\n",
                     s.stop_signal == SIGINT ? "SIGINT" : "SIGTERM",
                     c.out.empty() || c.save_every < 0 ? "" : "; checkpoint saved");
      return 128 + s.stop_signal;
    }
    return 0;
  };
}

}  // namespace longseq::cli
