#pragma once
// Command-line flags of a comm::Options, for subcommands and benchmarks (header-only: only code
// that already uses CLI11 includes it; the comm library itself does not depend on CLI11).
//
//   --backend local|mpi|any     [any]   MPI when started by mpirun, else local threads (the names
//                                       come from the registry, comm/backends.hpp)
//   --world N                   [0]     local ranks, 0 = 1 (MPI: 0 = mpirun's -np)
//   --nodes M                   [0]     declared nodes (local: must divide world; MPI: 0 = real)
//   --link SPEC                 [none]  local link model, e.g.
//   intra=2us,100GB/s:inter=10us,12.5GB/s
//   --comm-timeout SECONDS      [300]   a wait blocked this long fails the whole job
#include <CLI/CLI.hpp>
#include <string>

#include "longseq/comm/launch.hpp"
#include "longseq/comm/link_model.hpp"

namespace longseq::comm {

/// Declares the flags above on `app`, writing into `opt` (which must outlive parsing). The link
/// text is parsed during CLI parsing, so a bad spec is reported as a parse error naming it.
inline void add_cli_options(CLI::App& app, Options& opt, bool with_world = true) {
  app.add_option("--backend", opt.backend, backend_help())
      ->check(CLI::IsMember(backend_choices()))
      ->capture_default_str();
  if (with_world)
    app.add_option("--world", opt.world,
                   "ranks (local threads, 0 = 1; under MPI 0 = as started by mpirun)")
        ->capture_default_str();
  app.add_option("--nodes", opt.nodes,
                 "declared nodes, ranks split evenly (local: 0 = 1; MPI: 0 = real topology)")
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--link",
         [&opt](const std::string& text) {
           try {
             opt.link = LinkModel::parse(text);
           } catch (const core::Error& e) {
             throw CLI::ValidationError("--link", e.what());
           }
         },
         "local link model intra=LAT,BW:inter=LAT,BW (e.g. inter=10us,12.5GB/s), or none")
      ->default_str("none");
  app.add_option("--comm-timeout", opt.timeout_s,
                 "seconds a blocked wait may last before the whole job fails")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

}  // namespace longseq::comm
