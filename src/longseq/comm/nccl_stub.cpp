// The nccl backend's entry points when longseq is built without NCCL (no CUDA build, or nccl.h /
// libnccl not found, or LONGSEQ_NCCL=OFF; CMake compiles this file instead of comm/nccl/):
// nccl_built() says no, everything else throws core::Error saying the backend was not built.
#include "longseq/comm/nccl_backend.hpp"

namespace longseq::comm {

bool nccl_built() {
  return false;
}
void nccl_init() {
  core::fail("comm",
             "the nccl backend was not built (LONGSEQ_WITH_NCCL=OFF: needs a CUDA build with "
             "nccl.h and libnccl)");
}
int nccl_world_size(const Options&) {
  nccl_init();
  return 0;
}
void run_nccl_world(const Options&, const std::function<void(Group&)>&) {
  nccl_init();
}
std::string nccl_unique_id() {
  nccl_init();
  return {};
}
std::unique_ptr<OpenWorld> open_nccl_world(const std::string&, int, const Topology&, int, double) {
  nccl_init();
  return nullptr;
}

}  // namespace longseq::comm
