// "Adding a training flag touches one declaration" (issue 15), proved over the table itself
// (train/config.hpp): whatever rows it holds, each one
//   1. has a CLI flag spelled after its key (--kv-heads for kv_heads) that reaches the field:
//      every flag given at once on a command line (cli/table_flags.hpp, what `longseq train`
//      declares) sets every field to the value given;
//   2. round-trips through JSON (config_test.cpp EveryJsonFieldRoundTrips) and is checked: a value
//      just outside a row's range is refused by TrainConfig::validate() with a message naming the
//      flag and the value; a string row's parser refuses a bogus value naming it;
//   3. is listed by `longseq train --help` with the main preset's value as its default
//      (cli_train_test.cpp HelpListsEveryRowWithTheMainPresetsValue).
// The same for hardware profiles: hardware_table_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../cli/table_flags.hpp"
#include "longseq/train/config.hpp"
#include "train_test_util.hpp"

namespace {

namespace tr = longseq::train;
namespace core = longseq::core;
using longseq::testing::error_of;

std::string kebab(std::string key) {
  for (char& ch : key)
    if (ch == '_') ch = '-';
  return "--" + key;
}

TEST(TrainConfigFlags, EveryCliRowIsItsKeyInKebabCase) {
  for (const auto& f : tr::train_fields()) {
    if (!f.in_cli()) {
      EXPECT_STREQ(f.flag, "") << f.key << " is JSON-only but names a flag";
      continue;
    }
    EXPECT_EQ(std::string(f.flag), kebab(f.key)) << f.key;
    EXPECT_GT(std::string(f.help).size(), 3u) << f.key << " has no help line";
  }
}

TEST(TrainConfigFlags, EveryFlagGivenReachesItsField) {
  const tr::TrainConfig main = tr::preset("main");
  tr::TrainConfig want = main;
  std::vector<std::string> args = {"train"};
  for (const auto& f : tr::train_fields()) {
    if (!f.in_cli()) continue;
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>) {
            ASSERT_FALSE(*p) << f.key << ": a flag only sets true, main must hold false";
            *p = true;
            args.push_back(f.flag);
            return;
          } else if constexpr (std::is_same_v<T, std::string>) {
            *p = "v" + *p;
          } else if constexpr (std::is_same_v<T, double>) {
            *p = *p == 2.5 ? 3.5 : 2.5;  // exact in text
          } else {
            *p = static_cast<T>(*p + 3);
          }
          args.push_back(f.flag);
          args.push_back(core::field_text(f.get(want)));
        },
        f.get(want));
  }
  CLI::App app;
  auto* sub = app.add_subcommand("train");
  auto flags = longseq::cli::TableFlags::add(*sub, tr::train_fields(), &main);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  ASSERT_NO_THROW(app.parse(std::move(reversed)));  // CLI11 takes the arguments reversed
  tr::TrainConfig got = main;
  flags->apply(tr::train_fields(), got);
  for (const auto& f : tr::train_fields()) {
    if (!f.in_cli()) continue;
    EXPECT_TRUE(flags->given(f.key)) << f.flag;
    EXPECT_EQ(core::field_json(f.get(got)), core::field_json(f.get(want))) << f.flag;
    EXPECT_NE(core::field_json(f.get(got)), core::field_json(f.get(main))) << f.flag;
  }
  // A flag not given leaves the preset's value: no default of the CLI's own.
  CLI::App bare;
  auto* bsub = bare.add_subcommand("train");
  auto none = longseq::cli::TableFlags::add(*bsub, tr::train_fields(), &main);
  bare.parse(std::vector<std::string>{"train"});
  tr::TrainConfig tiny = tr::preset("tiny");
  none->apply(tr::train_fields(), tiny);
  EXPECT_EQ(tiny.to_json(), tr::preset("tiny").to_json());
  // A boolean row also has --no-FLAG, which turns a preset's true off.
  for (const auto& f : tr::train_fields()) {
    if (!f.in_cli() || !std::holds_alternative<bool*>(f.get(tiny))) continue;
    const std::string no = "--no-" + std::string(f.flag + 2);
    for (const auto& [line, want] : {std::pair{std::vector<std::string>{no}, false},
                                     std::pair{std::vector<std::string>{f.flag}, true}}) {
      CLI::App a;
      auto* s = a.add_subcommand("train");
      auto fl = longseq::cli::TableFlags::add(*s, tr::train_fields(), &main);
      std::vector<std::string> argv = {"train"};
      argv.insert(argv.end(), line.begin(), line.end());
      a.parse(std::vector<std::string>(argv.rbegin(), argv.rend()));
      tr::TrainConfig c = tiny;
      *std::get<bool*>(f.get(c)) = !want;
      fl->apply(tr::train_fields(), c);
      EXPECT_EQ(*std::get<bool*>(f.get(c)), want) << line[0];
    }
  }
}

// Every row's range check, at the value just outside it, through TrainConfig::validate().
TEST(TrainConfigFlags, EveryRangeIsEnforcedNamingTheFlagAndValue) {
  int checked = 0;
  for (const auto& f : tr::train_fields()) {
    const core::Check& k = f.check;
    std::vector<double> bad;
    if (std::isfinite(k.lo)) bad.push_back(k.lo_open ? k.lo : k.lo - 1);
    if (std::isfinite(k.hi)) bad.push_back(k.hi_open ? k.hi : 2 * k.hi);
    for (double v : bad) {
      tr::TrainConfig c = tr::preset("tiny");
      bool settable = true;
      std::visit(
          [&](auto* p) {
            using T = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string>)
              settable = false;
            else if constexpr (std::is_unsigned_v<T>)
              settable = v >= 0 ? (*p = static_cast<T>(v), true) : false;
            else
              *p = static_cast<T>(v);
          },
          f.get(c));
      if (!settable) continue;
      const std::string msg = error_of([&] { c.validate(); });
      const std::string want =
          std::string("[train] ") + f.name() + " " + core::field_text(f.get(c)) + " must be";
      EXPECT_NE(msg.find(want), std::string::npos) << f.key << " = " << v << ": " << msg;
      ++checked;
    }
    if (k.parse) {
      tr::TrainConfig c = tr::preset("tiny");
      *std::get<std::string*>(f.get(c)) = "bogus-value";
      const std::string msg = error_of([&] { c.validate(); });
      EXPECT_NE(msg.find("bogus-value"), std::string::npos) << f.key << ": " << msg;
      ++checked;
    }
  }
  EXPECT_GE(checked, 10);  // the table does hold checks (steps, world, algo, ...)
}

}  // namespace
