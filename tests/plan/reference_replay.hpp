#pragma once
// The planner's replay as it was before issue 31 item 2 made it fast (commit 719914f): the
// simulator's step-by-step replay (per-rank step cursors, transfers found through (receiver, tag)
// lists) and attention_cost's replay_pass (FLOPs summed pair by pair, in each work item's pair
// order, from a dense table of every (q rank, q chunk, k rank, k chunk)), copied unchanged but for
// names (and for issue 31 item 4's Ulysses head groups: their transfers' bytes and their works'
// FLOPs, 1/G of the pairs', as attention_cost costs them; and the buffers counted as the slots the
// executor allocates, attention::used_data_slot_count). tests/plan/replay_scale_test.cpp checks
// the fast path against it bit for bit; nothing else uses it.
#include <algorithm>
#include <array>
#include <numeric>
#include <tuple>
#include <vector>

#include "longseq/attention/schedule.hpp"
#include "longseq/core/error.hpp"
#include "longseq/plan/attention_cost.hpp"
#include "longseq/plan/simulator.hpp"

namespace longseq::plan::reference {

using attention::Algorithm;
using attention::Chunk;
using attention::Layout;
using attention::MaskSpec;
using attention::PairKind;
using attention::PairTable;
using attention::Pass;
using attention::RankSchedule;
using attention::Work;
using attention::Xfer;

namespace detail {
// A transfer is identified by (sender, receiver, tag): a rank receives one bundle's data once and
// one gradient partial per bundle from its chain predecessor.
using Key = std::tuple<int, int, int>;

struct Pending {
  double post_send = -1, post_recv = -1;
  double done = -1;
  const Xfer* send = nullptr;
};

// The transfers of one replay by key, indexed by (receiver, tag) with a short list of senders per
// index (an origin receives one gradient partial per chain): a rank's posts and waits then touch
// its own row, where a map of all transfers spent most of a cluster-sized replay on cache misses.
class PendingTable {
 public:
  PendingTable(int world, int tags, size_t expected)
      : tags_(tags), head_(static_cast<size_t>(world) * tags, -1) {
    entries_.reserve(expected);
  }
  Pending& operator[](const Key& k) {
    const auto [a, b, tag] = k;
    LONGSEQ_CHECK_MSG(tag >= 0 && tag < tags_, "transfer ", a, " -> ", b, " tag ", tag,
                      " outside the replay's ", tags_, " tags");
    int32_t* link = &head_[static_cast<size_t>(b) * tags_ + tag];
    while (*link >= 0 && entries_[*link].sender != a) link = &entries_[*link].next;
    int32_t at = *link;
    if (at < 0) {
      at = *link = static_cast<int32_t>(entries_.size());
      entries_.push_back({a, b, tag, -1, {}});  // may move entries_: `link` is not read again
    }
    return entries_[at].p;
  }
  template <class F>
  void for_each(F&& f) const {
    for (const Entry& e : entries_) f(Key{e.sender, e.receiver, e.tag}, e.p);
  }

 private:
  struct Entry {
    int sender, receiver, tag;
    int32_t next;
    Pending p;
  };
  int tags_;
  std::vector<int32_t> head_;
  std::vector<Entry> entries_;
};

// Indices of `items` ordered by step, stable (the schedule's order within a step), read with a
// cursor: a replay visits every transfer and work item once instead of scanning a rank's lists at
// every step (which made a replay cubic in the ring size).
struct StepCursor {
  std::vector<uint32_t> order;
  std::vector<int> step;  // by position in order
  size_t at = 0;
  template <class T, class F>
  StepCursor(const std::vector<T>& items, F step_of) : order(items.size()) {
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return step_of(items[a]) < step_of(items[b]); });
    step.reserve(order.size());
    for (uint32_t i : order) step.push_back(step_of(items[i]));
  }
  /// Calls f(index) for the items of step s (steps are visited in increasing order).
  template <class G>
  void take(int s, G&& f) {
    while (at < order.size() && step[at] < s) ++at;  // steps outside the replayed range
    for (; at < order.size() && step[at] == s; ++at) f(order[at]);
  }
};

}  // namespace detail

using detail::Key;
using detail::Pending;

