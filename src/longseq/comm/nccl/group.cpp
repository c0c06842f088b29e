// The nccl backend (docs/gpu.md "The nccl backend"): a GroupImpl over one NCCL communicator per
// group, every operation of a rank on one CUDA stream, so they run in the order posted.
//
// Point to point: isend/irecv are queued and launched together (ncclGroupStart .. ncclGroupEnd)
// at the next wait, test, grouped step (start_exchange) or collective, so the sends and receives
// a rank posts between two waits progress together (a lone ncclSend blocks its stream until the
// peer's ncclRecv runs, and two ranks sending to each other first would deadlock). A request
// completes with a CUDA event recorded after its launch. NCCL has no tags and ignores them:
// messages between a pair match by posting order, which the pair-order rule (group.hpp) makes the
// order tags would give. Byte counts are not compared with the peer's (NCCL cannot): a mismatch
// is a schedule bug the pair-order tests catch, not a user error this backend reports.
// Ordering with compute: the rank's stream waits (on the GPU) for the work queued so far on the
// legacy default stream before each launch (Comm::after_legacy), so device buffers are read and
// written after the kernels and copies that the caller queued before posting.
//
// Collectives are NCCL's (native_collectives): collectives.cpp counts the messages of its own
// algorithm so Stats read as on every backend. Host buffers (split's agreement, gather_stats)
// are staged through device memory and the call completes before it returns.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "longseq/comm/group_impl.hpp"
#include "longseq/comm/nccl_backend.hpp"

namespace longseq::comm {
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    core::fail("comm", "nccl backend: ", what, ": ", cudaGetErrorName(e), " (",
               cudaGetErrorString(e), ")");
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    core::fail("comm", "nccl backend: ", what, ": ", ncclGetErrorString(r), " (",
               ncclGetLastError(nullptr), ")");
}

int gpu_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

