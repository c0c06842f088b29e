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
#include <algorithm>
#include <cstring>
#include <functional>

#include "longseq/comm/group.hpp"
#include "longseq/comm/group_impl.hpp"

namespace longseq::comm {
namespace {

using core::DType;

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

void copy_if_distinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}

/// One step with at most one send and one receive; empty sides are skipped (both ends know the
/// block sizes, so they skip the same messages).
/// `overlap`, when given, runs after the posts and before the waits (local work that touches
/// neither message buffer).
void step(GroupImpl& g, int tag, int dst, const void* sbuf, size_t sbytes, int src, void* rbuf,
          size_t rbytes, bool send_empty = false, const std::function<void()>& overlap = {}) {
  SendSpec s{dst, sbuf, sbytes, tag};
  RecvSpec r{src, rbuf, rbytes, tag};
  const bool do_send = sbytes > 0 || send_empty;
  const bool do_recv = rbytes > 0 || send_empty;
  std::vector<Request> reqs;
  g.post_step(Channel::collective, std::span<const SendSpec>(&s, do_send ? 1 : 0),
              std::span<const RecvSpec>(&r, do_recv ? 1 : 0), reqs, /*wait_now=*/true);
  if (overlap) overlap();
  wait_all(reqs);
}

/// Ring all-gather over `out`. This rank's block comes from `in` (which may be block r of out
/// itself): step 0 sends it straight from `in` and copies it into block r while the message
/// moves. Copying first and sending block r of `out` (as before) was often 1.5-2.5x slower
/// under MPI at P = 2 (all_gather 4 MiB at 0.38 of MPI_Allgather, 1 MiB at 0.62;
/// docs/cluster.md). Probable cause, not proven: the peer's single-copy read then hits the
/// buffer (the same pages, under transparent huge pages) that this rank's own receive writes.
/// The overlap itself gained nothing on 2 cores with 2 ranks when measured (1 MiB all_gather
/// 52-55 us either way, before waits drove MPI themselves), but it does where a rank has a
/// spare core.
void ring_all_gather(GroupImpl& g, const std::byte* in, std::byte* out, const Blocks& b,
                     size_t es) {
  const int p = g.size(), r = g.rank();
  const int next = mod(r + 1, p), prev = mod(r - 1, p);
  std::byte* own = out + b.offset[static_cast<size_t>(r)] * es;
  const size_t own_bytes = b.count[static_cast<size_t>(r)] * es;
  for (int s = 0; s < p - 1; ++s) {
    const auto sb = static_cast<size_t>(mod(r - s, p));
    const auto rb = static_cast<size_t>(mod(r - s - 1, p));
    const std::byte* sbuf = s == 0 ? in : out + b.offset[sb] * es;
    step(g, s, next, sbuf, b.count[sb] * es, prev, out + b.offset[rb] * es, b.count[rb] * es, false,
         s == 0 ? std::function<void()>([&] { copy_if_distinct(own, in, own_bytes); })
                : std::function<void()>());
  }
}

/// Ring reduce-scatter: block r of the reduction of every rank's `in` lands at `result`.
/// `result` may be in + offset[r] (all_reduce in place).
void ring_reduce_scatter(GroupImpl& g, const std::byte* in, std::byte* result, const Blocks& b,
                         size_t es, DType dt, ReduceOp op) {
  const int p = g.size(), r = g.rank();
  const int next = mod(r + 1, p), prev = mod(r - 1, p);
  const size_t slot = b.max_count() * es;
  std::byte* tmp[2] = {g.scratch(2 * slot), nullptr};
  tmp[1] = tmp[0] + slot;
  for (int s = 0; s < p - 1; ++s) {
    const auto sb = static_cast<size_t>(mod(r - s - 1, p));
    const auto rb = static_cast<size_t>(mod(r - s - 2, p));
    // Step 0 sends this rank's own block; later steps forward the partial reduced last step.
    const std::byte* sbuf = s == 0 ? in + b.offset[sb] * es : tmp[(s - 1) % 2];
    std::byte* rbuf = tmp[s % 2];
    step(g, s, next, sbuf, b.count[sb] * es, prev, rbuf, b.count[rb] * es);
    std::byte* dst = s == p - 2 ? result : rbuf;  // the last block received is block r
    combine(dst, rbuf, in + b.offset[rb] * es, b.count[rb], dt, op);
  }
}

}  // namespace

