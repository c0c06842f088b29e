// Collectives written once over the point-to-point layer (Channel::collective), so every backend
// counts their bytes exactly and reports their failures like user traffic.
//
// Algorithms (P ranks, n bytes per rank block):
//   all_gather      ring, P-1 steps: rank r sends block (r-s) to r+1, receives block (r-s-1).
//   reduce_scatter  ring, P-1 steps: partial sums travel r -> r+1 and each rank adds its own
//                   block; block r ends fully reduced on rank r.
//   all_reduce      reduce_scatter + all_gather over P near-equal blocks (ring, 2(P-1) steps);
//                   each block is reduced on one rank only, so every rank gets identical bits.
//   all_to_all      one grouped step: P-1 sends and P-1 receives posted together.
//   broadcast       binomial tree rooted at `root` (ceil(log2 P) rounds, P-1 messages).
//   barrier         dissemination: round k sends an empty message to r+2^k, receives from r-2^k.
// Ring steps are bandwidth-optimal ((P-1)/P of the data per rank, nccl-tests' busBw); the
// latency-bound small-message cases would prefer trees, which the planner can weigh later.
//
// One implementation: each algorithm is a StepRequest (its steps' messages and the work after
// each step); the posted forms (iall_gather, ...) return it with step 0 in flight, the blocking
// forms post it and wait at once.
//
// Backends with collectives of their own (GroupImpl::native_collectives: nccl, whose transport
// has no tags and whose buffers the host cannot reduce) get the call instead (post_collective);
// the messages of the algorithm here are counted all the same (count_steps), so Stats read alike
// on every backend (docs/comm.md "Byte accounting").
//
// Device memory: all_gather, all_to_all(_v), broadcast and barrier only move bytes, through the
// point-to-point layer and copy_if_distinct (core::copy_any), so they take GPU buffers wherever
// the backend's messages do (local: copied by the device backend; mpi: refused when posted).
// reduce_scatter and all_reduce add on the host and refuse device buffers by name
// (require_host_buffers); their partials live in host scratch.
#include <algorithm>
#include <array>
#include <functional>
#include <memory>
#include <utility>

#include "longseq/comm/group.hpp"
#include "longseq/comm/group_impl.hpp"
#include "longseq/core/device.hpp"

namespace longseq::comm {
namespace {

using core::DType;
using Kind = CollectiveCall::Kind;

CollectiveCall call_of(Kind kind, const void* in, void* out, size_t count, DType dt,
                       ReduceOp op = ReduceOp::sum, int root = 0) {
  CollectiveCall c;
  c.kind = kind;
  c.in = in;
  c.out = out;
  c.count = count;
  c.dt = dt;
  c.op = op;
  c.root = root;
  return c;
}

template <class T, class Op>
void combine_typed(void* dst, const void* a, const void* b, size_t n, Op op) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = op(x[i], y[i]);
}

template <class Op>
void combine_bf16(void* dst, const void* a, const void* b, size_t n, Op op) {
  auto* d = static_cast<core::bf16*>(dst);
  const auto* x = static_cast<const core::bf16*>(a);
  const auto* y = static_cast<const core::bf16*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = core::to_bf16(op(core::to_f32(x[i]), core::to_f32(y[i])));
}

/// dst[i] = a[i] op b[i]; dst may alias a or b.
void combine(void* dst, const void* a, const void* b, size_t n, DType dt, ReduceOp op) {
  auto run = [&](auto fn) {
    switch (dt) {
      case DType::f32:
        return combine_typed<float>(dst, a, b, n, fn);
      case DType::f64:
        return combine_typed<double>(dst, a, b, n, fn);
      case DType::i32:
        return combine_typed<int32_t>(dst, a, b, n, fn);
      case DType::i64:
        return combine_typed<int64_t>(dst, a, b, n, fn);
      case DType::bf16:
        return combine_bf16(dst, a, b, n, fn);
      default:
        break;
    }
    core::fail("comm", "reduction over dtype ", core::dtype_name(dt),
               " (raw bytes cannot be reduced; use f32, bf16, f64, i32 or i64)");
  };
  if (op == ReduceOp::sum)
    run([](auto x, auto y) { return x + y; });
  else
    run([](auto x, auto y) { return std::max(x, y); });
}

void require_reducible(DType dt) {
  core::require(dt == DType::f32 || dt == DType::bf16 || dt == DType::f64 || dt == DType::i32 ||
                    dt == DType::i64,
                "comm", "reduction over dtype ", core::dtype_name(dt),
                " (raw bytes cannot be reduced; use f32, bf16, f64, i32 or i64)");
}

int mod(int a, int p) {
  return ((a % p) + p) % p;
}

/// P blocks of a buffer: block q is `count[q]` elements at element offset `offset[q]`.
struct Blocks {
  std::vector<size_t> offset, count;
  size_t max_count() const { return *std::max_element(count.begin(), count.end()); }
};

Blocks equal_blocks(int p, size_t count) {
  Blocks b;
  for (int q = 0; q < p; ++q) {
    b.offset.push_back(static_cast<size_t>(q) * count);
    b.count.push_back(count);
  }
  return b;
}

Blocks split_blocks(int p, size_t count) {
  Blocks b;
  for (int q = 0; q < p; ++q) {
    const size_t lo = count * static_cast<size_t>(q) / static_cast<size_t>(p);
    const size_t hi = count * static_cast<size_t>(q + 1) / static_cast<size_t>(p);
    b.offset.push_back(lo);
    b.count.push_back(hi - lo);
  }
  return b;
}

/// Host or device memory alike (core::copy_any): the copy-only collectives work on GPU buffers
/// of the local backend, whose messages are copied by the device backend too.
void copy_if_distinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) core::copy_any(dst, src, bytes);
}

