#include "longseq/plan/simulator.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
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
  double bytes = 0;  // m.bytes of the send side, asked for once before the replay
  int sender = -1, receiver = -1;
  int send_step = 0;  // the step the sender posted at
  uint8_t cls = 0;    // link class of (sender, receiver): 0 intra, 1 inter
};

// Every transfer of one replay numbered before the replay starts: each side (an Xfer in its rank's
// list) learns the number of its transfer, so a post and a wait index an array. (A table by
// (receiver, tag) with a list of senders per entry walked that list at every post and wait; an
// origin of the double ring receives one gradient partial per inner ring under one tag, so the
// lists held P/I senders and the backward replay grew as P^3.)
//
// Keys are found in a dense table by (owner, tag), where the owner is the receiver for an even tag
// and the sender for an odd one: the schedules' ring tags are origin * 2 + part, and a rank
// receives one bundle's data once (even: one sender per receiver) and sends one gradient partial
// per bundle (odd: one receiver per sender), so (owner, tag) names one transfer and a side finds
// it in one read, its own rank's row for half of the sides. Only where some (owner, tag) holds two
// different transfers (schedules with other tags), or the table would be too large, is every key
// found through an open-addressing table over (sender, receiver, tag) instead; both give each
// transfer its number by first appearance in rank order, so they number alike.
class TransferIndex {
 public:
  explicit TransferIndex(const std::vector<RankSchedule>& schedules) {
    const int world = static_cast<int>(schedules.size());
    first_.assign(static_cast<size_t>(world) + 1, 0);
    int tags = 1;
    for (int r = 0; r < world; ++r) {
      first_[r + 1] = first_[r] + schedules[r].xfers.size();
      for (const Xfer& x : schedules[r].xfers) {
        LONGSEQ_CHECK_MSG(
            x.peer >= 0 && x.peer < world && x.tag >= 0 && x.tag < (1 << 22) && world <= (1 << 21),
            "rank ", r, " transfer with peer ", x.peer, " tag ", x.tag, " outside the ", world,
            " ranks and 2^22 tags a replay indexes");
        tags = std::max(tags, x.tag + 1);
      }
    }
    ids_.resize(first_[world]);
    if (static_cast<double>(world) * tags > 2.0 * static_cast<double>(first_[world]) + 4096 ||
        !dense(schedules, tags))
      hashed(schedules);
  }
  /// The transfer of xfer `i` of `rank`'s list.
  uint32_t id(int rank, size_t i) const { return ids_[first_[rank] + i]; }
  /// The transfer of a side by its global index (first_side()[rank] + i).
  uint32_t id(size_t side) const { return ids_[side]; }
  /// Offset of every rank's first side in the global side order; one more at the end.
  const std::vector<size_t>& first_side() const { return first_; }
  size_t size() const { return keys_.size(); }
  const Key& key(uint32_t id) const { return keys_[id]; }

 private:
  template <class F>
  static void for_sides(const std::vector<RankSchedule>& schedules, F&& f) {
    for (int r = 0; r < static_cast<int>(schedules.size()); ++r) {
      const auto& xs = schedules[r].xfers;
      for (size_t i = 0; i < xs.size(); ++i) {
        const Xfer& x = xs[i];
        f(r, i, x.send ? Key{r, x.peer, x.tag} : Key{x.peer, r, x.tag});
      }
    }
  }

  // False (and nothing kept) when some (owner, tag) holds two transfers.
  bool dense(const std::vector<RankSchedule>& schedules, int tags) {
    struct Slot {
      int32_t other = -1;  // the side that is not the owner
      uint32_t id = 0;
    };
    std::vector<Slot> table(first_.size() * static_cast<size_t>(tags));
    bool unique = true;
    keys_.reserve(first_.back() / 2);
    for_sides(schedules, [&](int r, size_t i, const Key& k) {
      if (!unique) return;
      const auto [a, b, tag] = k;
      const bool by_receiver = tag % 2 == 0;
      Slot& slot = table[static_cast<size_t>(by_receiver ? b : a) * tags + tag];
      const int other = by_receiver ? a : b;
      if (slot.other < 0) {
        slot = {other, static_cast<uint32_t>(keys_.size())};
        keys_.push_back(k);
      } else if (slot.other != other) {
        unique = false;
        return;
      }
      ids_[first_[r] + i] = slot.id;
    });
    if (!unique) keys_.clear();
    return unique;
  }

