#pragma once
// Internal entry of the nccl backend (comm/nccl/, docs/gpu.md "The nccl backend"). Without
// LONGSEQ_WITH_NCCL, nccl_stub.cpp defines them: nccl_built() says no, the others throw
// core::Error saying the backend was not built.
//
// One rank per process and GPU. Under mpirun the MPI backend starts the world and broadcasts
// NCCL's unique id; without mpirun the world is 1. Point-to-point moves device memory only;
// collectives take device memory, or host memory staged through the device (then blocking).
// NCCL has no tags: messages between two ranks match by posting order (the pair-order rule,
// group.hpp).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"

namespace longseq::comm {

bool nccl_built();
/// Checks that a GPU is visible (core::Error otherwise); no process-wide state.
void nccl_init();
/// mpirun's size under mpirun, else max(options.world, 1) (run refuses more than 1).
int nccl_world_size(const Options& options);
/// Runs fn as this process's rank of a fresh NCCL world (launch.hpp run()'s contract).
void run_nccl_world(const Options& options, const std::function<void(Group&)>& fn);

/// Bytes of an NCCL unique id (ncclUniqueId, 128): what nccl_unique_id returns and
/// open_nccl_world takes.
inline constexpr size_t kNcclIdBytes = 128;
/// A fresh NCCL unique id (ncclGetUniqueId: needs no GPU), for a bootstrap this backend does not
/// own: the Python package broadcasts it over the caller's torch.distributed group.
std::string nccl_unique_id();
/// Opens this process's rank of an NCCL world of topo.size() ranks whose rank 0 made `id` and
/// handed it to every rank by some other channel (launch.hpp OpenWorld's contract; ncclCommInitRank
/// blocks until every rank has called it). `device`: the GPU this rank runs on (made current);
/// two ranks of one node on one GPU are the caller's to refuse before (NCCL would fail with
/// "Duplicate GPU"). A world that fails (fail(), or an error) cannot agree on it over NCCL:
/// close() then throws RankFailed for this rank, and the other ranks' waits end at `timeout_s`.
std::unique_ptr<OpenWorld> open_nccl_world(const std::string& id, int rank, const Topology& topo,
                                           int device, double timeout_s);

/// The GPU of the rank at index `me` of `node_ranks` (the world ranks of one node, in rank order)
/// when `gpus` GPUs are visible: its index on the node. NCCL refuses two ranks of one
/// communicator on one GPU ("Duplicate GPU detected"), so this refuses first, naming the GPU and
/// two ranks that would share it. Pure (tests call it without a GPU).
inline int nccl_device_of(const std::vector<int>& node_ranks, int me, int gpus) {
  const int n = static_cast<int>(node_ranks.size());
  core::require(gpus >= 1, "comm", "the nccl backend needs a GPU; none is visible");
  core::require(n <= gpus, "comm", "nccl: ranks ", node_ranks[0], " and ",
                node_ranks[static_cast<size_t>(gpus)], " would share GPU 0 (", n,
                " ranks on one node, ", gpus,
                " GPU(s) visible); NCCL runs one rank per GPU: start at most ", gpus,
                " ranks per node");
  return me;
}

}  // namespace longseq::comm