/// The reductions here add blocks with the CPU (combine), which would read device pointers on
/// the host: refuse device memory by name instead. Checked for every world size and count, even
/// where no element is added (a group of 1 only copies), so that a call which works on 1 rank
/// does not start failing on 2.
void require_host_buffers(const GroupImpl& g, const char* collective, const void* in,
                          const void* out) {
  for (const auto& [name, ptr] : {std::pair{"in", in}, std::pair{"out", out}}) {
    const core::Device d = core::locate(ptr);
    core::require(d.is_cpu(), "comm", collective, " reduces on the host: its buffer ", name,
                  " is on ", d.str(), " (the ", g.backend(),
                  " backend adds the blocks with the CPU; copy them to host memory first, or "
                  "use the nccl backend, which reduces on the GPU)");
  }
}

/// Tags of the collective channel: the collective's slot (its sequence number on the group mod
/// kCollectiveSlots) above the algorithm's own tag (a ring step, a barrier round), so collectives
/// in flight together never match each other's messages even when ranks advance them in
/// different orders.
constexpr int kSlotShift = 16;
constexpr int kCollectiveSlots = kMaxTag >> kSlotShift;

/// A collective in flight: `steps` steps of point-to-point messages on the collective channel.
/// Step s is posted once step s-1 has completed and its `after` work (a reduction, say) has run;
/// test() and wait() advance it, so between post and wait step 0 moves by itself and the caller's
/// test() calls start the later ones.
///
/// Ranks may wait for their posted collectives in different orders; a rank blocked in one would
/// then never advance the others that its peers are blocked in. So wait() first completes every
/// collective posted before it on the group: a rank blocked anywhere drives the earliest one it
/// has not finished, and the earliest one unfinished anywhere always completes.
class StepRequest final : public Request::Impl {
 public:
  using Specs = std::function<void(int step, std::vector<SendSpec>&, std::vector<RecvSpec>&)>;
  using After = std::function<void(int step)>;

