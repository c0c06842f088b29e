#pragma once
// Internal entry of the MPI backend (comm/mpi/). Without LONGSEQ_WITH_MPI, mpi_stub.cpp defines
// them: every function but mpi_built() and mpi_initialized() throws core::Error saying the backend
// was not built.
#include <cstddef>
#include <cstdint>
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
/// This process's rank of a new world held open (launch.hpp open_world).
std::unique_ptr<OpenWorld> open_mpi_world(const Options& options);
/// Returns once every process of MPI_COMM_WORLD has called it (MPI_Ibarrier polled with 1 ms
/// sleeps on the progress thread, so waiting costs no core). Call with no world running.
void mpi_wait_all_processes();
/// MPI_Abort(MPI_COMM_WORLD, code).
[[noreturn]] void mpi_abort(int code);

/// Default largest MPI message of the backend, 1 GiB. MPI counts are `int`, so one message of
/// MPI_BYTE holds at most 2^31-1 bytes; a transfer larger than the limit goes as several messages
/// (docs/comm.md "Messages of any size"). Why 2^30 and not INT_MAX: a power of two keeps every
/// chunk at the alignment of the caller's buffer (chunk k starts k GiB in, so a page-aligned K/V
/// block stays page-aligned for the transport's single copy), where INT_MAX-byte chunks would
/// start every later one at an odd address. Any per-message cost (matching, the rendezvous
/// handshake: microseconds) is negligible against moving 1 GiB (10 ms even at 100 GB/s), so a
/// smaller chunk would buy nothing either. Every message below 1 GiB is one MPI message, as before.
inline constexpr size_t kMpiChunkBytes = size_t{1} << 30;
/// Sets the chunk limit (bytes, in [1, 2^31-1]) for worlds started afterwards; a running world
/// keeps the limit it started with. For tests, which force splitting with small messages: every
/// process must set the same value before run() (run checks that they agree).
void mpi_set_chunk_bytes(size_t bytes);
/// The limit the next world will use (kMpiChunkBytes unless set).
size_t mpi_chunk_bytes();
/// MPI messages of user and collective traffic this process has posted as a sender (chunks
/// counted one by one; control messages not). For tests: Stats count a transfer once, this shows
/// how many messages it really took.
uint64_t mpi_data_messages_sent();

}  // namespace longseq::comm
