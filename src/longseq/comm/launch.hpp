#pragma once
// Starting ranks: pick a backend, build the world group, run a function on every rank.
//
//   comm::Options opt;                  // backend "any": MPI under mpirun, else local threads
//   opt.world = 4; opt.nodes = 2;       // local: 4 threads declared on 2 nodes
//   opt.link = comm::LinkModel::parse("intra=2us,50GB/s:inter=10us,5GB/s");
//   comm::run(opt, [&](comm::Group& world) { ... });   // throws RankFailed if any rank failed
//
// Under `local`, run() starts `world` threads (the calling thread is rank 0) and joins them all.
// Under `mpi`, each process runs the function once as its own rank; run() returns on a rank only
// after every rank's function has returned, so all ranks agree on success or on the first
// failure. Each run() builds a fresh world: a failure in one run does not leak into the next.
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "longseq/comm/backends.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/link_model.hpp"

namespace longseq::comm {

/// Everything needed to start a world; the CLI fills it from flags (add_cli_options in
/// comm/cli_options.hpp).
struct Options {
  /// A registered backend's name (comm/backends.hpp: "local", "mpi") or "any" (MPI when launched
  /// by mpirun, else local).
  std::string backend = "any";
  /// Ranks. local: number of threads (0 means 1). mpi: 0 = as started by mpirun; any other value
  /// must equal the mpirun world size.
  int world = 0;
  /// Nodes. local: declared, must divide world (0 means 1). mpi: 0 = real topology from the
  /// host names MPI reports (MPI_Get_processor_name: one node per host name); M > 0 declares M
  /// even nodes instead (to exercise inter-node code paths on one machine).
  int nodes = 0;
  /// Link model (local backend only; ignored, with a note in docs, under MPI).
  LinkModel link;
  /// Seconds a wait may block without progress before the world fails.
  double timeout_s = 300.0;
  /// mpi: after a failure, call MPI_Abort (kills every process, including ones stuck in
  /// compute) instead of returning. For command-line jobs; tests leave it off.
  bool abort_on_failure = false;
};

/// True when this process was started by mpirun/mpiexec (OpenMPI, PMIx or PMI environment).
bool launched_by_mpirun();
/// This process's rank as the launcher set it (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK), 0 when
/// not launched by mpirun: lets a command print its banner once before any world exists.
int launcher_rank();
/// True when the MPI backend was built.
bool mpi_available();
/// The registry entry of a backend name or "any" (comm/backends.hpp); throws core::Error for an
/// unknown name (naming the known ones) and for a backend that was not built (saying why).
const BackendEntry& resolve_backend(std::string_view name);
/// Resolves the backend and runs its process-wide setup (MPI: MPI_Init_thread and the progress
/// thread) once per process; later calls are cheap. MPI is finalised at process exit.
const BackendEntry& init(std::string_view name);
/// Number of ranks run() will start with these options (mpirun's size under MPI).
int world_size(const Options& options);

/// Runs fn on every rank of a new world (see top of file). Rethrows the first failure as
/// RankFailed on every rank (after all local threads are joined).
void run(const Options& options, const std::function<void(Group&)>& fn);
/// run() with the local backend whatever options.backend says.
void run_local(const Options& options, const std::function<void(Group&)>& fn);

/// A world held open between calls, for a caller that cannot hand run() one function: under
/// mpirun each process is a Python interpreter running the user's script, whose every statement
/// may use the group (the Python package, design.md §11). The world is what run() gives its
/// function, with run()'s failure rules: fail() is what a throwing function does (every pending
/// and future wait of every rank throws RankFailed naming this rank and `message`), close() is
/// what run() does once the function returned (it returns on a rank only after every rank has
/// closed, and throws RankFailed if any rank failed). Released without close(): fail() then
/// close(), errors swallowed. Thread safety: as Group's; close() once, from one thread.
class OpenWorld {
 public:
  virtual ~OpenWorld() = default;
  /// The world group (invalid after close()).
  virtual Group& group() = 0;
  virtual void fail(const std::string& message) = 0;
  virtual void close() = 0;

 protected:
  /// The release rule above, for a backend's destructor (the base's cannot reach the overrides):
  /// unless `closed`, fail() then close(), whose report of that failure is swallowed.
  void release_unclosed(bool closed) noexcept {
    if (closed) return;
    try {
      fail("the world was released without close()");
      close();
    } catch (...) {  // the failure just recorded is what close() reports
    }
  }
};
/// Opens this process's rank of a new world of the mpi backend (options.backend "mpi", or "any"
/// under mpirun; without mpirun MPI starts as a singleton world of 1). Throws core::Error naming
/// the backend for the local backend, whose ranks are threads of one run() call, and when MPI
/// was not built.
std::unique_ptr<OpenWorld> open_world(const Options& options);
/// MPI: MPI_Abort(MPI_COMM_WORLD, code) when MPI is initialised; otherwise std::exit(code).
[[noreturn]] void abort_job(int code);

/// The end of a command-line job, so that every process of an mpirun job agrees on its exit
/// status. Not under mpirun (or built without MPI): returns `status`. Under mpirun: status 0
/// waits (MPI_Ibarrier, polled with sleeps so waiting processes leave the cores to the busy ones)
/// until every process has reached finish_job, then returns 0, so no process reports success
/// while a peer may still fail; a non-zero status ends the whole job (MPI_Abort when MPI is
/// initialised; otherwise the process exits with `status`, and mpirun ends the others), so every
/// process ends non-zero. Call it once, after the command's outputs are written.
int finish_job(int status);

}  // namespace longseq::comm
