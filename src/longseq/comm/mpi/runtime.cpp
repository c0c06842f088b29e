// The MPI backend's process-wide life: Runtime's construction (MPI_Init_thread, the progress
// thread) and teardown, retiring worlds, and the entry points of comm/mpi_backend.hpp.
#include "longseq/comm/mpi/runtime.hpp"

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "longseq/comm/mpi/world.hpp"

namespace longseq::comm {
namespace mpi_impl {

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, buf, &len);
  return std::string(buf, static_cast<size_t>(len));
}

void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) core::fail("comm", what, " failed: ", mpi_error_string(rc));
}

Clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string rank_name(int group_rank, int world_rank) {
  return group_rank == world_rank
             ? core::cat("rank ", group_rank)
             : core::cat("rank ", group_rank, " (world rank ", world_rank, ")");
}

std::atomic<size_t> g_chunk_bytes{kMpiChunkBytes};
std::atomic<uint64_t> g_data_messages{0};

Runtime& Runtime::get() {
  static Runtime rt;
  return rt;
}

std::atomic<bool>& Runtime::initialized_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

bool& Runtime::holds_baton() {
  static thread_local bool flag = false;
  return flag;
}

Runtime::Runtime() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    // One progress thread makes every MPI call after init: SERIALIZED is enough.
    core::require(provided >= MPI_THREAD_SERIALIZED, "comm", "MPI provides thread level ", provided,
                  "; the progress thread needs MPI_THREAD_SERIALIZED or better");
    owns_mpi_ = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  void* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  core::require(flag && *static_cast<int*>(ub) >= INT_MAX, "comm", "MPI_TAG_UB is ",
                flag ? *static_cast<int*>(ub) : 0,
                "; longseq packs group ids into tags and "
                "needs 2^31-1 (OpenMPI's value)");
  thread_ = std::thread([this] { loop(); });
  initialized_flag() = true;
}

Runtime::~Runtime() {
  {
    std::lock_guard<std::mutex> lk(qmu_);
    stop_ = true;
  }
  qcv_.notify_one();
  thread_.join();
  // Receives left by a failed world (control receives, unmatched user receives) are cancelled
  // so MPI_Finalize does not wait for them; sends left behind are the peers' to drain.
  for (Active& a : incoming_) active_.push_back(std::move(a));
  for (Active& a : active_)
    if (a.is_recv && a.req != MPI_REQUEST_NULL) {
      MPI_Cancel(&a.req);
      MPI_Wait(&a.req, MPI_STATUS_IGNORE);
    }
  if (owns_mpi_) MPI_Finalize();
}

void Runtime::retire_world(const std::shared_ptr<MpiWorld>& w, bool failed) {
  if (w->retired) return;
  w->retired = true;
  w->cancel_probes();
  remove_world(w.get());
  if (w->ctrl_req != MPI_REQUEST_NULL) {
    MPI_Request copy = w->ctrl_req;
    MPI_Cancel(&copy);  // completes through MPI_Testsome as cancelled; on_ctrl ignores it
  }
  if (failed) {
    failed_comms_.push_back(w->comm);  // never freed: see the declaration
  } else {
    MPI_Comm_free(&w->comm);
  }
}

}  // namespace mpi_impl

using mpi_impl::Runtime;

bool mpi_built() {
  return true;
}
bool mpi_initialized() {
  return Runtime::initialized_flag().load();
}
void mpi_init() {
  Runtime::get();
}
int mpi_world_size() {
  return Runtime::get().size();
}

void mpi_set_chunk_bytes(size_t bytes) {
  core::require(bytes >= 1 && bytes <= static_cast<size_t>(INT_MAX), "comm", "MPI chunk limit of ",
                bytes, " bytes outside [1, ", INT_MAX, "] (MPI counts are int)");
  mpi_impl::g_chunk_bytes.store(bytes);
}
size_t mpi_chunk_bytes() {
  return mpi_impl::g_chunk_bytes.load();
}
uint64_t mpi_data_messages_sent() {
  return mpi_impl::g_data_messages.load();
}

void mpi_wait_all_processes() {
  Runtime::get().run_sync([] {
    MPI_Request req;
    mpi_impl::mpi_check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier");
    for (;;) {
      int flag = 0;
      mpi_impl::mpi_check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test (barrier)");
      if (flag) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
}

void mpi_abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace longseq::comm
