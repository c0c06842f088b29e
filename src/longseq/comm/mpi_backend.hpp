#pragma once
// Internal entry of the MPI backend (mpi.cpp). Without LONGSEQ_WITH_MPI, mpi_stub.cpp defines them:
// every function but mpi_built() and mpi_initialized() throws core::Error saying the backend was
// not built.
#include <functional>

#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"

namespace longseq::comm {

bool mpi_built();
/// MPI_Init_thread and the progress thread, once per process.
void mpi_init();
bool mpi_initialized();
/// Size of MPI_COMM_WORLD (initialises MPI).
int mpi_world_size();
/// Runs fn as this process's rank of a fresh world (a dup of MPI_COMM_WORLD).
void run_mpi_world(const Options& options, const std::function<void(Group&)>& fn);
/// Returns once every process of MPI_COMM_WORLD has called it (MPI_Ibarrier polled with 1 ms
/// sleeps on the progress thread, so waiting costs no core). Call with no world running.
void mpi_wait_all_processes();
/// MPI_Abort(MPI_COMM_WORLD, code).
[[noreturn]] void mpi_abort(int code);

}  // namespace longseq::comm
