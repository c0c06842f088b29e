#include "longseq/comm/backends.hpp"

#include <algorithm>

#include "longseq/comm/launch.hpp"
#include "longseq/comm/mpi_backend.hpp"
#include "longseq/comm/nccl_backend.hpp"
#include "longseq/core/error.hpp"

namespace longseq::comm {

namespace {

bool always() {
  return true;
}
void nothing() {}

int local_world_size(const Options& options) {
  return std::max(options.world, 1);
}
int mpi_size(const Options&) {
  return mpi_world_size();
}
bool mpi_claims_any() {
  return launched_by_mpirun();
}
// `any` never picks nccl: its buffers are device memory, which a caller must ask for.
bool never() {
  return false;
}

// The table: one line per backend. The first entry is `any`'s fallback and must always be built.
const BackendEntry kBackends[] = {
    {"local", "threads of this process, one per rank (--world of them)", always, "", always,
     nothing, local_world_size, run_local},
    {"mpi", "processes started by mpirun, one per rank (OpenMPI)", mpi_built,
     "longseq was built without MPI (LONGSEQ_WITH_MPI=OFF)", mpi_claims_any, mpi_init, mpi_size,
     run_mpi_world},
    {"nccl", "processes with one GPU each, started by mpirun (or world 1 without it); NCCL",
     nccl_built,
     "longseq was built without NCCL (LONGSEQ_WITH_NCCL=OFF: needs a CUDA build with nccl.h and "
     "libnccl)",
     never, nccl_init, nccl_world_size, run_nccl_world},
};

}  // namespace

std::span<const BackendEntry> backends() {
  return kBackends;
}

const BackendEntry* find_backend(std::string_view name) {
  for (const BackendEntry& b : kBackends)
    if (b.name == name) return &b;
  return nullptr;
}

std::vector<std::string> backend_choices() {
  std::vector<std::string> names;
  for (const BackendEntry& b : kBackends) names.emplace_back(b.name);
  names.emplace_back("any");
  return names;
}

std::string backend_help() {
  std::string s = "communication backend: ";
  for (const BackendEntry& b : kBackends) s += core::cat(b.name, " | ");
  s += "any";
  for (const BackendEntry& b : kBackends) s += core::cat("; ", b.name, ": ", b.help);
  s += core::cat("; any: the first built backend whose launcher started this process, else ",
                 kBackends[0].name);
  return s;
}

}  // namespace longseq::comm