  /// Takes the group's next slot (every rank calls the same collectives in the same order, so
  /// every rank gets the same one) and posts step 0. Fails (user error) when kCollectiveSlots
  /// are already in flight, since the next one would reuse a slot still in use.
  static std::shared_ptr<StepRequest> start(std::shared_ptr<GroupImpl> g, int steps, Specs specs,
                                            After after, bool wait_now) {
    auto req = std::shared_ptr<StepRequest>(
        new StepRequest(std::move(g), steps, std::move(specs), std::move(after)));
    GroupImpl& gi = *req->g_;
    {
      std::lock_guard<std::mutex> lk(gi.collectives_mu);
      core::require(gi.collectives_in_flight.size() < kCollectiveSlots, "comm",
                    "a collective with ", kCollectiveSlots,
                    " already in flight on this group (wait for one first)");
      req->base_tag_ = static_cast<int>(gi.collective_seq++ % kCollectiveSlots) << kSlotShift;
      gi.collectives_in_flight.emplace_back(req.get(), req);
    }
    req->post(wait_now);  // on failure the destructor unregisters it
    return req;
  }
  ~StepRequest() override { release(); }
  StepRequest(const StepRequest&) = delete;
  StepRequest& operator=(const StepRequest&) = delete;

  void wait() override {
    if (done_) return;
    for (const auto& earlier : posted_before()) earlier->wait();
    advance(true);
  }
  bool test() override { return advance(false); }

 private:
  StepRequest(std::shared_ptr<GroupImpl> g, int steps, Specs specs, After after)
      : g_(std::move(g)), steps_(steps), specs_(std::move(specs)), after_(std::move(after)) {}

  std::vector<std::shared_ptr<Request::Impl>> posted_before() const {
    std::vector<std::shared_ptr<Request::Impl>> out;
    std::lock_guard<std::mutex> lk(g_->collectives_mu);
    for (const auto& [raw, weak] : g_->collectives_in_flight) {
      if (raw == this) break;
      if (auto p = weak.lock()) out.push_back(std::move(p));
    }
    return out;
  }
  void post(bool wait_now) {
    std::vector<SendSpec> sends;
    std::vector<RecvSpec> recvs;
    specs_(cur_, sends, recvs);
    for (SendSpec& s : sends) s.tag += base_tag_;
    for (RecvSpec& r : recvs) r.tag += base_tag_;
    g_->post_step(Channel::collective, sends, recvs, reqs_, wait_now);
  }
  bool advance(bool block) {
    while (!done_) {
      if (block) {
        wait_all(reqs_);
      } else {
        for (Request& r : reqs_)
          if (!r.test()) return false;
      }
      reqs_.clear();
      if (after_) after_(cur_);
      if (++cur_ == steps_) {
        release();
        done_ = true;
        break;
      }
      post(block);
    }
    return true;
  }
  void release() {
    std::lock_guard<std::mutex> lk(g_->collectives_mu);
    std::erase_if(g_->collectives_in_flight, [&](const auto& e) { return e.first == this; });
  }

  std::shared_ptr<GroupImpl> g_;
  int base_tag_ = 0;
  int steps_;
  int cur_ = 0;
  bool done_ = false;
  Specs specs_;
  After after_;
  std::vector<Request> reqs_;
};

/// At most one send and one receive per step; empty sides are skipped (both ends know the block
/// sizes, so they skip the same messages).
void one_each(std::vector<SendSpec>& sends, std::vector<RecvSpec>& recvs, int tag, int dst,
              const void* sbuf, size_t sbytes, int src, void* rbuf, size_t rbytes) {
  if (sbytes > 0) sends.push_back({dst, sbuf, sbytes, tag});
  if (rbytes > 0) recvs.push_back({src, rbuf, rbytes, tag});
}

using Specs = std::function<void(int step, std::vector<SendSpec>&, std::vector<RecvSpec>&)>;

/// Counts the messages of steps 0 .. steps-1 of `specs` without posting them (native
/// collectives). The specs' buffers are never touched.
void count_steps(GroupImpl& g, int steps, const Specs& specs) {
  for (int s = 0; s < steps; ++s) {
    std::vector<SendSpec> sends;
    std::vector<RecvSpec> recvs;
    specs(s, sends, recvs);
    g.count_only(sends, recvs);
  }
}

