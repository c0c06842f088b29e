// One run()'s world of the MPI backend: failure and "done" control messages, the node layout from
// host names, and run_mpi_world, which builds a world, runs the rank's function and agrees on
// the outcome with every other rank.
#include "longseq/comm/mpi/world.hpp"

#include <cstdio>
#include <cstring>
#include <numeric>

#include "longseq/comm/mpi/runtime.hpp"

namespace longseq::comm {
namespace mpi_impl {

void MpiWorld::fail(int who, const std::string& message, bool broadcast) {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (failed) return;
    failed = true;
    failed_rank = who;
    failure = message;
  }
  cv.notify_all();
  auto self = shared_from_this();
  auto drop = [self, broadcast] {
    self->cancel_probes();  // their buffers may be gone once the waits have thrown
    if (broadcast) self->send_ctrl(kFail, self->failure);
  };
  drop_or_submit(drop);
}

void MpiWorld::cancel_probes() {
  for (auto& [key, q] : probes)
    for (auto& op : q) {
      op->note_error("cancelled: the run failed");
      op->all_out = true;
      settle(*op);
    }
  probes.clear();
}

void MpiWorld::settle(MpiOp& op) {
  if (op.settled || !op.all_out || op.in_flight > 0) return;
  op.settled = true;
  complete(op, std::move(op.first_error));
}

void MpiWorld::complete(MpiOp& op, std::string error) {
  bool wake;
  {
    std::lock_guard<std::mutex> lk(mu);
    wake = op.sleeper;
    op.done = true;
    op.error = std::move(error);
  }
  if (wake) cv.notify_all();
}

void MpiWorld::send_ctrl(int32_t kind, const std::string& text) {
  auto buf = std::make_shared<std::vector<char>>(8 + std::min(text.size(), kCtrlBytes - 8));
  const int32_t head[2] = {kind, rank};
  std::memcpy(buf->data(), head, 8);
  std::memcpy(buf->data() + 8, text.data(), buf->size() - 8);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    MPI_Request req;
    if (MPI_Isend(buf->data(), static_cast<int>(buf->size()), MPI_BYTE, p, kCtrlTag, comm, &req) ==
        MPI_SUCCESS)
      Runtime::get().add_active(
          req, [buf](const MPI_Status&) {}, false, false);
  }
}

void MpiWorld::post_ctrl_recv() {
  MPI_Request req;
  mpi_check(MPI_Irecv(ctrl_buf.data(), static_cast<int>(kCtrlBytes), MPI_BYTE, MPI_ANY_SOURCE,
                      kCtrlTag, comm, &req),
            "MPI_Irecv (control)");
  ctrl_req = req;
  auto self = shared_from_this();
  Runtime::get().add_active(
      req, [self](const MPI_Status& st) { self->on_ctrl(st); }, true, true);
}

void MpiWorld::on_ctrl(const MPI_Status& st) {
  int cancelled = 0;
  MPI_Test_cancelled(&st, &cancelled);
  if (cancelled || retired) return;
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  if (count >= 8) {
    int32_t head[2];
    std::memcpy(head, ctrl_buf.data(), 8);
    const std::string text(ctrl_buf.data() + 8, static_cast<size_t>(count - 8));
    if (head[0] == kDone) {
      {
        std::lock_guard<std::mutex> lk(mu);
        if (!done_from[static_cast<size_t>(head[1])]) {
          done_from[static_cast<size_t>(head[1])] = 1;
          ++done_count;
        }
      }
      cv.notify_all();
    } else if (head[0] == kFail) {
      fail(head[1], text, false);
    }
  }
  post_ctrl_recv();
}

void MpiWorld::drop_or_submit(const std::function<void()>& fn) {
  if (Runtime::holds_baton())
    fn();
  else
    Runtime::get().submit(fn);
}

namespace {

/// Progress thread: node of every rank from the host names MPI reports (MPI_Get_processor_name,
/// allgathered): ranks with the same name share a node, and nodes are named by their lowest world
/// rank, then renumbered densely by Topology. Names rather than MPI_COMM_TYPE_SHARED, because the
/// host is what the links are about (scripts/cluster.sh gives every network namespace its own
/// hostname; shared memory is not even used between them).
Topology detect_topology(MPI_Comm comm, int rank, int size) {
  (void)rank;
  std::vector<char> mine(MPI_MAX_PROCESSOR_NAME + 1, '\0');
  int len = 0;
  mpi_check(MPI_Get_processor_name(mine.data(), &len), "MPI_Get_processor_name");
  const size_t width = mine.size();
  std::vector<char> all(width * static_cast<size_t>(size));
  mpi_check(MPI_Allgather(mine.data(), static_cast<int>(width), MPI_CHAR, all.data(),
                          static_cast<int>(width), MPI_CHAR, comm),
            "MPI_Allgather (host names)");
  std::map<std::string, int> first_rank;
  std::vector<int> leaders(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    const std::string name(all.data() + static_cast<size_t>(r) * width);
    leaders[static_cast<size_t>(r)] = first_rank.emplace(name, r).first->second;
  }
  return Topology(leaders);
}

}  // namespace

}  // namespace mpi_impl

