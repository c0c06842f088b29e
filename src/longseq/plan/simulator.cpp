#include "longseq/plan/simulator.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <numeric>
#include <tuple>

#include "longseq/core/error.hpp"
#include "longseq/core/plot.hpp"

namespace longseq::plan {

using attention::RankSchedule;
using attention::Work;
using attention::Xfer;

int Timeline::critical_rank() const {
  int best = 0;
  for (size_t r = 1; r < ranks.size(); ++r)
    if (ranks[r].finish > ranks[best].finish) best = static_cast<int>(r);
  return best;
}

namespace {

// A transfer is identified by (sender, receiver, tag): a rank receives one bundle's data once and
// one gradient partial per bundle from its chain predecessor.
using Key = std::tuple<int, int, int>;

struct Pending {
  double post_send = -1, post_recv = -1;
  double done = -1;
  const Xfer* send = nullptr;
};

// Every transfer of one replay numbered before the replay starts: each side (an Xfer in its rank's
// list) learns the number of its transfer, so a post and a wait index an array. Keys are found
// through one open-addressing table over (sender, receiver, tag) packed into 64 bits. (A table by
// (receiver, tag) with a list of senders per entry walked that list at every post and wait; an
// origin of the double ring receives one gradient partial per inner ring under one tag, so the
// lists held P/I senders and the backward replay grew as P^3.)
class TransferIndex {
 public:
  explicit TransferIndex(const std::vector<RankSchedule>& schedules) {
    const int world = static_cast<int>(schedules.size());
    first_.assign(static_cast<size_t>(world) + 1, 0);
    for (int r = 0; r < world; ++r) first_[r + 1] = first_[r] + schedules[r].xfers.size();
    ids_.resize(first_[world]);
    size_t cap = 16;
    while (cap < first_[world]) cap *= 2;  // >= sides, so >= 2x transfers: short probes
    const uint64_t mask = cap - 1;
    std::vector<Slot> table(cap);
    keys_.reserve(first_[world] / 2);
    for (int r = 0; r < world; ++r) {
      const auto& xs = schedules[r].xfers;
      for (size_t i = 0; i < xs.size(); ++i) {
        const Xfer& x = xs[i];
        const Key k = x.send ? Key{r, x.peer, x.tag} : Key{x.peer, r, x.tag};
        const auto [a, b, tag] = k;
        LONGSEQ_CHECK_MSG(a >= 0 && a < world && b >= 0 && b < world && tag >= 0 &&
                              tag < (1 << 22) && world <= (1 << 21),
                          "transfer ", a, " -> ", b, " tag ", tag, " outside the ", world,
                          " ranks and 2^22 tags a replay indexes");
        const uint64_t packed = (static_cast<uint64_t>(a) << 43) |
                                (static_cast<uint64_t>(b) << 22) | static_cast<uint64_t>(tag);
        uint64_t h = packed * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
        for (h &= mask; table[h].id != kEmpty && table[h].key != packed; h = (h + 1) & mask) {
        }
        if (table[h].id == kEmpty) {
          table[h] = {packed, static_cast<uint32_t>(keys_.size())};
          keys_.push_back(k);
        }
        ids_[first_[r] + i] = table[h].id;
      }
    }
  }
  /// The transfer of xfer `i` of `rank`'s list.
  uint32_t id(int rank, size_t i) const { return ids_[first_[rank] + i]; }
  size_t size() const { return keys_.size(); }
  const Key& key(uint32_t id) const { return keys_[id]; }