/// The ring all-gather's steps over `out` (step 0 sends from `in`).
Specs all_gather_specs(int p, int r, const std::byte* in, std::byte* out, const Blocks& b,
                       size_t es) {
  const int next = mod(r + 1, p), prev = mod(r - 1, p);
  return [=](int s, std::vector<SendSpec>& sends, std::vector<RecvSpec>& recvs) {
    const auto sb = static_cast<size_t>(mod(r - s, p));
    const auto rb = static_cast<size_t>(mod(r - s - 1, p));
    const std::byte* sbuf = s == 0 ? in : out + b.offset[sb] * es;
    one_each(sends, recvs, s, next, sbuf, b.count[sb] * es, prev, out + b.offset[rb] * es,
             b.count[rb] * es);
  };
}

/// The ring reduce-scatter's steps: step s receives into at[s % 2] and forwards at[(s-1) % 2].
Specs reduce_scatter_specs(int p, int r, const std::byte* in, std::array<std::byte*, 2> at,
                           const Blocks& b, size_t es) {
  const int next = mod(r + 1, p), prev = mod(r - 1, p);
  return [=](int s, std::vector<SendSpec>& sends, std::vector<RecvSpec>& recvs) {
    const auto sb = static_cast<size_t>(mod(r - s - 1, p));
    const auto rb = static_cast<size_t>(mod(r - s - 2, p));
    // Step 0 sends this rank's own block; later steps forward the partial reduced last step.
    const std::byte* sbuf = s == 0 ? in + b.offset[sb] * es : at[static_cast<size_t>((s - 1) % 2)];
    one_each(sends, recvs, s, next, sbuf, b.count[sb] * es, prev, at[static_cast<size_t>(s % 2)],
             b.count[rb] * es);
  };
}

/// All-to-all as one step: P-1 sends and P-1 receives.
Specs all_to_all_specs(int p, int r, const std::byte* in, std::byte* out, size_t block) {
  return [=](int, std::vector<SendSpec>& sends, std::vector<RecvSpec>& recvs) {
    for (int k = 1; k < p; ++k) {
      const int dst = mod(r + k, p), src = mod(r - k, p);
      sends.push_back({dst, in + static_cast<size_t>(dst) * block, block, 0});
      recvs.push_back({src, out + static_cast<size_t>(src) * block, block, 0});
    }
  };
}

/// Ring all-gather over `out`. This rank's block comes from `in` (which may be block r of out
/// itself): step 0 sends it straight from `in` and copies it into block r while the message
/// moves. Copying first and sending block r of `out` (as before) was often 1.5-2.5x slower
/// under MPI at P = 2 (all_gather 4 MiB at 0.38 of MPI_Allgather, 1 MiB at 0.62;
/// docs/cluster.md). Probable cause, not proven: the peer's single-copy read then hits the
/// buffer (the same pages, under transparent huge pages) that this rank's own receive writes.
/// The overlap itself gained nothing on 2 cores with 2 ranks when measured (1 MiB all_gather
/// 52-55 us either way, before waits drove MPI themselves), but it does where a rank has a
/// spare core. `b` is copied into the request.
Request ring_all_gather(const std::shared_ptr<GroupImpl>& gp, const std::byte* in, std::byte* out,
                        Blocks b, size_t es, bool wait_now) {
  const int p = gp->size(), r = gp->rank();
  std::byte* own = out + b.offset[static_cast<size_t>(r)] * es;
  const size_t own_bytes = b.count[static_cast<size_t>(r)] * es;
  auto req =
      StepRequest::start(gp, p - 1, all_gather_specs(p, r, in, out, b, es), nullptr, wait_now);
  copy_if_distinct(own, in, own_bytes);
  return Request(std::move(req));
}