  void hashed(const std::vector<RankSchedule>& schedules) {
    size_t cap = 16;
    while (cap < first_.back()) cap *= 2;  // >= sides, so >= 2x transfers: short probes
    const uint64_t mask = cap - 1;
    constexpr uint32_t kEmpty = ~0u;
    struct Slot {
      uint64_t key = 0;
      uint32_t id = kEmpty;
    };
    std::vector<Slot> table(cap);
    keys_.reserve(first_.back() / 2);
    for_sides(schedules, [&](int r, size_t i, const Key& k) {
      const auto [a, b, tag] = k;
      const uint64_t packed = (static_cast<uint64_t>(a) << 43) | (static_cast<uint64_t>(b) << 22) |
                              static_cast<uint64_t>(tag);
      uint64_t h = packed * 0x9E3779B97F4A7C15ull;
      h ^= h >> 29;
      for (h &= mask; table[h].id != kEmpty && table[h].key != packed; h = (h + 1) & mask) {
      }
      if (table[h].id == kEmpty) {
        table[h] = {packed, static_cast<uint32_t>(keys_.size())};
        keys_.push_back(k);
      }
      ids_[first_[r] + i] = table[h].id;
    });
  }

  std::vector<size_t> first_;  // [rank]: offset of its first side in ids_
  std::vector<uint32_t> ids_;
  std::vector<Key> keys_;  // by transfer id
};

// What the replay does, in its order: at step s, for every rank in turn, the waits of step s,
// then the posts, then the work, each in its schedule's list order. One stable counting sort by
// step of every rank's items (generated rank by rank, phase by phase, in list order) gives that
// order as one array, read front to back: the replay then streams through memory instead of
// visiting P cursors (and P schedules) at every step, which at P = 1024 spent most of its time
// on cache misses. Items whose step is outside [0, steps) are never run, as before.
enum class EventKind : uint32_t { wait_send, wait_recv, post_send, post_recv, work };
struct Event {
  uint32_t rank_kind;  // rank << 3 | kind
  uint32_t item;       // global side index (waits, posts) or global work index
  int rank() const { return static_cast<int>(rank_kind >> 3); }
  EventKind kind() const { return static_cast<EventKind>(rank_kind & 7); }
};

