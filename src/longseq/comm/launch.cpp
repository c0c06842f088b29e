#include "longseq/comm/launch.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "longseq/comm/local_backend.hpp"
#include "longseq/comm/mpi_backend.hpp"

namespace longseq::comm {

std::string_view backend_name(Backend b) {
  return b == Backend::mpi ? "mpi" : "local";
}

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

Backend resolve_backend(std::string_view name) {
  if (name == "local") return Backend::local;
  if (name == "mpi") {
    core::require(mpi_built(), "comm",
                  "--backend mpi, but longseq was built without MPI (LONGSEQ_WITH_MPI=OFF)");
    return Backend::mpi;
  }
  if (name == "any") return mpi_built() && launched_by_mpirun() ? Backend::mpi : Backend::local;
  core::fail("comm", "unknown --backend '", name, "': expected local, mpi or any");
}

Backend init(std::string_view name) {
  const Backend b = resolve_backend(name);
  if (b == Backend::mpi) mpi_init();
  return b;
}

int world_size(const Options& options) {
  return init(options.backend) == Backend::mpi ? mpi_world_size() : std::max(options.world, 1);
}

void run_local(const Options& options, const std::function<void(Group&)>& fn) {
  core::require(options.world >= 0, "comm", "--world ", options.world,
                " must be at least 1 for the local backend");
  const int world = std::max(options.world, 1);
  const int nodes = options.nodes == 0 ? 1 : options.nodes;
  run_local_world(world, Topology::declared(world, nodes), options.link, options.timeout_s, fn);
}

void run(const Options& options, const std::function<void(Group&)>& fn) {
  if (init(options.backend) == Backend::mpi) {
    run_mpi_world(options, fn);
  } else {
    run_local(options, fn);
  }
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