using mpi_impl::kDone;
using mpi_impl::MpiWorld;
using mpi_impl::Runtime;

namespace {

// One world of this process, from MPI_Comm_dup to retirement: run_mpi_world's and
// open_mpi_world's: the constructor opens it and makes the world group, close() agrees on the
// outcome with every rank and retires it.
class MpiOpenWorld final : public OpenWorld {
 public:
  explicit MpiOpenWorld(const Options& options) : abort_on_failure_(options.abort_on_failure) {
    Runtime& rt = Runtime::get();
    core::require(options.world == 0 || options.world == rt.size(), "comm", "--world ",
                  options.world, " but mpirun started ", rt.size(), " processes");
    core::require(options.timeout_s > 0.0, "comm", "timeout ", options.timeout_s,
                  " s must be positive");
    world_ = std::make_shared<MpiWorld>();
    auto& world = world_;
    world->rank = rt.rank();
    world->size = rt.size();
    world->timeout_s = options.timeout_s;
    world->done_from.assign(static_cast<size_t>(rt.size()), 0);
    world->chunk_bytes = mpi_chunk_bytes();
    // Blocking collectives are fine here: no traffic of this world exists yet.
    rt.run_sync([&] {
      mpi_impl::mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &world->comm), "MPI_Comm_dup");
      MPI_Comm_set_errhandler(world->comm, MPI_ERRORS_RETURN);
      // A receiver splits its expectation at its own limit, so all ranks must use one: the
      // smallest and (negated) largest in one all-reduce. Every rank sees the same result and
      // throws alike.
      const auto mine = static_cast<long long>(world->chunk_bytes);
      long long lim[2] = {mine, -mine};
      mpi_impl::mpi_check(MPI_Allreduce(MPI_IN_PLACE, lim, 2, MPI_LONG_LONG, MPI_MIN, world->comm),
                          "MPI_Allreduce (chunk limit)");
      if (lim[0] != -lim[1]) {
        MPI_Comm_free(&world->comm);
        core::fail("comm", "MPI chunk limit differs between ranks: ", lim[0], " to ", -lim[1],
                   " bytes (mpi_set_chunk_bytes must be called alike on every rank)");
      }
      world->topology = mpi_impl::detect_topology(world->comm, world->rank, world->size);
      world->post_ctrl_recv();
      rt.add_world(world);
    });
    if (options.nodes > 0) world->topology = Topology::declared(world->size, options.nodes);

    auto rs = std::make_shared<RankState>();
    rs->world_rank = world->rank;
    rs->world_node = world->topology.node(world->rank);
    std::vector<int> ranks(static_cast<size_t>(world->size));
    std::iota(ranks.begin(), ranks.end(), 0);
    group_ = Group(mpi_impl::make_group(world, ranks, world->rank, world->topology, 1u, rs));
  }
  ~MpiOpenWorld() override { release_unclosed(closed_); }

  Group& group() override { return group_; }

  void fail(const std::string& message) override { world_->fail(world_->rank, message, true); }

  void close() override {
    core::require(!closed_, "comm", "close() of a world that is already closed");
    closed_ = true;
    group_ = Group();
    const auto& world = world_;
    Runtime& rt = Runtime::get();
    // Agree on the outcome: success only once every rank has closed.
    {
      bool failed;
      {
        std::lock_guard<std::mutex> lk(world->mu);
        failed = world->failed;
      }
      if (!failed) {
        rt.submit([world] { world->send_ctrl(kDone, ""); });
        std::unique_lock<std::mutex> lk(world->mu);
        world->cv.wait(lk, [&] { return world->failed || world->done_count == world->size - 1; });
      }
    }
    std::unique_lock<std::mutex> lk(world->mu);
    if (world->failed) {
      const int who = world->failed_rank;
      const std::string why = world->failure;
      lk.unlock();
      rt.submit([world] { Runtime::get().retire_world(world, true); });
      if (abort_on_failure_) {
        std::fprintf(stderr, "[comm] rank %d failed: %s\n", who, why.c_str());
        mpi_abort(1);
      }
      throw RankFailed(who, why);
    }
    lk.unlock();
    rt.run_sync([world] { Runtime::get().retire_world(world, false); });
  }

 private:
  bool abort_on_failure_;
  bool closed_ = false;
  std::shared_ptr<MpiWorld> world_;
  Group group_;
};

}  // namespace

std::unique_ptr<OpenWorld> open_mpi_world(const Options& options) {
  return std::make_unique<MpiOpenWorld>(options);
}

void run_mpi_world(const Options& options, const std::function<void(Group&)>& fn) {
  MpiOpenWorld w(options);
  try {
    fn(w.group());
  } catch (const std::exception& e) {
    w.fail(e.what());
  } catch (...) {
    w.fail("unknown exception (not derived from std::exception)");
  }
  w.close();
}

}  // namespace longseq::comm
