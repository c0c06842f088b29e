#pragma once
// CLI flags from a configuration table (core/options.hpp): one option per CLI-scoped row, whose
// --help default is the row's value in a reference configuration (the "main" preset: "[default:
// 6]"), and a pass that writes the flags the user gave over a configuration. Values keep their
// table type, so CLI11 refuses
// "--steps x" before anything runs.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>

#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/flag_rows.hpp"
#include "longseq/core/options.hpp"

namespace longseq::cli {

/// Declares a shared flag (core/flag_rows.hpp) on `app`, writing into `target`: the row's name and
/// help, and the row's default, which `target` must already hold (the structs that carry these
/// fields initialise them from the row; a mismatch is a bug, not user input). A numeric row's
/// range is enforced as the value is read, by core::check_number, so "--world 0" reads "[schedule]
/// --world 0 must be >= 1" in every command as in train's table ("[train] ...").
template <class T>
CLI::Option* add_row(CLI::App& app, const core::FlagRow& row, T& target) {
  if constexpr (std::is_same_v<T, std::string>) {
    LONGSEQ_CHECK_MSG(target == row.text, "flag ", row.flag, ": default '", target,
                      "' is not the row's '", row.text, "'");
    return app.add_option(row.flag, target, row.help);
  } else {
    LONGSEQ_CHECK_MSG(static_cast<int64_t>(target) == row.number, "flag ", row.flag, ": default ",
                      target, " is not the row's ", row.number);
    const std::string component = app.get_name();
    const core::FlagRow r = row;
    // A validator sees the text before CLI11 converts it: text that is not a number is left to
    // the conversion, which refuses it naming the flag. No description: --help stays the row's.
    return app.add_option(row.flag, target, row.help)
        ->check(CLI::Validator(
            [component, r](std::string& text) {
              char* end = nullptr;
              const double v = std::strtod(text.c_str(), &end);
              if (end != text.c_str() && *end == '\0')
                core::check_number(v, text, r.range, component, r.flag);
              return std::string();
            },
            ""));
  }
}

/// --world (core/flag_rows.hpp) of a command whose ranks comm::run starts on the "any" backend
/// (eval, generate, passkey): as add_row, and under mpirun a --world not given is mpirun's size,
/// as the row's help promises, so `mpirun -np 3 longseq eval ...` needs no `--world 3` (it used to
/// fail on every process: "--world 1 but mpirun started 3 processes").
inline CLI::Option* add_world_row(CLI::App& app, int& world) {
  CLI::Option* o = add_row(app, core::rows::world, world);
  app.final_callback([o, &world] {
    if (o->count() == 0 && comm::launched_by_mpirun()) world = comm::world_size(comm::Options{});
  });
  return o;
}

/// --checkpoint-dir DIR (core/flag_rows.hpp), and --checkpoint DIR, its spelling before issue 29,
/// which sets the same value and warns on stderr (once under mpirun: the launcher's rank 0).
/// `component` names the command in the warning.
inline void add_checkpoint_dir(CLI::App& app, std::string& dir, const char* component) {
  add_row(app, core::rows::checkpoint_dir, dir);
  app.add_option("--checkpoint", dir, "deprecated spelling of --checkpoint-dir")
      ->each([component](const std::string&) {
        if (comm::launcher_rank() == 0)
          std::fprintf(stderr,
                       "[%s] warning: --checkpoint DIR is deprecated here, use --checkpoint-dir "
                       "(--checkpoint is train's and plan's recompute policy)\n",
                       component);
      });
}

/// The values given on the command line, one slot per CLI-scoped row (unset: not given).
class TableFlags {
 public:
  /// Declares the flags of `table` on `app`. `shown`: the configuration whose values --help shows
  /// as defaults, e.g. the "main" preset (nullptr: none shown). Only shown: a flag not given
  /// leaves the configuration's value alone (apply()).
  template <class C>
  static std::shared_ptr<TableFlags> add(CLI::App& app, const std::vector<core::Field<C>>& table,
                                         const C* shown) {
    auto flags = std::make_shared<TableFlags>();
    const auto probe = std::make_unique<C>();  // only its members' types are used
    for (const auto& f : table) {
      if (!f.in_cli()) continue;
      Slot& slot = flags->slots_.emplace_back();
      slot.key = f.key;
      CLI::Option* opt = std::visit(
          [&](auto* p) { return flags->declare(app, slot, f.flag, f.help, p); }, f.get(*probe));
      // Not for a boolean flag: CLI11 reads a flag's default string as the value the bare flag
      // gives (usage() shows flags as "[default: off]").
      if (shown && !std::holds_alternative<bool*>(f.get(*shown)))
        opt->default_str(core::field_text(f.get(*shown)));
    }
    return flags;
  }

  /// Writes every given flag over `c` (a boolean row: --flag sets true, --no-flag false).
  template <class C>
  void apply(const std::vector<core::Field<C>>& table, C& c) const {
    for (const Slot& slot : slots_) {
      const core::Field<C>* f = core::find_field(table, slot.key);
      std::visit(
          [&](const auto& v) {
            if (v) *std::get<typename std::decay_t<decltype(v)>::value_type*>(f->get(c)) = *v;
          },
          slot.value);
    }
  }

  /// Whether the flag of row `key` was given.
  bool given(const std::string& key) const {
    for (const Slot& slot : slots_)
      if (slot.key == key)
        return std::visit([](const auto& v) { return v.has_value(); }, slot.value);
    return false;
  }

 private:
  struct Slot {
    std::string key;
    std::variant<std::optional<bool>, std::optional<int>, std::optional<int64_t>,
                 std::optional<uint64_t>, std::optional<double>, std::optional<std::string>>
        value;
  };

  // A boolean row is a pair --flag / --no-flag, so that a preset's true can be turned off too.
  CLI::Option* declare(CLI::App& app, Slot& slot, const char* flag, const std::string& help,
                       bool*) {
    slot.value = std::optional<bool>();
    std::optional<bool>* v = &std::get<std::optional<bool>>(slot.value);
    const std::string name(flag + 2);  // without "--"
    return app.add_flag_function(
        "--" + name + ",!--no-" + name, [v](int64_t n) { *v = n > 0; },
        help + " (--no-" + name + ": off)");
  }
  template <class T>
  CLI::Option* declare(CLI::App& app, Slot& slot, const char* flag, const std::string& help, T*) {
    slot.value = std::optional<T>();
    CLI::Option* o = app.add_option(flag, std::get<std::optional<T>>(slot.value), help);
    // CLI11 reads "-7" into an unsigned type as 2^64 - 7 (strtoull): refused instead, naming the
    // flag (issue 20: --seed -7 was a silent wrap-around).
    if constexpr (std::is_unsigned_v<T>) o->check(CLI::NonNegativeNumber);
    return o;
  }

  std::deque<Slot> slots_;  // a deque: CLI11 keeps pointers into the slots
};

}  // namespace longseq::cli
