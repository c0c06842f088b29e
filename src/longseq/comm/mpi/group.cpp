// The MPI backend's GroupImpl: a group is (the world's communicator, a group id) and a step's
// sends and receives are posted together (world.hpp tells the addressing).
#include "longseq/comm/mpi/runtime.hpp"
#include "longseq/comm/mpi/world.hpp"
#include "longseq/core/device.hpp"

namespace longseq::comm::mpi_impl {

namespace {

class MpiGroupImpl final : public GroupImpl {
 public:
  MpiGroupImpl(std::shared_ptr<MpiWorld> world, std::vector<int> world_ranks, int rank,
               Topology topology, uint32_t gid, std::shared_ptr<RankState> rs)
      : GroupImpl(std::move(world_ranks), rank, std::move(topology), gid, std::move(rs),
                  world->timeout_s),
        world_(std::move(world)) {
    core::require(2 * gid + 1 < kMaxChannel, "comm", "group id ", gid, " exceeds the ",
                  kMaxChannel / 2, " groups the MPI tag space can address per run");
  }

  std::string_view backend() const override { return "mpi"; }

  std::shared_ptr<GroupImpl> make_child(std::vector<int> members, int rank, uint32_t gid) override {
    auto [world_ranks, topo] = child_layout(members);
    return std::make_shared<MpiGroupImpl>(world_, std::move(world_ranks), rank, std::move(topo),
                                          gid, rank_state_ptr());
  }

 protected:
  Request post_send(uint32_t channel, int dst, int tag, const void* data, size_t bytes) override {
    std::vector<Request> out;
    const SendSpec s{dst, data, bytes, tag};
    post_batch(channel, std::span<const SendSpec>(&s, 1), {}, out, false);
    return out.front();
  }
  Request post_recv(uint32_t channel, int src, int tag, void* data, size_t bytes) override {
    std::vector<Request> out;
    const RecvSpec r{src, data, bytes, tag};
    post_batch(channel, {}, std::span<const RecvSpec>(&r, 1), out, false);
    return out.front();
  }

  /// Posts the whole step together.
  void post_batch(uint32_t channel, std::span<const SendSpec> sends,
                  std::span<const RecvSpec> recvs, std::vector<Request>& out,
                  bool wait_now) override {
    {
      std::lock_guard<std::mutex> lk(world_->mu);
      if (world_->failed) throw RankFailed(world_->failed_rank, world_->failure);
    }
    // Before anything of the step is posted, so a refused step leaves no message behind.
    for (const SendSpec& s : sends) require_host(true, s.peer, s.tag, s.data, s.bytes);
    for (const RecvSpec& r : recvs) require_host(false, r.peer, r.tag, r.data, r.bytes);
    std::vector<std::shared_ptr<MpiOp>> ops;
    auto make = [&](bool is_send, int peer, int tag, const void* sbuf, void* rbuf, size_t bytes) {
      auto op = std::make_shared<MpiOp>();
      op->is_send = is_send;
      op->me_g = rank();
      op->me_w = world_rank(rank());
      op->peer_g = peer;
      op->peer_w = world_rank(peer);
      op->tag = tag;
      op->mtag = static_cast<int>((channel << kTagBits) | static_cast<uint32_t>(tag));
      op->sbuf = sbuf;
      op->rbuf = rbuf;
      op->bytes = bytes;
      op->chunk = world_->chunk_bytes;
      ops.push_back(op);
      out.push_back(make_request(world_, op));
    };
    for (const SendSpec& s : sends) make(true, s.peer, s.tag, s.data, nullptr, s.bytes);
    for (const RecvSpec& r : recvs) make(false, r.peer, r.tag, nullptr, r.data, r.bytes);
    // Posted here when the baton is free (the sends start now, not when the progress thread
    // next looks); with `wait_now` the caller's wait drives them, so the sleeping progress thread
    // is not woken for nothing.
    Runtime& rt = Runtime::get();
    if (rt.try_with_baton([&] { start_ops(world_, ops); })) {
      if (!wait_now) rt.wake();
    } else {
      rt.submit([world = world_, ops = std::move(ops)] { start_ops(world, ops); });
    }
  }

 private:
  /// MPI_Isend / MPI_Irecv would read or write device memory on the host (this build's MPI is
  /// not assumed CUDA-aware), so device buffers are refused by name. core::locate costs one flag
  /// check in a process that registered no device backend; empty messages touch no memory.
  void require_host(bool is_send, int peer, int tag, const void* data, size_t bytes) const {
    if (bytes == 0) return;
    const core::Device d = core::locate(data);
    if (d.is_cpu()) return;
    core::fail("comm", "mpi: the ", bytes, " bytes at ", data, " that ",
               rank_name(rank(), world_rank(rank())), is_send ? " sends to " : " receives from ",
               rank_name(peer, world_rank(peer)), " (tag ", tag, ") are on ", d.str(),
               "; the MPI backend takes host memory (stage through the host)");
  }

  std::shared_ptr<MpiWorld> world_;
};

}  // namespace

std::shared_ptr<GroupImpl> make_group(std::shared_ptr<MpiWorld> world, std::vector<int> world_ranks,
                                      int rank, Topology topology, uint32_t gid,
                                      std::shared_ptr<RankState> rs) {
  return std::make_shared<MpiGroupImpl>(std::move(world), std::move(world_ranks), rank,
                                        std::move(topology), gid, std::move(rs));
}

}  // namespace longseq::comm::mpi_impl
