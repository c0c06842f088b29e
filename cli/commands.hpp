#pragma once
// Every subcommand of the `longseq` binary is registered in commands.cpp, and only there.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace longseq::cli {

/// Which processes of an mpirun job run a command (main.cpp; without mpirun there is one).
enum class Ranks {
  every,  ///< every process: the command starts a comm world and writes only from its rank 0
  first,  ///< only the launcher's rank 0 (commands without communication: one output, one print)
};

/// One subcommand: `add` declares its flags on `app` and returns the function that runs it.
struct Command {
  const char* name;
  const char* summary;
  std::function<std::function<int()>(CLI::App& app)> add;
  Ranks ranks = Ranks::every;
};

/// The table of subcommands, in the order `usage()` lists them.
const std::vector<Command>& commands();

// Each subcommand's registration lives in cmd_<name>.cpp.
std::function<int()> add_info(CLI::App& app);
std::function<int()> add_schedule(CLI::App& app);
std::function<int()> add_train(CLI::App& app);
std::function<int()> add_tokenize(CLI::App& app);
std::function<int()> add_plan(CLI::App& app);
std::function<int()> add_calibrate(CLI::App& app);
std::function<int()> add_attention(CLI::App& app);
std::function<int()> add_eval(CLI::App& app);
std::function<int()> add_generate(CLI::App& app);
std::function<int()> add_passkey(CLI::App& app);
std::function<int()> add_copy(CLI::App& app);

}  // namespace longseq::cli