// The events in replay order; `step_end[s]` is one past the last event of step s.
std::vector<Event> events_by_step(const std::vector<RankSchedule>& schedules, int steps,
                                  const std::vector<size_t>& first_side,
                                  const std::vector<size_t>& first_work,
                                  std::vector<size_t>& step_end) {
  const int world = static_cast<int>(schedules.size());
  std::vector<size_t> at(static_cast<size_t>(steps) + 1, 0);
  auto each = [&](auto&& f) {
    for (int r = 0; r < world; ++r) {
      const RankSchedule& rs = schedules[r];
      const uint32_t rk = static_cast<uint32_t>(r) << 3;
      auto side = [&](size_t i, EventKind send, EventKind recv) {
        return Event{rk | static_cast<uint32_t>(rs.xfers[i].send ? send : recv),
                     static_cast<uint32_t>(first_side[r] + i)};
      };
      for (size_t i = 0; i < rs.xfers.size(); ++i)
        f(rs.xfers[i].wait_step, side(i, EventKind::wait_send, EventKind::wait_recv));
      for (size_t i = 0; i < rs.xfers.size(); ++i)
        f(rs.xfers[i].post_step, side(i, EventKind::post_send, EventKind::post_recv));
      for (size_t i = 0; i < rs.work.size(); ++i)
        f(rs.work[i].step, Event{rk | static_cast<uint32_t>(EventKind::work),
                                 static_cast<uint32_t>(first_work[r] + i)});
    }
  };
  each([&](int step, const Event&) {
    if (step >= 0 && step < steps) ++at[static_cast<size_t>(step) + 1];
  });
  for (int s = 0; s < steps; ++s) at[s + 1] += at[s];
  std::vector<Event> out(at[steps]);
  each([&](int step, const Event& e) {
    if (step >= 0 && step < steps) out[at[step]++] = e;
  });
  at.pop_back();  // at[s] is now the end of step s
  step_end = std::move(at);
  return out;
}

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
  std::vector<Pending> xfers;  // by transfer, numbered in the order the replay first meets them

  auto start_if_ready = [&](Pending& p) {
    if (p.post_send < 0 || p.post_recv < 0 || p.done >= 0) return;
    const int a = p.sender, b = p.receiver;
    const int cls = p.cls;
    const Link& link = cls == 0 ? m.intra : m.inter;
    const double bytes = p.bytes;
    const double begin = std::max({p.post_send, p.post_recv, out_free[a][cls], in_free[b][cls]});
    p.done = begin + link.latency_s + bytes / link.bandwidth_Bps;
    out_free[a][cls] = in_free[b][cls] = p.done;
    RankTimeline& rt = tl.ranks[a];
    if (m.spans)
      rt.spans.push_back(
          {begin, p.done, cls == 0 ? Activity::intra : Activity::inter, p.send_step});
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
  // What the model says of every transfer and work item, asked for once, rank by rank (the model's
  // functions are pure; in this order they read their own tables front to back).
  std::vector<size_t> first_work(static_cast<size_t>(world) + 1, 0);
  for (int r = 0; r < world; ++r) first_work[r + 1] = first_work[r] + schedules[r].work.size();
  std::vector<double> work_flops(first_work[world]), work_dt(first_work[world]);
  std::vector<double> bytes(index.size());  // by TransferIndex number
  std::vector<uint8_t> cls(index.size());
  for (int r = 0; r < world; ++r) {
    const RankSchedule& rs = schedules[r];
    for (size_t i = 0; i < rs.xfers.size(); ++i) {
      const Xfer& x = rs.xfers[i];
      if (!x.send) continue;
      const uint32_t id = index.id(r, i);
      bytes[id] = m.bytes(r, x);
      cls[id] = m.same_node(r, x.peer) ? 0 : 1;
    }
    for (size_t i = 0; i < rs.work.size(); ++i) {
      const Work& w = rs.work[i];
      if (w.step < 0 || w.step >= steps) continue;  // never run
      const double f = m.flops(r, w);
      work_flops[first_work[r] + i] = f;
      work_dt[first_work[r] + i] = (m.cost_flops ? m.cost_flops(r, w) : f) / m.flops_per_s;
    }
  }
  std::vector<size_t> step_end;
  std::vector<Event> events =
      events_by_step(schedules, steps, index.first_side(), first_work, step_end);
  // Renumber in replay order: a transfer's Pending, and a work item's FLOPs, then lie where the
  // replay reaches them next (events name them by these numbers from here on).
  constexpr uint32_t kUnset = ~0u;
  std::vector<uint32_t> renumber(index.size(), kUnset);
  std::vector<double> event_flops, event_dt;
  xfers.reserve(index.size());
  for (Event& ev : events) {
    if (ev.kind() == EventKind::work) {
      const size_t w = ev.item;
      ev.item = static_cast<uint32_t>(event_flops.size());
      event_flops.push_back(work_flops[w]);
      event_dt.push_back(work_dt[w]);
      continue;
    }
    const uint32_t id = index.id(ev.item);
    uint32_t& n = renumber[id];
    if (n == kUnset) {
      n = static_cast<uint32_t>(xfers.size());
      Pending p;
      p.bytes = bytes[id];
      p.cls = cls[id];
      p.sender = std::get<0>(index.key(id));
      p.receiver = std::get<1>(index.key(id));
      xfers.push_back(p);
    }
    ev.item = n;
  }
  size_t e = 0;
  for (int s = 0; s < steps; ++s)
    for (; e < step_end[s]; ++e) {
      const Event ev = events[e];
      const int r = ev.rank();
      switch (ev.kind()) {
        case EventKind::wait_send:
        case EventKind::wait_recv: {
          const Pending& p = xfers[ev.item];
          LONGSEQ_CHECK_MSG(p.done >= 0, "rank ", r, " waits at step ", s,
                            " for a transfer with peer ", r == p.sender ? p.receiver : p.sender,
                            " that was not posted by both sides");
          double arrive = now[r];
          if (ev.kind() == EventKind::wait_recv && m.wait_copy.bandwidth_Bps > 0) {
            const double copy = m.wait_copy.latency_s + p.bytes / m.wait_copy.bandwidth_Bps;
            tl.ranks[r].wait_copy_s += copy;
            arrive += copy;
          }
          now[r] = std::max(arrive, p.done);
          break;
        }
        case EventKind::post_send:
        case EventKind::post_recv: {
          Pending& p = xfers[ev.item];
          if (ev.kind() == EventKind::post_send) {
            p.post_send = now[r];
            p.send_step = s;
          } else {
            p.post_recv = now[r];
          }
          start_if_ready(p);
          break;
        }
        case EventKind::work: {
          const double f = event_flops[ev.item], dt = event_dt[ev.item];
          if (m.spans) tl.ranks[r].spans.push_back({now[r], now[r] + dt, Activity::compute, s});
          tl.ranks[r].compute_s += dt;
          tl.ranks[r].flops += f;
          now[r] += dt;
          break;
        }
      }
    }
  collectives(false);
  for (uint32_t id = 0; id < index.size(); ++id) {
    const Key& k = index.key(id);
    LONGSEQ_CHECK_MSG(renumber[id] != kUnset && xfers[renumber[id]].done >= 0, "transfer ",
                      std::get<0>(k), " -> ", std::get<1>(k), " tag ", std::get<2>(k),
                      " has only one side");
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