void Group::all_gather(const void* in, void* out, size_t count, DType dt) const {
  GroupImpl& g = impl();
  const size_t es = core::dtype_size(dt);
  auto* o = static_cast<std::byte*>(out);
  const size_t block = count * es;
  core::require((in != nullptr && out != nullptr) || count == 0, "comm",
                "all_gather with a null buffer");
  if (g.size() == 1 || count == 0) {
    copy_if_distinct(o + static_cast<size_t>(g.rank()) * block, in, block);
    return;
  }
  ring_all_gather(g, static_cast<const std::byte*>(in), o, equal_blocks(g.size(), count), es);
}

void Group::reduce_scatter(const void* in, void* out, size_t count, DType dt, ReduceOp op) const {
  GroupImpl& g = impl();
  require_reducible(dt);
  const size_t es = core::dtype_size(dt);
  if (g.size() == 1) {
    copy_if_distinct(out, in, count * es);
    return;
  }
  if (count == 0) return;
  ring_reduce_scatter(g, static_cast<const std::byte*>(in), static_cast<std::byte*>(out),
                      equal_blocks(g.size(), count), es, dt, op);
}

void Group::all_reduce(const void* in, void* out, size_t count, DType dt, ReduceOp op) const {
  GroupImpl& g = impl();
  require_reducible(dt);
  const size_t es = core::dtype_size(dt);
  if (g.size() == 1) {
    copy_if_distinct(out, in, count * es);
    return;
  }
  if (count == 0) return;
  const Blocks b = split_blocks(g.size(), count);
  auto* o = static_cast<std::byte*>(out);
  const size_t mine = b.offset[static_cast<size_t>(g.rank())] * es;
  ring_reduce_scatter(g, static_cast<const std::byte*>(in), o + mine, b, es, dt, op);
  ring_all_gather(g, o + mine, o, b, es);
}

void Group::all_to_all(const void* in, void* out, size_t count, DType dt) const {
  GroupImpl& g = impl();
  const size_t block = count * core::dtype_size(dt);
  const int p = g.size(), r = g.rank();
  const auto* i = static_cast<const std::byte*>(in);
  auto* o = static_cast<std::byte*>(out);
  const size_t total = block * static_cast<size_t>(p);
  core::require(p == 1 || total == 0 || i + total <= o || o + total <= i, "comm",
                "all_to_all input and output overlap");
  copy_if_distinct(o + static_cast<size_t>(r) * block, i + static_cast<size_t>(r) * block, block);
  if (p == 1 || count == 0) return;
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  for (int k = 1; k < p; ++k) {
    const int dst = mod(r + k, p), src = mod(r - k, p);
    sends.push_back({dst, i + static_cast<size_t>(dst) * block, block, 0});
    recvs.push_back({src, o + static_cast<size_t>(src) * block, block, 0});
  }
  g.run_step(Channel::collective, sends, recvs);
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
  copy_if_distinct(o + recv_displs[ur] * es, i + send_displs[ur] * es, send_counts[ur] * es);
  if (p == 1) return;
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  for (int k = 1; k < p; ++k) {
    const auto dst = static_cast<size_t>(mod(r + k, p));
    const auto src = static_cast<size_t>(mod(r - k, p));
    sends.push_back({static_cast<int>(dst), i + send_displs[dst] * es, send_counts[dst] * es, 1});
    recvs.push_back({static_cast<int>(src), o + recv_displs[src] * es, recv_counts[src] * es, 1});
  }
  g.run_step(Channel::collective, sends, recvs);
}

void Group::broadcast(void* data, size_t count, DType dt, int root) const {
  GroupImpl& g = impl();
  const int p = g.size();
  core::require(root >= 0 && root < p, "comm", "broadcast root ", root, " in a group of size ", p);
  if (p == 1 || count == 0) return;
  const size_t bytes = count * core::dtype_size(dt);
  const int v = mod(g.rank() - root, p);  // rank relative to the root
  int mask = 1;
  while (mask < p) {
    if (v & mask) {
      g.recv(Channel::collective, mod(v - mask + root, p), 2, data, bytes).wait();
      break;
    }
    mask <<= 1;
  }
  std::vector<Request> reqs;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < p)
      reqs.push_back(g.send(Channel::collective, mod(v + mask + root, p), 2, data, bytes));
  wait_all(reqs);
}

void Group::barrier() const {
  GroupImpl& g = impl();
  const int p = g.size(), r = g.rank();
  for (int k = 1, round = 0; k < p; k <<= 1, ++round) {
    step(g, 3 + round, mod(r + k, p), nullptr, 0, mod(r - k, p), nullptr, 0,
         /*send_empty=*/true);
  }
}

}  // namespace longseq::comm
