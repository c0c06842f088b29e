#include "longseq/plan/simulator.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
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

}  // namespace

Timeline replay(const std::vector<RankSchedule>& schedules, const ReplayModel& m) {
  const int world = static_cast<int>(schedules.size());
  Timeline tl;
  tl.ranks.resize(world);
  std::vector<double> now(world, 0.0);
  // Ports: [rank][class] where class 0 = intra, 1 = inter.
  std::vector<std::array<double, 2>> out_free(world, {0.0, 0.0}), in_free(world, {0.0, 0.0});
  std::map<Key, Pending> xfers;
  int steps = 0;
  for (const auto& s : schedules) steps = std::max(steps, s.num_steps);

  auto key_of = [](int rank, const Xfer& x) {
    return x.send ? Key{rank, x.peer, x.tag} : Key{x.peer, rank, x.tag};
  };
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
          if (busy[cls] > 0)
            rt.spans.push_back({start, start + busy[cls],
                                cls == 0 ? Activity::intra : Activity::inter, pre ? -1 : steps});
        next[r] = start + std::max(busy[0], busy[1]);
        rt.collective_s += next[r] - now[r];
      }
      now = next;
    }
  };

  collectives(true);
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < world; ++r) {
      const RankSchedule& rs = schedules[r];
      for (const Xfer& x : rs.xfers)
        if (x.wait_step == s) {
          const Pending& p = xfers[key_of(r, x)];
          LONGSEQ_CHECK_MSG(p.done >= 0, "rank ", r, " waits at step ", s,
                            " for a transfer with peer ", x.peer,
                            " that was not posted by both sides");
          double arrive = now[r];
          if (!x.send && m.wait_copy.bandwidth_Bps > 0) {
            const double copy =
                m.wait_copy.latency_s + m.bytes(*p.send) / m.wait_copy.bandwidth_Bps;
            tl.ranks[r].wait_copy_s += copy;
            arrive += copy;
          }
          now[r] = std::max(arrive, p.done);
        }
      for (const Xfer& x : rs.xfers)
        if (x.post_step == s) {
          const Key k = key_of(r, x);
          Pending& p = xfers[k];
          if (x.send) {
            p.post_send = now[r];
            p.send = &x;
          } else {
            p.post_recv = now[r];
          }
          start_if_ready(k, p);
        }
      for (const Work& w : rs.work)
        if (w.step == s) {
          const double f = m.flops(r, w);
          const double dt = (m.cost_flops ? m.cost_flops(r, w) : f) / m.flops_per_s;
          tl.ranks[r].spans.push_back({now[r], now[r] + dt, Activity::compute, s});
          tl.ranks[r].compute_s += dt;
          tl.ranks[r].flops += f;
          now[r] += dt;
        }
    }
  }
  collectives(false);
  for (const auto& [k, p] : xfers)
    LONGSEQ_CHECK_MSG(p.done >= 0, "transfer ", std::get<0>(k), " -> ", std::get<1>(k), " tag ",
                      std::get<2>(k), " has only one side");
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
