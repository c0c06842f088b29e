#include "longseq/comm/launch.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "longseq/comm/local_backend.hpp"
#include "longseq/comm/mpi_backend.hpp"

namespace longseq::comm {

bool launched_by_mpirun() {
  // OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMIx launchers (prterun, srun --mpi=pmix) set
  // PMIX_RANK; MPICH's hydra and PMI-1/2 launchers set PMI_RANK.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

bool mpi_available() {
  return mpi_built();
}

const BackendEntry& resolve_backend(std::string_view name) {
  const std::span<const BackendEntry> all = backends();
  if (name == "any") {
    for (const BackendEntry& b : all.subspan(1))
      if (b.built() && b.claims_any()) return b;
    return all.front();
  }
  const BackendEntry* b = find_backend(name);
  if (b == nullptr) {
    const std::vector<std::string> names = backend_choices();
    std::string known;
    for (size_t i = 0; i < names.size(); ++i)
      known += core::cat(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ", names[i]);
    core::fail("comm", "unknown --backend '", name, "': expected ", known);
  }
  core::require(b->built(), "comm", "--backend ", name, ", but ", b->not_built);
  return *b;
}

const BackendEntry& init(std::string_view name) {
  const BackendEntry& b = resolve_backend(name);
  b.init();
  return b;
}

int world_size(const Options& options) {
  return init(options.backend).world_size(options);
}

void run_local(const Options& options, const std::function<void(Group&)>& fn) {
  core::require(options.world >= 0, "comm", "--world ", options.world,
                " must be at least 1 for the local backend");
  const int world = std::max(options.world, 1);
  const int nodes = options.nodes == 0 ? 1 : options.nodes;
  run_local_world(world, Topology::declared(world, nodes), options.link, options.timeout_s, fn);
}

void run(const Options& options, const std::function<void(Group&)>& fn) {
  init(options.backend).run(options, fn);
}

std::unique_ptr<OpenWorld> open_world(const Options& options) {
  const std::string_view name = options.backend == "any" && !launched_by_mpirun() && mpi_built()
                                    ? std::string_view("mpi")
                                    : std::string_view(options.backend);
  const BackendEntry& b = init(name);
  core::require(b.name == "mpi", "comm",
                "open_world needs the mpi backend (one rank per process), not '", b.name,
                "': the local backend's ranks are threads of one run() call");
  return open_mpi_world(options);
}

void abort_job(int code) {
  if (mpi_initialized()) mpi_abort(code);
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(code);
}

int finish_job(int status) {
  if (!launched_by_mpirun() || !mpi_built()) return status;
  std::fflush(stdout);
  std::fflush(stderr);
  if (status != 0) abort_job(status);
  mpi_init();
  mpi_wait_all_processes();
  return 0;
}

}  // namespace longseq::comm
