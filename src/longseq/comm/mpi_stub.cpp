// The MPI backend's entry points when longseq is built without MPI (LONGSEQ_WITH_MPI=OFF; CMake
// compiles this file instead of comm/mpi/): mpi_built() and mpi_initialized() say no, everything
// else throws core::Error saying the backend was not built.
#include <cstdlib>

#include "longseq/comm/mpi_backend.hpp"

namespace longseq::comm {

bool mpi_built() {
  return false;
}
bool mpi_initialized() {
  return false;
}
void mpi_init() {
  core::fail("comm", "the MPI backend was not built (LONGSEQ_WITH_MPI=OFF)");
}
int mpi_world_size() {
  mpi_init();
  return 0;
}
void run_mpi_world(const Options&, const std::function<void(Group&)>&) {
  mpi_init();
}
std::unique_ptr<OpenWorld> open_mpi_world(const Options&) {
  mpi_init();
  return nullptr;
}
void mpi_wait_all_processes() {
  mpi_init();
}
void mpi_set_chunk_bytes(size_t) {
  mpi_init();
}
size_t mpi_chunk_bytes() {
  mpi_init();
  return kMpiChunkBytes;
}
uint64_t mpi_data_messages_sent() {
  mpi_init();
  return 0;
}
void mpi_abort(int code) {
  std::exit(code);
}

}  // namespace longseq::comm