inline Timeline replay(const std::vector<RankSchedule>& schedules, const ReplayModel& m) {
  const int world = static_cast<int>(schedules.size());
  Timeline tl;
  tl.ranks.resize(world);
  std::vector<double> now(world, 0.0);
  // Ports: [rank][class] where class 0 = intra, 1 = inter.
  std::vector<std::array<double, 2>> out_free(world, {0.0, 0.0}), in_free(world, {0.0, 0.0});
  int steps = 0, tags = 1;
  size_t sides = 0;
  for (const auto& s : schedules) {
    steps = std::max(steps, s.num_steps);
    for (const Xfer& x : s.xfers) tags = std::max(tags, x.tag + 1);
    sides += s.xfers.size();
  }
  detail::PendingTable xfers(world, tags,
                             sides / 2);  // every transfer is listed by both of its sides

  auto key_of = [](int rank, const Xfer& x) {
    return x.send ? detail::Key{rank, x.peer, x.tag} : detail::Key{x.peer, rank, x.tag};
  };
  auto start_if_ready = [&](const detail::Key& k, Pending& p) {
    if (p.post_send < 0 || p.post_recv < 0 || p.done >= 0) return;
    const int a = std::get<0>(k), b = std::get<1>(k);
    const int cls = m.same_node(a, b) ? 0 : 1;
    const Link& link = cls == 0 ? m.intra : m.inter;
    const double bytes = m.bytes(a, *p.send);
    const double begin = std::max({p.post_send, p.post_recv, out_free[a][cls], in_free[b][cls]});
    p.done = begin + link.latency_s + bytes / link.bandwidth_Bps;
    out_free[a][cls] = in_free[b][cls] = p.done;
    RankTimeline& rt = tl.ranks[a];
    if (m.spans)
      rt.spans.push_back(
          {begin, p.done, cls == 0 ? Activity::intra : Activity::inter, p.send->post_step});
    (cls == 0 ? rt.messages_intra : rt.messages_inter) += 1;
    (cls == 0 ? rt.bytes_intra : rt.bytes_inter) += bytes;
  };

  auto collectives = [&](bool pre) {
    size_t count = 0;
    for (const auto& rs : schedules) count = std::max(count, (pre ? rs.pre : rs.post).size());
    for (size_t i = 0; i < count; ++i) {
      std::vector<double> next = now;
      for (int r = 0; r < world; ++r) {
        const auto& list = pre ? schedules[r].pre : schedules[r].post;
        if (i >= list.size()) continue;
        const attention::Collective& c = list[i];
        using Op = attention::Collective::Op;
        std::vector<int> peers;  // one message to each entry, per field
        double start = now[r];
        const int n = static_cast<int>(c.members.size());
        const int me =
            static_cast<int>(std::find(c.members.begin(), c.members.end(), r) - c.members.begin());
        for (int x : c.members) start = std::max(start, now[x]);
        for (int k = 1; k < n; ++k)
          peers.push_back(c.op == Op::all_gather || c.op == Op::reduce_scatter
                              ? c.members[(me + 1) % n]
                              : c.members[(me + k) % n]);
        std::array<double, 2> busy{0.0, 0.0};
        RankTimeline& rt = tl.ranks[r];
        for (attention::Field f : c.fields) {
          const double b = m.message_bytes(r, c, f);
          for (int peer : peers) {
            const int cls = m.same_node(r, peer) ? 0 : 1;
            const Link& link = cls == 0 ? m.intra : m.inter;
            busy[cls] += link.latency_s + b / (link.bandwidth_Bps * m.collective_efficiency);
            (cls == 0 ? rt.messages_intra : rt.messages_inter) += 1;
            (cls == 0 ? rt.bytes_intra : rt.bytes_inter) += b;
            rt.collective_bytes += b;
          }
        }
        for (int cls = 0; cls < 2; ++cls)
          if (busy[cls] > 0 && m.spans)
            rt.spans.push_back({start, start + busy[cls],
                                cls == 0 ? Activity::intra : Activity::inter, pre ? -1 : steps});
        next[r] = start + std::max(busy[0], busy[1]);
        rt.collective_s += next[r] - now[r];
      }
      now = next;
    }
  };

  collectives(true);
  std::vector<detail::StepCursor> waits, posts, works;
  for (const RankSchedule& rs : schedules) {
    waits.emplace_back(rs.xfers, [](const Xfer& x) { return x.wait_step; });
    posts.emplace_back(rs.xfers, [](const Xfer& x) { return x.post_step; });
    works.emplace_back(rs.work, [](const Work& w) { return w.step; });
  }
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < world; ++r) {
      const RankSchedule& rs = schedules[r];
      waits[r].take(s, [&](uint32_t i) {
        const Xfer& x = rs.xfers[i];
        const Pending& p = xfers[key_of(r, x)];
        LONGSEQ_CHECK_MSG(p.done >= 0, "rank ", r, " waits at step ", s,
                          " for a transfer with peer ", x.peer,
                          " that was not posted by both sides");
        double arrive = now[r];
        if (!x.send && m.wait_copy.bandwidth_Bps > 0) {
          const double copy =
              m.wait_copy.latency_s + m.bytes(x.peer, *p.send) / m.wait_copy.bandwidth_Bps;
          tl.ranks[r].wait_copy_s += copy;
          arrive += copy;
        }
        now[r] = std::max(arrive, p.done);
      });
      posts[r].take(s, [&](uint32_t i) {
        const Xfer& x = rs.xfers[i];
        const detail::Key k = key_of(r, x);
        Pending& p = xfers[k];
        if (x.send) {
          p.post_send = now[r];
          p.send = &x;
        } else {
          p.post_recv = now[r];
        }
        start_if_ready(k, p);
      });
      works[r].take(s, [&](uint32_t i) {
        const Work& w = rs.work[i];
        const double f = m.flops(r, w);
        const double dt = (m.cost_flops ? m.cost_flops(r, w) : f) / m.flops_per_s;
        if (m.spans) tl.ranks[r].spans.push_back({now[r], now[r] + dt, Activity::compute, s});
        tl.ranks[r].compute_s += dt;
        tl.ranks[r].flops += f;
        now[r] += dt;
      });
    }
  }
  collectives(false);
  xfers.for_each([](const detail::Key& k, const Pending& p) {
    LONGSEQ_CHECK_MSG(p.done >= 0, "transfer ", std::get<0>(k), " -> ", std::get<1>(k), " tag ",
                      std::get<2>(k), " has only one side");
  });
  for (int r = 0; r < world; ++r) {
    tl.ranks[r].finish = now[r];
    tl.makespan = std::max(tl.makespan, now[r]);
  }
  return tl;
}