bool on_device(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

ncclDataType_t nccl_type(core::DType dt) {
  switch (dt) {
    case core::DType::f32:
      return ncclFloat32;
    case core::DType::bf16:
      return ncclBfloat16;
    case core::DType::f64:
      return ncclFloat64;
    case core::DType::i32:
      return ncclInt32;
    case core::DType::i64:
      return ncclInt64;
    case core::DType::u8:
      return ncclUint8;
    default:
      break;
  }
  core::fail("comm", "nccl backend: no NCCL type for dtype ", core::dtype_name(dt));
}

/// One communicator with its stream (a rank's groups share the world's stream: one order for
/// every operation of the rank, so the order rule across sub-groups is the call order).
struct Comm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool owns_stream = false;
  int world_rank = 0;
  cudaEvent_t legacy = nullptr;
  Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm() {
    if (comm) ncclCommDestroy(comm);
    if (legacy) cudaEventDestroy(legacy);
    if (owns_stream && stream) cudaStreamDestroy(stream);
  }
  /// Orders `stream` after the work queued so far on the legacy default stream, before any
  /// launch: the model's kernels and core's copies run there, so a buffer handed to a send holds
  /// what they wrote only once they ran, and a buffer handed to a receive may be a block of the
  /// memory pool that work queued there still reads (kernels/cuda/device.hpp). One event record
  /// and one stream wait; the GPU waits, the host does not.
  void after_legacy() {
    if (!legacy)
      check_cuda(cudaEventCreateWithFlags(&legacy, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(legacy, cudaStreamLegacy), "cudaEventRecord (legacy stream)");
    check_cuda(cudaStreamWaitEvent(stream, legacy, 0), "cudaStreamWaitEvent");
  }
};

/// Device memory for staging, freed at scope exit.
struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(size_t bytes) {
    if (bytes > 0) check_cuda(cudaMalloc(&p, bytes), "cudaMalloc (staging)");
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() {
    if (p) cudaFree(p);
  }
};

/// The completion of one launch: an event recorded on the stream after it.
struct Launch {
  cudaEvent_t event = nullptr;
  ~Launch() {
    if (event) cudaEventDestroy(event);
  }
};

class NcclGroupImpl;

class NcclRequest final : public Request::Impl {
 public:
  NcclRequest(std::shared_ptr<NcclGroupImpl> g, std::shared_ptr<Launch> launch)
      : g_(std::move(g)), launch_(std::move(launch)) {}
  void wait() override;
  bool test() override;

 private:
  std::shared_ptr<NcclGroupImpl> g_;
  std::shared_ptr<Launch> launch_;
};

class NcclGroupImpl final : public GroupImpl, public std::enable_shared_from_this<NcclGroupImpl> {
 public:
  NcclGroupImpl(std::shared_ptr<Comm> comm, std::vector<int> world_ranks, int rank,
                Topology topology, uint32_t gid, std::shared_ptr<RankState> rs, double timeout_s)
      : GroupImpl(std::move(world_ranks), rank, std::move(topology), gid, std::move(rs), timeout_s),
        comm_(std::move(comm)),
        next_(std::make_shared<Launch>()) {}

  std::string_view backend() const override { return "nccl"; }
  bool native_collectives() const override { return true; }

  /// A sub-communicator: member 0 makes NCCL's unique id and sends it to the others over this
  /// group's communicator (device staging), then the members initialise it together.
  std::shared_ptr<GroupImpl> make_child(std::vector<int> members, int rank, uint32_t gid) override {
    ncclUniqueId id{};
    const int n = static_cast<int>(members.size());
    if (n > 1) {
      if (rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      DeviceBytes dev(sizeof id);
      flush();
      if (rank == 0) {
        check_cuda(cudaMemcpy(dev.p, &id, sizeof id, cudaMemcpyHostToDevice), "cudaMemcpy (id)");
        check_nccl(ncclGroupStart(), "ncclGroupStart");
        for (int m = 1; m < n; ++m)
          check_nccl(ncclSend(dev.p, sizeof id, ncclUint8, members[static_cast<size_t>(m)],
                              comm_->comm, comm_->stream),
                     "ncclSend (sub-group id)");
        check_nccl(ncclGroupEnd(), "ncclGroupEnd");
      } else {
        check_nccl(ncclRecv(dev.p, sizeof id, ncclUint8, members[0], comm_->comm, comm_->stream),
                   "ncclRecv (sub-group id)");
      }
      check_cuda(cudaStreamSynchronize(comm_->stream), "cudaStreamSynchronize (sub-group id)");
      if (rank != 0)
        check_cuda(cudaMemcpy(&id, dev.p, sizeof id, cudaMemcpyDeviceToHost), "cudaMemcpy (id)");
    } else {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    }
    auto child = std::make_shared<Comm>();
    child->stream = comm_->stream;
    child->world_rank = comm_->world_rank;
    check_nccl(ncclCommInitRank(&child->comm, n, id, rank), "ncclCommInitRank (sub-group)");
    auto [world_ranks, topo] = child_layout(members);
    return std::make_shared<NcclGroupImpl>(std::move(child), std::move(world_ranks), rank,
                                           std::move(topo), gid, rank_state_ptr(), timeout_s());
  }

  /// Launches the queued operations as one NCCL group and records their event.
  void flush() {
    std::lock_guard<std::mutex> lk(mu_);
    if (queue_.empty()) return;
    comm_->after_legacy();
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (const Op& op : queue_) {
      if (op.send)
        check_nccl(ncclSend(op.sbuf, op.bytes, ncclUint8, op.peer, comm_->comm, comm_->stream),
                   "ncclSend");
      else
        check_nccl(ncclRecv(op.rbuf, op.bytes, ncclUint8, op.peer, comm_->comm, comm_->stream),
                   "ncclRecv");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    queue_.clear();
    record(*next_);
    next_ = std::make_shared<Launch>();
  }

  /// Blocks until `l` has completed, polling NCCL's asynchronous errors, for at most the
  /// group's timeout.
  void wait_for(const Launch& l) {
    const auto start = std::chrono::steady_clock::now();
    while (!poll(l)) {
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
          timeout_s())
        throw RankFailed(comm_->world_rank, core::cat("[comm] nccl: a wait exceeded the group's ",
                                                      timeout_s(), " s timeout"));
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  /// True once `l` has completed.
  bool poll(const Launch& l) {
    if (l.event == nullptr) return true;  // nothing was launched (0-byte messages)
    const cudaError_t e = cudaEventQuery(l.event);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) check_cuda(e, "cudaEventQuery");
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm_->comm, &async), "ncclCommGetAsyncError");
    check_nccl(async, "asynchronous error");
    return false;
  }

  Request post_collective(const CollectiveCall& c) override {
    using Kind = CollectiveCall::Kind;
    flush();
    const int p = size();
    const size_t es = core::dtype_size(c.dt);
    // Bytes of the input and output as Group's contract sizes them.
    size_t in_bytes = 0, out_bytes = 0;
    switch (c.kind) {
      case Kind::all_gather:
        in_bytes = c.count * es;
        out_bytes = c.count * es * static_cast<size_t>(p);
        break;
      case Kind::reduce_scatter:
        in_bytes = c.count * es * static_cast<size_t>(p);
        out_bytes = c.count * es;
        break;
      case Kind::all_reduce:
      case Kind::broadcast:
        in_bytes = out_bytes = c.count * es;
        break;
      case Kind::all_to_all:
        in_bytes = out_bytes = c.count * es * static_cast<size_t>(p);
        break;
      case Kind::all_to_all_v:
        for (int q = 0; q < p; ++q) {
          const auto uq = static_cast<size_t>(q);
          in_bytes = std::max(in_bytes, (c.send_displs[uq] + c.send_counts[uq]) * es);
          out_bytes = std::max(out_bytes, (c.recv_displs[uq] + c.recv_counts[uq]) * es);
        }
        break;
      case Kind::barrier:
        break;
    }
    // Host buffers go through device copies; the call then completes before returning.
    const bool host_in = in_bytes > 0 && !on_device(c.in);
    const bool host_out = out_bytes > 0 && !on_device(c.out);
    const bool same = c.in == c.out;
    DeviceBytes din(host_in ? in_bytes : 0);
    DeviceBytes dout(host_out && !(same && host_in) ? out_bytes : 0);
    const void* in = host_in ? din.p : c.in;
    void* out = host_out ? (same && host_in ? din.p : dout.p) : c.out;
    if (host_in) check_cuda(cudaMemcpy(din.p, c.in, in_bytes, cudaMemcpyHostToDevice), "staging");
    // A staged in-place call (all_gather's input inside its output) runs out of place on the
    // device: the same result.
    const ncclDataType_t t = nccl_type(c.dt);
    const ncclRedOp_t op = c.op == ReduceOp::sum ? ncclSum : ncclMax;
    ncclComm_t comm = comm_->comm;
    cudaStream_t s = comm_->stream;
    comm_->after_legacy();
    DeviceBytes flag(c.kind == Kind::barrier ? sizeof(int) : 0);
    switch (c.kind) {
      case Kind::all_gather:
        check_nccl(ncclAllGather(in, out, c.count, t, comm, s), "ncclAllGather");
        break;
      case Kind::reduce_scatter:
        check_nccl(ncclReduceScatter(in, out, c.count, t, op, comm, s), "ncclReduceScatter");
        break;
      case Kind::all_reduce:
        check_nccl(ncclAllReduce(in, out, c.count, t, op, comm, s), "ncclAllReduce");
        break;
      case Kind::broadcast:
        check_nccl(ncclBroadcast(in, out, c.count, t, c.root, comm, s), "ncclBroadcast");
        break;
      case Kind::all_to_all:
      case Kind::all_to_all_v: {
        // Grouped send/receive with every rank, this one included (NCCL copies to itself).
        const auto* i = static_cast<const std::byte*>(in);
        auto* o = static_cast<std::byte*>(out);
        check_nccl(ncclGroupStart(), "ncclGroupStart");
        for (int q = 0; q < p; ++q) {
          const auto uq = static_cast<size_t>(q);
          const bool v = c.kind == Kind::all_to_all_v;
          const size_t sn = (v ? c.send_counts[uq] : c.count) * es;
          const size_t rn = (v ? c.recv_counts[uq] : c.count) * es;
          const size_t so = (v ? c.send_displs[uq] : uq * c.count) * es;
          const size_t ro = (v ? c.recv_displs[uq] : uq * c.count) * es;
          if (sn > 0) check_nccl(ncclSend(i + so, sn, ncclUint8, q, comm, s), "ncclSend");
          if (rn > 0) check_nccl(ncclRecv(o + ro, rn, ncclUint8, q, comm, s), "ncclRecv");
        }
        check_nccl(ncclGroupEnd(), "ncclGroupEnd");
        break;
      }
      case Kind::barrier:
        check_nccl(ncclAllReduce(flag.p, flag.p, 1, ncclInt32, ncclSum, comm, s),
                   "ncclAllReduce (barrier)");
        break;
    }
    auto launch = std::make_shared<Launch>();
    record(*launch);
    if (host_in || host_out || c.kind == Kind::barrier) {
      wait_for(*launch);
      if (host_out)
        check_cuda(cudaMemcpy(c.out, out, out_bytes, cudaMemcpyDeviceToHost), "staging back");
      return {};
    }
    return Request(std::make_shared<NcclRequest>(shared_from_this(), std::move(launch)));
  }

 protected:
  Request post_send(uint32_t, int dst, int, const void* data, size_t bytes) override {
    return queue({true, dst, data, nullptr, bytes});
  }
  Request post_recv(uint32_t, int src, int, void* data, size_t bytes) override {
    return queue({false, src, nullptr, data, bytes});
  }
  /// A grouped step: queued with whatever is pending and launched at once.
  void post_batch(uint32_t channel, std::span<const SendSpec> sends,
                  std::span<const RecvSpec> recvs, std::vector<Request>& out, bool) override {
    for (const SendSpec& s : sends)
      out.push_back(post_send(channel, s.peer, s.tag, s.data, s.bytes));
    for (const RecvSpec& r : recvs)
      out.push_back(post_recv(channel, r.peer, r.tag, r.data, r.bytes));
    flush();
  }

 private:
  struct Op {
    bool send;
    int peer;
    const void* sbuf;
    void* rbuf;
    size_t bytes;
  };

  Request queue(const Op& op) {
    if (op.bytes == 0) return {};  // both ends know the size, so both skip it
    const void* p = op.send ? op.sbuf : op.rbuf;
    core::require(on_device(p), "comm", "nccl: ", op.send ? "isend" : "irecv", " of ", op.bytes,
                  " bytes ", op.send ? "to" : "from", " rank ", op.peer,
                  " names host memory; the nccl backend moves device memory only (cudaMalloc)");
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(op);
    return Request(std::make_shared<NcclRequest>(shared_from_this(), next_));
  }
  void record(Launch& l) {
    check_cuda(cudaEventCreateWithFlags(&l.event, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(l.event, comm_->stream), "cudaEventRecord");
  }

  std::shared_ptr<Comm> comm_;
  std::mutex mu_;
  std::vector<Op> queue_;
  std::shared_ptr<Launch> next_;  // the launch the queued operations will be part of
};

void NcclRequest::wait() {
  g_->flush();
  g_->wait_for(*launch_);
}

bool NcclRequest::test() {
  g_->flush();
  return g_->poll(*launch_);
}

/// The world group of this process's rank `rank` of topo.size() ranks on GPU `device`, NCCL's id
/// from rank 0 (blocks in ncclCommInitRank until every rank has come).
Group world_group(int rank, const Topology& topo, int device, double timeout_s,
                  const ncclUniqueId& id) {
  const int p = topo.size();
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  auto comm = std::make_shared<Comm>();
  comm->world_rank = rank;
  check_cuda(cudaStreamCreateWithFlags(&comm->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  comm->owns_stream = true;
  check_nccl(ncclCommInitRank(&comm->comm, p, id, rank), "ncclCommInitRank");
  std::vector<int> world_ranks(static_cast<size_t>(p));
  for (int q = 0; q < p; ++q) world_ranks[static_cast<size_t>(q)] = q;
  auto state = std::make_shared<RankState>();
  state->world_rank = rank;
  state->world_node = topo.node(rank);
  return Group(std::make_shared<NcclGroupImpl>(std::move(comm), std::move(world_ranks), rank, topo,
                                               1, std::move(state), timeout_s));
}

/// The world group of this process: rank `rank` on the nodes `topo`, its GPU its index among
/// its node's ranks, NCCL's id from rank 0.
void run_world(int rank, const Topology& topo, double timeout_s, const ncclUniqueId& id,
               const std::function<void(Group&)>& fn) {
  std::vector<int> node_ranks;
  int me = 0;
  for (int q = 0; q < topo.size(); ++q)
    if (topo.node(q) == topo.node(rank)) {
      if (q == rank) me = static_cast<int>(node_ranks.size());
      node_ranks.push_back(q);
    }
  Group g = world_group(rank, topo, nccl_device_of(node_ranks, me, gpu_count()), timeout_s, id);
  fn(g);
  g.barrier();  // every rank's operations are complete before the communicator goes
}

/// open_nccl_world's world. NCCL has no channel of ours to agree on an outcome (the MPI
/// backend's control messages), so close() agrees by a barrier when this rank did not fail,
/// and a failed rank reports itself without waiting for peers that may never come.
class NcclOpenWorld final : public OpenWorld {
 public:
  NcclOpenWorld(int rank, const Topology& topo, int device, double timeout_s,
                const ncclUniqueId& id)
      : rank_(rank), group_(world_group(rank, topo, device, timeout_s, id)) {}
  ~NcclOpenWorld() override { release_unclosed(closed_); }
  Group& group() override { return group_; }
  void fail(const std::string& message) override {
    if (failure_.empty()) failure_ = message.empty() ? std::string("failed") : message;
  }
  void close() override {
    core::require(!closed_, "comm", "close() of a world that is already closed");
    closed_ = true;
    // The communicator goes with `g` on every path, a throwing barrier's included.
    Group g = std::exchange(group_, Group());
    if (!failure_.empty()) throw RankFailed(rank_, failure_);
    g.barrier();  // every rank's operations are complete before the communicator goes
  }

 private:
  int rank_;
  Group group_;
  std::string failure_;
  bool closed_ = false;
};

}  // namespace

bool nccl_built() {
  return true;
}

void nccl_init() {
  core::require(gpu_count() > 0, "comm", "the nccl backend needs a GPU; none is visible");
}

int nccl_world_size(const Options& options) {
  if (launched_by_mpirun()) return find_backend("mpi")->world_size(options);
  return std::max(options.world, 1);
}

void run_nccl_world(const Options& options, const std::function<void(Group&)>& fn) {
  nccl_init();
  if (!launched_by_mpirun()) {
    const int world = std::max(options.world, 1);
    std::vector<int> ranks(static_cast<size_t>(world));
    for (int q = 0; q < world; ++q) ranks[static_cast<size_t>(q)] = q;
    nccl_device_of(ranks, 0, gpu_count());  // two ranks on one GPU: refused naming them
    core::require(world == 1, "comm", "nccl: --world ", world, " without mpirun; start ", world,
                  " processes with mpirun -np ", world, " (one rank per process and GPU)");
    ncclUniqueId id{};
    check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    try {
      run_world(0, Topology(1), options.timeout_s, id, fn);
    } catch (const RankFailed&) {
      throw;
    } catch (const std::exception& e) {
      throw RankFailed(0, e.what());
    }
    return;
  }
  // Under mpirun: the MPI backend starts the world (and agrees on its outcome); rank 0's id
  // reaches the others by an MPI broadcast of host memory.
  const BackendEntry& mpi = resolve_backend("mpi");
  mpi.init();
  mpi.run(options, [&](Group& boot) {
    ncclUniqueId id{};
    if (boot.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    boot.broadcast(&id, sizeof id, core::DType::u8, 0);
    run_world(boot.rank(), boot.topology(), options.timeout_s, id, fn);
  });
}

std::string nccl_unique_id() {
  static_assert(sizeof(ncclUniqueId) == kNcclIdBytes);
  ncclUniqueId id{};
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

std::unique_ptr<OpenWorld> open_nccl_world(const std::string& id, int rank, const Topology& topo,
                                           int device, double timeout_s) {
  core::require(id.size() == kNcclIdBytes, "comm", "nccl: the unique id has ", id.size(),
                " bytes, NCCL's has ", kNcclIdBytes);
  core::require(rank >= 0 && rank < topo.size(), "comm", "nccl: rank ", rank, " of a world of ",
                topo.size());
  core::require(timeout_s > 0.0, "comm", "timeout ", timeout_s, " s must be positive");
  const int gpus = gpu_count();
  core::require(gpus > 0, "comm", "the nccl backend needs a GPU; none is visible");
  core::require(device >= 0 && device < gpus, "comm", "nccl: GPU ", device, " of rank ", rank,
                " is not one of the ", gpus, " visible");
  ncclUniqueId nid{};
  std::memcpy(&nid, id.data(), sizeof nid);
  return std::make_unique<NcclOpenWorld>(rank, topo, device, timeout_s, nid);
}

}  // namespace longseq::comm
