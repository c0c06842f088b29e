#pragma once
// The registry of communication backends: one entry per backend, naming how it starts a world.
// launch.hpp's run(), init() and world_size() go through it, and the --backend flag takes its
// choices and help from it, so a backend is added by writing its entry and one line of the table
// (docs/comm.md "Adding a backend"), with no switch to extend anywhere.
//
// Why a table in backends.cpp and not self-registration from each backend's file: longseq's
// libraries are static, and a linker keeps an object file only when something references it, so
// a backend registering itself from a static initialiser would vanish from binaries that name
// none of its symbols. The table references every entry.
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace longseq::comm {

class Group;
struct Options;

/// One backend. Every function pointer is set (a backend with nothing to initialise gives a
/// function that does nothing).
struct BackendEntry {
  /// The --backend value ("local", "mpi"; later "nccl").
  std::string_view name;
  /// One line for --help: what a rank is under this backend.
  std::string_view help;
  /// Compiled into this binary (MPI: LONGSEQ_WITH_MPI).
  bool (*built)();
  /// Why it is not built, for the error of --backend NAME when built() is false.
  std::string_view not_built;
  /// `--backend any` takes this backend when it is built and this holds (MPI: the process was
  /// started by mpirun). Entries are asked in table order; the first entry, which is always
  /// built, is what `any` falls back to.
  bool (*claims_any)();
  /// Process-wide setup before the first world (MPI: MPI_Init_thread and the progress thread),
  /// once; later calls are cheap.
  void (*init)();
  /// Ranks run() will start with these options.
  int (*world_size)(const Options& options);
  /// Runs fn on every rank of a new world (launch.hpp run()'s contract).
  void (*run)(const Options& options, const std::function<void(Group&)>& fn);
};

/// Every registered backend, built or not, in table order (the first is `any`'s fallback).
std::span<const BackendEntry> backends();
/// The entry named `name`, or nullptr (no entry is named "any").
const BackendEntry* find_backend(std::string_view name);
/// The values --backend accepts: every registered name, then "any".
std::vector<std::string> backend_choices();
/// The --backend help text: the names and each backend's help line, built or not.
std::string backend_help();

}  // namespace longseq::comm