namespace detail {

class PairCounts {
 public:
  PairCounts(const Layout& layout, const MaskSpec& mask, int64_t q_limit, int64_t tile_q,
             int64_t tile_k) {
    const int world = layout.world();
    chunks_ = static_cast<int>(layout.chunks(0).size());
    world_ = world;
    const PairTable table(layout, mask);
    counts_.assign(static_cast<size_t>(world) * chunks_ * world * chunks_, 0);
    if (tile_q > 0) tiles_.assign(counts_.size(), TileWork{});
    for (int qr = 0; qr < world; ++qr)
      for (int qc = 0; qc < chunks_; ++qc)
        for (int kr = 0; kr < world; ++kr)
          for (int kc = 0; kc < chunks_; ++kc) {
            const PairKind kind = table.kind(qr, qc, kr, kc);
            if (kind == PairKind::empty) continue;
            const Chunk& q = layout.chunks(qr)[qc];
            const Chunk& k = layout.chunks(kr)[kc];
            int64_t v;
            if (kind == PairKind::full)  // every pair visible: no padding, every row counts
              v = (q_limit < 0 ? q.len : std::clamp<int64_t>(q_limit - q.local_begin, 0, q.len)) *
                  k.len;
            else
              v = visible_pairs(q, k, layout.global_len(), mask, q_limit);
            counts_[index(qr, qc, kr, kc)] = v;
            if (tile_q > 0)
              tiles_[index(qr, qc, kr, kc)] =
                  kernel_tile_work(q, k, layout.global_len(), mask, tile_q, tile_k, q_limit);
          }
  }
  int64_t at(int qr, int qc, int kr, int kc) const { return counts_[index(qr, qc, kr, kc)]; }
  /// Computed pairs (only when built with tiles).
  const TileWork& tiles(int qr, int qc, int kr, int kc) const {
    return tiles_[index(qr, qc, kr, kc)];
  }
  int64_t total() const {
    int64_t t = 0;
    for (int64_t v : counts_) t += v;
    return t;
  }

