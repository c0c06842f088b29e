// longseq: one binary, one subcommand per job. Subcommands are registered in commands.cpp;
// usage() lists every subcommand and every flag with its default.
//
// Under mpirun every process runs main(): usage and help are printed by the launcher's rank 0
// only, commands marked Ranks::first run on rank 0 only, and comm::finish_job makes the exit
// status agree (0 everywhere only once every process succeeded; any failure ends every process
// non-zero).
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <string>

#include "commands.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/cpu.hpp"
#include "longseq/core/error.hpp"

namespace {

// Every command (or only `only`) with every flag and its default.
void usage(CLI::App& app, const std::string& only = "") {
  std::printf("usage: longseq <command> [flags]\n\ncommands:\n");
  for (CLI::App* sub : app.get_subcommands({})) {
    if (!only.empty() && sub->get_name() != only) continue;
    std::printf("\n  %s  %s\n", sub->get_name().c_str(), sub->get_description().c_str());
    for (const CLI::Option* opt : sub->get_options()) {
      if (opt->get_name() == "--help" || opt->get_name() == "-h,--help") continue;
      const std::string def = opt->get_default_str();
      // Flags without a value default to off; options without a default to nothing at all.
      const std::string shown = !def.empty()                   ? " [default: " + def + "]"
                                : opt->get_required()          ? std::string(" (required)")
                                : opt->get_expected_min() == 0 ? std::string(" [default: off]")
                                                               : std::string(" [default: none]");
      std::printf("      %-28s %s%s\n", opt->get_name().c_str(), opt->get_description().c_str(),
                  shown.c_str());
    }
  }
}

// --help wins over everything else on the line: CLI11 would otherwise first refuse a missing
// required flag (`longseq tokenize --help` must list tokenize's flags, not demand --in).
bool asks_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "-h" || std::string(argv[i]) == "--help") return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"longseq: context-parallel training of transformers on very long sequences"};
  app.set_help_flag();  // usage() replaces CLI11's help so defaults are always shown
  bool help = false;
  app.add_flag("-h,--help", help, "print every command and flag with its default");
  app.require_subcommand(0, 1);
  std::map<std::string, std::function<int()>> runners;
  std::map<std::string, longseq::cli::Ranks> ranks;
  bool sub_help = false;  // handled before parsing (below); the flag makes CLI11 accept it
  for (const auto& cmd : longseq::cli::commands()) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.summary);
    sub->set_help_flag();
    sub->add_flag("-h,--help", sub_help, "print this command's flags with their defaults");
    sub->option_defaults()->always_capture_default();
    runners[cmd.name] = cmd.add(*sub);
    ranks[cmd.name] = cmd.ranks;
  }
  namespace comm = longseq::comm;
  const bool first = comm::launcher_rank() == 0;  // the one process that prints usage under mpirun
  if (asks_help(argc, argv)) {
    if (first) usage(app, argc > 1 && runners.count(argv[1]) ? argv[1] : "");
    return comm::finish_job(0);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every process parses the same line, so every process ends with status 2.
    if (first) {
      std::fprintf(stderr, "[cli] %s\n\n", e.what());
      usage(app);
    }
    return comm::finish_job(2);
  } catch (const longseq::core::Error& e) {
    // A shared flag's range (cli/table_flags.hpp add_row), checked as the value is read: the same
    // words and status as train's table gives for it after the parse.
    if (first) std::fprintf(stderr, "error: %s\n", e.what());
    return comm::finish_job(1);
  }
  if (help || app.get_subcommands().empty()) {
    if (first) usage(app);
    return comm::finish_job(help ? 0 : 2);
  }
  const std::string name = app.get_subcommands().front()->get_name();
  // The kernel variant is resolved before any work: a bad or unsupported LONGSEQ_ISA is one clear
  // error here, not a failure inside a rank's first kernel. Every process has the same
  // environment, so only the launcher's rank 0 prints it (as with a bad flag above).
  try {
    longseq::core::active_isa();
  } catch (const std::exception& e) {
    if (first) std::fprintf(stderr, "error: %s\n", e.what());
    return comm::finish_job(1);
  }
  int status = 0;
  try {
    if (first || ranks.at(name) == longseq::cli::Ranks::every) status = runners.at(name)();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    status = 1;
  }
  return comm::finish_job(status);
}