/// Ring reduce-scatter: block r of the reduction of every rank's `in` lands at `result`.
/// `result` may be in + offset[r] (all_reduce in place). A blocking call (`wait_now`) keeps its
/// two partial blocks in the group's scratch; a posted one owns them.
Request ring_reduce_scatter(const std::shared_ptr<GroupImpl>& gp, const std::byte* in,
                            std::byte* result, Blocks b, size_t es, DType dt, ReduceOp op,
                            bool wait_now) {
  const int p = gp->size(), r = gp->rank();
  const size_t slot = b.max_count() * es;
  // tmp->at[s % 2] receives step s's partial; step s + 1 forwards it after adding this rank's
  // block. They must exist before the constructor posts step 0.
  struct Partials {
    std::unique_ptr<std::byte[]> owned;
    std::array<std::byte*, 2> at{};
  };
  auto tmp = std::make_shared<Partials>();
  std::byte* mem = wait_now ? gp->scratch(2 * slot) : nullptr;
  if (!mem) {
    tmp->owned.reset(new std::byte[std::max<size_t>(2 * slot, 1)]);
    mem = tmp->owned.get();
  }
  tmp->at = {mem, mem + slot};
  auto specs = reduce_scatter_specs(p, r, in, tmp->at, b, es);
  auto after = [=](int s) {
    const auto rb = static_cast<size_t>(mod(r - s - 2, p));
    std::byte* rbuf = tmp->at[s % 2];
    std::byte* dst = s == p - 2 ? result : rbuf;  // the last block received is block r
    combine(dst, rbuf, in + b.offset[rb] * es, b.count[rb], dt, op);
  };
  return Request(StepRequest::start(gp, p - 1, specs, after, wait_now));
}

/// All-to-all as one step: P-1 sends and P-1 receives posted together (this rank's own block is
/// the caller's copy).
Request all_to_all_step(const std::shared_ptr<GroupImpl>& gp, const std::byte* in, std::byte* out,
                        size_t block, bool wait_now) {
  const int p = gp->size(), r = gp->rank();
  return Request(
      StepRequest::start(gp, 1, all_to_all_specs(p, r, in, out, block), nullptr, wait_now));
}

}  // namespace

Request Group::iall_gather(const void* in, void* out, size_t count, DType dt) const {
  return post_all_gather(in, out, count, dt, /*wait_now=*/false);
}

Request Group::post_all_gather(const void* in, void* out, size_t count, DType dt,
                               bool wait_now) const {
  GroupImpl& g = impl();
  const size_t es = core::dtype_size(dt);
  auto* o = static_cast<std::byte*>(out);
  const size_t block = count * es;
  core::require((in != nullptr && out != nullptr) || count == 0, "comm",
                "all_gather with a null buffer");
  if (g.native_collectives()) {
    if (g.size() > 1 && count > 0)
      count_steps(g, g.size() - 1,
                  all_gather_specs(g.size(), g.rank(), static_cast<const std::byte*>(in), o,
                                   equal_blocks(g.size(), count), es));
    return g.post_collective(call_of(Kind::all_gather, in, out, count, dt));
  }
  if (g.size() == 1 || count == 0) {
    copy_if_distinct(o + static_cast<size_t>(g.rank()) * block, in, block);
    return {};
  }
  return ring_all_gather(impl_, static_cast<const std::byte*>(in), o, equal_blocks(g.size(), count),
                         es, wait_now);
}

void Group::all_gather(const void* in, void* out, size_t count, DType dt) const {
  post_all_gather(in, out, count, dt, /*wait_now=*/true).wait();
}

Request Group::ireduce_scatter(const void* in, void* out, size_t count, DType dt,
                               ReduceOp op) const {
  return post_reduce_scatter(in, out, count, dt, op, /*wait_now=*/false);
}

Request Group::post_reduce_scatter(const void* in, void* out, size_t count, DType dt, ReduceOp op,
                                   bool wait_now) const {
  GroupImpl& g = impl();
  require_reducible(dt);
  const size_t es = core::dtype_size(dt);
  if (g.native_collectives()) {
    if (g.size() > 1 && count > 0)
      count_steps(g, g.size() - 1,
                  reduce_scatter_specs(g.size(), g.rank(), static_cast<const std::byte*>(in), {},
                                       equal_blocks(g.size(), count), es));
    return g.post_collective(call_of(Kind::reduce_scatter, in, out, count, dt, op));
  }
  require_host_buffers(g, "reduce_scatter", in, out);
  if (g.size() == 1) {
    copy_if_distinct(out, in, count * es);
    return {};
  }
  if (count == 0) return {};
  return ring_reduce_scatter(impl_, static_cast<const std::byte*>(in), static_cast<std::byte*>(out),
                             equal_blocks(g.size(), count), es, dt, op, wait_now);
}

