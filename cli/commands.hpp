#pragma once
// Every subcommand of the `longseq` binary is registered in commands.cpp, and only there.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace longseq::cli {

/// One subcommand: `add` declares its flags on `app` and returns the function that runs it.
struct Command {
  const char* name;
  const char* summary;
  std::function<std::function<int()>(CLI::App& app)> add;
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

}  // namespace longseq::cli