 private:
  static constexpr uint32_t kEmpty = ~0u;
  struct Slot {
    uint64_t key = 0;
    uint32_t id = kEmpty;
  };
  std::vector<size_t> first_;  // [rank]: offset of its first side in ids_
  std::vector<uint32_t> ids_;
  std::vector<Key> keys_;  // by transfer id
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

}  // namespace

Timeline replay(const std::vector<RankSchedule>& schedules, const ReplayModel& m) {
  const int world = static_cast<int>(schedules.size());
  Timeline tl;
  tl.ranks.resize(world);
  std::vector<double> now(world, 0.0);
  // Ports: [rank][class] where class 0 = intra, 1 = inter.
  std::vector<std::array<double, 2>> out_free(world, {0.0, 0.0}), in_free(world, {0.0, 0.0});
  int steps = 0;
  for (const auto& s : schedules) steps = std::max(steps, s.num_steps);
  const TransferIndex index(schedules);
  std::vector<Pending> xfers(index.size());

  auto start_if_ready = [&](const Key& k, Pending& p) {
    if (p.post_send < 0 || p.post_recv < 0 || p.done >= 0) return;
    const int a = std::get<0>(k), b = std::get<1>(k);
    const int cls = m.same_node(a, b) ? 0 : 1;
    const Link& link = cls == 0 ? m.intra : m.inter;
    const double bytes = m.bytes(*p.send);
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
        const bool p2p = c.op == Op::send_recv;
        std::vector<int> peers;  // one message to each entry, per field
        double start = now[r];
        if (p2p) {
          if (c.to != r) peers.push_back(c.to);
          start = std::max({now[r], now[c.to], now[c.from]});
        } else {
          const int n = static_cast<int>(c.members.size());
          const int me = static_cast<int>(std::find(c.members.begin(), c.members.end(), r) -
                                          c.members.begin());
          for (int x : c.members) start = std::max(start, now[x]);
          for (int k = 1; k < n; ++k)
            peers.push_back(c.op == Op::all_gather || c.op == Op::reduce_scatter
                                ? c.members[(me + 1) % n]
                                : c.members[(me + k) % n]);
        }
        std::array<double, 2> busy{0.0, 0.0};
        RankTimeline& rt = tl.ranks[r];
        for (attention::Field f : c.fields) {
          const double b = m.message_bytes(r, c, f);
          for (int peer : peers) {
            const int cls = m.same_node(r, peer) ? 0 : 1;
            const Link& link = cls == 0 ? m.intra : m.inter;
            busy[cls] +=
                link.latency_s + b / (link.bandwidth_Bps * (p2p ? 1.0 : m.collective_efficiency));
            (cls == 0 ? rt.messages_intra : rt.messages_inter) += 1;
            (cls == 0 ? rt.bytes_intra : rt.bytes_inter) += b;
            if (!p2p) rt.collective_bytes += b;
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
  std::vector<StepCursor> waits, posts, works;
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
        const Pending& p = xfers[index.id(r, i)];
        LONGSEQ_CHECK_MSG(p.done >= 0, "rank ", r, " waits at step ", s,
                          " for a transfer with peer ", x.peer,
                          " that was not posted by both sides");
        double arrive = now[r];
        if (!x.send && m.wait_copy.bandwidth_Bps > 0) {
          const double copy = m.wait_copy.latency_s + m.bytes(*p.send) / m.wait_copy.bandwidth_Bps;
          tl.ranks[r].wait_copy_s += copy;
          arrive += copy;
        }
        now[r] = std::max(arrive, p.done);
      });
      posts[r].take(s, [&](uint32_t i) {
        const Xfer& x = rs.xfers[i];
        const uint32_t id = index.id(r, i);
        Pending& p = xfers[id];
        if (x.send) {
          p.post_send = now[r];
          p.send = &x;
        } else {
          p.post_recv = now[r];
        }
        start_if_ready(index.key(id), p);
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
  for (uint32_t id = 0; id < index.size(); ++id) {
    const Key& k = index.key(id);
    LONGSEQ_CHECK_MSG(xfers[id].done >= 0, "transfer ", std::get<0>(k), " -> ", std::get<1>(k),
                      " tag ", std::get<2>(k), " has only one side");
  }
  for (int r = 0; r < world; ++r) {
    tl.ranks[r].finish = now[r];
    tl.makespan = std::max(tl.makespan, now[r]);
  }
  return tl;
}

std::string timeline_svg(const Timeline& t, const std::string& title) {
  core::plot::Lanes l;
  l.title = core::cat(title, " (makespan ", t.makespan, " s)");
  l.rows_per_lane = 3;
  l.legend = {
      {"compute", "#3b7dd8"}, {"intra-node send", "#37a651"}, {"inter-node send", "#d8733b"}};
  l.note = "grey: idle (no compute)";
  l.end = t.makespan;
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    l.lane_names.push_back(core::cat("rank ", r));
    l.lane_background_end.push_back(t.ranks[r].finish);
    for (const Span& s : t.ranks[r].spans) {
      const int k = static_cast<int>(s.kind);
      l.spans.push_back(
          {static_cast<int>(r), k, s.begin, s.end, k,
           core::cat("step ", s.step, " ", l.legend[k].first, " ", s.begin, "..", s.end, " s")});
    }
  }
  return core::plot::lanes_svg(l);
}

}  // namespace longseq::plan