void Group::reduce_scatter(const void* in, void* out, size_t count, DType dt, ReduceOp op) const {
  post_reduce_scatter(in, out, count, dt, op, /*wait_now=*/true).wait();
}

void Group::all_reduce(const void* in, void* out, size_t count, DType dt, ReduceOp op) const {
  GroupImpl& g = impl();
  require_reducible(dt);
  const size_t es = core::dtype_size(dt);
  if (g.native_collectives()) {
    if (g.size() > 1 && count > 0) {
      const Blocks b = split_blocks(g.size(), count);
      const auto* i = static_cast<const std::byte*>(in);
      auto* o = static_cast<std::byte*>(out);
      count_steps(g, g.size() - 1, reduce_scatter_specs(g.size(), g.rank(), i, {}, b, es));
      count_steps(g, g.size() - 1, all_gather_specs(g.size(), g.rank(), o, o, b, es));
    }
    g.post_collective(call_of(Kind::all_reduce, in, out, count, dt, op)).wait();
    return;
  }
  require_host_buffers(g, "all_reduce", in, out);
  if (g.size() == 1) {
    copy_if_distinct(out, in, count * es);
    return;
  }
  if (count == 0) return;
  const Blocks b = split_blocks(g.size(), count);
  auto* o = static_cast<std::byte*>(out);
  const size_t mine = b.offset[static_cast<size_t>(g.rank())] * es;
  ring_reduce_scatter(impl_, static_cast<const std::byte*>(in), o + mine, b, es, dt, op, true)
      .wait();
  ring_all_gather(impl_, o + mine, o, b, es, true).wait();
}

Request Group::iall_to_all(const void* in, void* out, size_t count, DType dt) const {
  return post_all_to_all(in, out, count, dt, /*wait_now=*/false);
}

Request Group::post_all_to_all(const void* in, void* out, size_t count, DType dt,
                               bool wait_now) const {
  GroupImpl& g = impl();
  const size_t block = count * core::dtype_size(dt);
  const int p = g.size(), r = g.rank();
  const auto* i = static_cast<const std::byte*>(in);
  auto* o = static_cast<std::byte*>(out);
  const size_t total = block * static_cast<size_t>(p);
  core::require(p == 1 || total == 0 || i + total <= o || o + total <= i, "comm",
                "all_to_all input and output overlap");
  if (g.native_collectives()) {
    if (p > 1 && count > 0) count_steps(g, 1, all_to_all_specs(p, r, i, o, block));
    return g.post_collective(call_of(Kind::all_to_all, in, out, count, dt));
  }
  copy_if_distinct(o + static_cast<size_t>(r) * block, i + static_cast<size_t>(r) * block, block);
  if (p == 1 || count == 0) return {};
  return all_to_all_step(impl_, i, o, block, wait_now);
}

void Group::all_to_all(const void* in, void* out, size_t count, DType dt) const {
  post_all_to_all(in, out, count, dt, /*wait_now=*/true).wait();
}