 private:
  size_t index(int qr, int qc, int kr, int kc) const {
    return ((static_cast<size_t>(qr) * chunks_ + qc) * world_ + kr) * chunks_ + kc;
  }
  int world_ = 1, chunks_ = 1;
  std::vector<int64_t> counts_;
  std::vector<TileWork> tiles_;
};

}  // namespace detail

inline PassCost replay_pass(const ScheduleSet& set, const Algorithm& algo, const AttnProblem& p,
                            Pass pass, const Hardware& hw, int64_t q_limit, bool keep,
                            double* buffer_bytes) {
  const int64_t l = set.layout.local_len();
  const double e = hw.dtype_bytes;
  const RankSchedule& r0 = set.ranks[0];
  const attention::Dims dm{l, p.hq, p.hkv, p.d, 4};
  const int64_t hq_s = attention::side_hq(r0, dm), hkv_s = attention::side_hkv(r0, dm);
  const int64_t rows_q = l * static_cast<int64_t>(r0.q_pieces[r0.member].size());
  const int64_t rows_k = l * static_cast<int64_t>(r0.kv_pieces[r0.member].size());
  const bool bq = attention::bundle_is_query(algo, pass);
  // A bundle holds one head group's heads (schedule.hpp: USP runs its ring once per group).
  const int64_t hq_b = hq_s / r0.head_groups, hkv_b = hkv_s / r0.head_groups;
  const double data_b = static_cast<double>(bq ? 2 * rows_q * hq_b * p.d + 2 * rows_q * hq_b
                                               : 2 * rows_k * hkv_b * p.d) *
                        e;
  const double grad_b = static_cast<double>(attention::grad_elems(r0, algo, pass, dm)) * e;
  const bool fwd = pass == Pass::forward;
  const int64_t tq = hw.tiles.enabled() ? (fwd ? hw.tiles.fwd_q : hw.tiles.bwd_q) : 0;
  const int64_t tk = hw.tiles.enabled() ? (fwd ? hw.tiles.fwd_k : hw.tiles.bwd_k) : 0;
  const detail::PairCounts counts(set.layout, p.mask, q_limit, tq, tk);
  const double per_pair = (fwd ? 4.0 : 10.0) * static_cast<double>(hq_s * p.d);
  // The (q rank, q chunk, k rank, k chunk) of every pair of a step.
  auto for_pairs = [&](int rank, const attention::Work& w, auto&& f) {
    const RankSchedule& rs = set.ranks[rank];
    const int qm = bq ? w.origin : rs.member, km = bq ? rs.member : w.origin;
    for (const auto& sp : w.pairs) f(rs.q_pieces[qm][sp.qp], sp.qc, rs.kv_pieces[km][sp.kp], sp.kc);
  };

  // A work item is fixed by its (query member, key member) and the ranks' pieces, and ranks with
  // equal pieces (every ring of a USP degree) repeat the same items: their FLOPs are summed once
  // per class of ranks (same sum, same order, so the same double).
  const int world = static_cast<int>(set.ranks.size());
  std::vector<int> cls(world);
  std::vector<int> rep;  // a rank of every class
  {
    std::map<uint64_t, std::vector<int>> by_hash;  // hash -> classes
    for (int r = 0; r < world; ++r) {
      const RankSchedule& rs = set.ranks[r];
      uint64_t h = 1469598103934665603ull;
      for (const auto* pieces : {&rs.q_pieces, &rs.kv_pieces})
        for (const auto& v : *pieces) {
          h = (h ^ v.size()) * 1099511628211ull;
          for (int x : v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
        }
      auto& cands = by_hash[h];
      cls[r] = -1;
      for (int c : cands)
        if (set.ranks[rep[c]].q_pieces == rs.q_pieces &&
            set.ranks[rep[c]].kv_pieces == rs.kv_pieces)
          cls[r] = c;
      if (cls[r] < 0) {
        cls[r] = static_cast<int>(rep.size());
        rep.push_back(r);
        cands.push_back(cls[r]);
      }
    }
  }
  auto memo_table = [&] {
    std::vector<std::vector<double>> t(rep.size());
    if (static_cast<int>(rep.size()) < world)  // some class shares: worth remembering
      for (size_t c = 0; c < rep.size(); ++c) {
        const size_t n = set.ranks[rep[c]].q_pieces.size();
        t[c].assign(n * n, -1.0);
      }
    return t;
  };
  auto memoized = [&](std::vector<std::vector<double>>& memo, int rank, const attention::Work& w,
                      auto&& compute) {
    std::vector<double>& t = memo[cls[rank]];
    if (t.empty() || w.unit >= 0) return compute();  // a staged block: not the members' pairs
    const RankSchedule& rs = set.ranks[rank];
    const size_t qm = bq ? w.origin : rs.member, km = bq ? rs.member : w.origin;
    double& v = t[qm * rs.q_pieces.size() + km];
    if (v < 0) v = compute();
    return v;
  };
  std::vector<std::vector<double>> flops_memo = memo_table(), cost_memo = memo_table();

  ReplayModel m;
  m.bytes = [&](int rank, const attention::Xfer& x) {
    if (x.part == attention::Part::heads) {  // L rows of the group's heads of one field
      const RankSchedule& rs = set.ranks[rank];
      const attention::HeadBlock& b = rs.head_blocks[x.slot];
      return static_cast<double>(l * attention::field_width(b.field, hq_s / rs.head_groups,
                                                            hkv_s / rs.head_groups, p.d)) *
             e;
    }
    if (x.part == attention::Part::side) {
      const attention::SideBlock& b = set.ranks[rank].side_blocks[x.slot];
      return static_cast<double>(b.rows * attention::field_width(b.field, hq_s, hkv_s, p.d)) * e;
    }
    return x.part == attention::Part::data ? data_b : grad_b;
  };
  m.flops = [&](int rank, const attention::Work& w) {
    return memoized(flops_memo, rank, w, [&] {
      double f = 0;
      for_pairs(rank, w, [&](int qr, int qc, int kr, int kc) {
        f += static_cast<double>(counts.at(qr, qc, kr, kc));
      });
      return f * per_pair;
    });
  };
  // gamma = peak x (labelled) kernel efficiency, x the core share when ranks oversubscribe a host.
  if (tq > 0) {
    // Time from the pairs the kernels compute (full tiles, partial tiles at the labelled relative
    // cost); m.flops stays the useful (visible) FLOPs.
    const double partial_cost =
        fwd ? hw.corrections.partial_tile_cost_fwd : hw.corrections.partial_tile_cost_bwd;
    m.cost_flops = [&, partial_cost](int rank, const attention::Work& w) {
      return memoized(cost_memo, rank, w, [&] {
        double f = 0;
        for_pairs(rank, w, [&](int qr, int qc, int kr, int kc) {
          const TileWork& t = counts.tiles(qr, qc, kr, kc);
          f += static_cast<double>(t.full) + partial_cost * static_cast<double>(t.partial);
        });
        return f * per_pair;
      });
    };
  }
  m.message_bytes = [&](int, const attention::Collective& c, attention::Field f) {
    using Op = attention::Collective::Op;
    const int64_t home = l * attention::field_width(f, p.hq, p.hkv, p.d);
    const int64_t side = attention::field_width(f, hq_s, hkv_s, p.d);
    const int64_t elems = c.op == Op::to_heads || c.op == Op::from_heads ? l * side : home;
    return static_cast<double>(elems) * e;
  };
  m.collective_efficiency = hw.corrections.collective_efficiency;
  m.flops_per_s =
      (fwd ? hw.attention_fwd_flops() : hw.attention_bwd_flops()) * hw.compute_share(p.world);
  const int gpn = p.gpus_per_node;
  m.same_node = [gpn](int x, int y) { return x / gpn == y / gpn; };
  m.intra = hw.intra;
  m.inter = hw.inter;
  m.wait_copy = hw.wait_copy;
  m.spans = keep;
  // A head-group work computes its pairs on 1/G of the side's heads.
  if (r0.head_groups > 1) {
    auto per_group = [&set](std::function<double(int, const attention::Work&)> f) {
      return [f, &set](int rank, const attention::Work& w) {
        const double v = f(rank, w);
        return w.head_group >= 0 ? v / set.ranks[rank].head_groups : v;
      };
    };
    m.flops = per_group(m.flops);
    if (m.cost_flops) m.cost_flops = per_group(m.cost_flops);
  }
  Timeline tl = reference::replay(set.ranks, m);

  PassCost c;
  c.model = "schedule";
  const int crit = tl.critical_rank();
  c.seconds = tl.makespan;
  c.compute_s = tl.ranks[crit].compute_s;
  c.collective_s = tl.ranks[crit].collective_s;
  const double ranks = static_cast<double>(tl.ranks.size());
  for (const auto& r : tl.ranks) {
    c.flops = std::max(c.flops, r.flops);
    c.flops_total += r.flops;
    c.messages_intra += static_cast<double>(r.messages_intra) / ranks;
    c.messages_inter += static_cast<double>(r.messages_inter) / ranks;
    c.bytes_intra += r.bytes_intra / ranks;
    c.bytes_inter += r.bytes_inter / ranks;
    c.bytes_inter_max = std::max(c.bytes_inter_max, r.bytes_inter);
    c.collective_bytes += r.collective_bytes / ranks;
  }
  if (buffer_bytes) {
    // Slots, plus the sides a schedule with collective steps holds beside the home tensors.
    const double sides =
        attention::sides_are_home(r0)
            ? 0.0
            : static_cast<double>(rows_q * hq_s * p.d + 2 * rows_k * hkv_s * p.d) * e;
    double b = 0;
    for (const RankSchedule& rs : set.ranks)
      b = std::max(
          b, attention::used_data_slot_count(rs, attention::bundle_is_query(algo, pass)) * data_b +
                 rs.grad_slots * grad_b + sides +
                 // Head groups: the packed K,V slices the blocks leave from, the size of
                 // the one unsplit data slot the blocking schedule holds instead.
                 (rs.head_groups > 1 ? data_b * rs.head_groups : 0.0));
    *buffer_bytes = b;
  }
  if (keep) c.timeline = std::move(tl);
  return c;
}

inline AttentionCost cost_attention(const Algorithm& a, const AttnProblem& p, const Hardware& hw,
                                    double frac, bool keep = false) {
  validate_algo(a, p);
  AttentionCost c;
  const ScheduleSet fwd = make_schedules(a, p, Pass::forward);
  c.forward = replay_pass(fwd, a, p, Pass::forward, hw, -1, keep, &c.buffer_bytes_forward);
  c.backward = replay_pass(make_schedules(a, p, Pass::backward), a, p, Pass::backward, hw, -1, keep,
                           &c.buffer_bytes_backward);
  const int64_t l = fwd.layout.local_len();
  const RankSchedule& r0 = fwd.ranks[0];
  if (frac > 0) {
    // The executor limits the query rows only where the query side is the rank's own tokens (no
    // collective steps); elsewhere the recomputation is the whole forward.
    const bool own_rows = attention::sides_are_home(r0);
    c.partial_recompute = replay_pass(
        fwd, a, p, Pass::forward, hw,
        own_rows ? static_cast<int64_t>(frac * static_cast<double>(l)) : -1, false, nullptr);
    c.recompute_fraction = frac;
  }
  // Gathered sides beyond the rank's own q, k, v (StarTrail: 3(C-1)A, WallFacer eq. (10)).
  const attention::Dims dm{l, p.hq, p.hkv, p.d, 4};
  const double q_side = static_cast<double>(l * r0.q_pieces[r0.member].size()) *
                        static_cast<double>(attention::side_hq(r0, dm));
  const double kv_side = static_cast<double>(l * r0.kv_pieces[r0.member].size()) *
                         static_cast<double>(attention::side_hkv(r0, dm));
  c.extra_activation_bytes =
      (q_side - static_cast<double>(l * p.hq) + 2 * (kv_side - static_cast<double>(l * p.hkv))) *
      static_cast<double>(p.d) * hw.dtype_bytes;
  return c;
}

}  // namespace longseq::plan::reference