void Group::all_to_all_v(const void* in, std::span<const size_t> send_counts,
                         std::span<const size_t> send_displs, void* out,
                         std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                         DType dt) const {
  GroupImpl& g = impl();
  const int p = g.size(), r = g.rank();
  const auto up = static_cast<size_t>(p);
  core::require(send_counts.size() == up && send_displs.size() == up && recv_counts.size() == up &&
                    recv_displs.size() == up,
                "comm", "all_to_all_v needs ", p, " counts and displacements, got ",
                send_counts.size(), "/", send_displs.size(), "/", recv_counts.size(), "/",
                recv_displs.size());
  const size_t es = core::dtype_size(dt);
  const auto* i = static_cast<const std::byte*>(in);
  auto* o = static_cast<std::byte*>(out);
  const auto ur = static_cast<size_t>(r);
  core::require(send_counts[ur] == recv_counts[ur], "comm", "all_to_all_v on rank ", r,
                ": sends itself ", send_counts[ur], " elements but expects ", recv_counts[ur]);
  const bool native = g.native_collectives();
  if (!native)
    copy_if_distinct(o + recv_displs[ur] * es, i + send_displs[ur] * es, send_counts[ur] * es);
  if (p == 1 && !native) return;
  auto specs = [&](int, std::vector<SendSpec>& sends, std::vector<RecvSpec>& recvs) {
    for (int k = 1; k < p; ++k) {
      const auto dst = static_cast<size_t>(mod(r + k, p));
      const auto src = static_cast<size_t>(mod(r - k, p));
      sends.push_back({static_cast<int>(dst), i + send_displs[dst] * es, send_counts[dst] * es, 0});
      recvs.push_back({static_cast<int>(src), o + recv_displs[src] * es, recv_counts[src] * es, 0});
    }
  };
  if (native) {
    if (p > 1) count_steps(g, 1, specs);
    CollectiveCall call = call_of(Kind::all_to_all_v, in, out, 0, dt);
    call.send_counts = send_counts;
    call.send_displs = send_displs;
    call.recv_counts = recv_counts;
    call.recv_displs = recv_displs;
    g.post_collective(call).wait();
    return;
  }
  StepRequest::start(impl_, 1, specs, nullptr, /*wait_now=*/true)->wait();
}

void Group::broadcast(void* data, size_t count, DType dt, int root) const {
  GroupImpl& g = impl();
  const int p = g.size();
  core::require(root >= 0 && root < p, "comm", "broadcast root ", root, " in a group of size ", p);
  const bool native = g.native_collectives();
  if ((p == 1 || count == 0) && !native) return;
  const size_t bytes = count * core::dtype_size(dt);
  const int v = mod(g.rank() - root, p);  // rank relative to the root
  int parent_mask = 1;
  while (parent_mask < p && !(v & parent_mask)) parent_mask <<= 1;
  // Step 0 receives from the parent (not on the root), step 1 sends to the children.
  auto specs = [&](int s, std::vector<SendSpec>& sends, std::vector<RecvSpec>& recvs) {
    if (s == 0) {
      if (parent_mask < p) recvs.push_back({mod(v - parent_mask + root, p), data, bytes, 0});
      return;
    }
    for (int mask = parent_mask >> 1; mask > 0; mask >>= 1)
      if (v + mask < p) sends.push_back({mod(v + mask + root, p), data, bytes, 0});
  };
  if (native) {
    if (p > 1 && count > 0) count_steps(g, 2, specs);
    g.post_collective(call_of(Kind::broadcast, data, data, count, dt, ReduceOp::sum, root)).wait();
    return;
  }
  StepRequest::start(impl_, 2, specs, nullptr, /*wait_now=*/true)->wait();
}

void Group::barrier() const {
  GroupImpl& g = impl();
  const int p = g.size(), r = g.rank();
  int rounds = 0;
  for (int k = 1; k < p; k <<= 1) ++rounds;
  const bool native = g.native_collectives();
  if (rounds == 0 && !native) return;
  // Round k sends an empty message to r + 2^k and receives one from r - 2^k.
  auto specs = [&](int round, std::vector<SendSpec>& sends, std::vector<RecvSpec>& recvs) {
    const int k = 1 << round;
    sends.push_back({mod(r + k, p), nullptr, 0, round});
    recvs.push_back({mod(r - k, p), nullptr, 0, round});
  };
  if (native) {
    count_steps(g, rounds, specs);
    g.post_collective(call_of(Kind::barrier, nullptr, nullptr, 0, DType::u8)).wait();
    return;
  }
  StepRequest::start(impl_, rounds, specs, nullptr, /*wait_now=*/true)->wait();
}

}  // namespace longseq::comm
