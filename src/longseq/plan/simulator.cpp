#include "longseq/plan/simulator.hpp"

#include <algorithm>
#include <cstdio>
#include <array>
#include <map>
#include <tuple>

#include "longseq/core/error.hpp"

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
    return x.send ? Key{rank, x.peer, x.tag()} : Key{x.peer, rank, x.tag()};
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
    rt.spans.push_back({begin, p.done, cls == 0 ? Activity::intra : Activity::inter, p.send->post_step});
    (cls == 0 ? rt.messages_intra : rt.messages_inter) += 1;
    (cls == 0 ? rt.bytes_intra : rt.bytes_inter) += bytes;
  };

  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < world; ++r) {
      const RankSchedule& rs = schedules[r];
      for (const Xfer& x : rs.xfers)
        if (x.wait_step == s) {
          const Pending& p = xfers[key_of(r, x)];
          LONGSEQ_CHECK_MSG(p.done >= 0, "rank ", r, " waits at step ", s, " for a transfer with peer ",
                            x.peer, " that was not posted by both sides");
          double arrive = now[r];
          if (!x.send && m.wait_copy.bandwidth_Bps > 0) {
            const double copy = m.wait_copy.latency_s + m.bytes(*p.send) / m.wait_copy.bandwidth_Bps;
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
  const int world = static_cast<int>(t.ranks.size());
  const double width = 1000, left = 70, row = 9, lane = 3 * row + 8, top = 40;
  const double height = top + world * lane + 40;
  const double scale = t.makespan > 0 ? width / t.makespan : 1.0;
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"monospace\" font-size=\"10\">\n",
                left + width + 20, height);
  out += buf;
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"16\" font-size=\"12\">%s (makespan %.6g s)</text>\n",
                left, title.c_str(), t.makespan);
  out += buf;
  const char* colors[3] = {"#3b7dd8", "#37a651", "#d8733b"};
  const char* names[3] = {"compute", "intra-node send", "inter-node send"};
  for (int i = 0; i < 3; ++i) {
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.0f\" y=\"22\" width=\"10\" height=\"8\" fill=\"%s\"/><text x=\"%.0f\" "
                  "y=\"30\">%s</text>\n",
                  left + i * 160.0, colors[i], left + i * 160.0 + 14, names[i]);
    out += buf;
  }
  out += "<text x=\"" + std::to_string(static_cast<int>(left + 480)) +
         "\" y=\"30\">grey: idle (no compute)</text>\n";
  for (int r = 0; r < world; ++r) {
    const double y = top + r * lane;
    std::snprintf(buf, sizeof buf, "<text x=\"4\" y=\"%.1f\">rank %d</text>\n", y + 2 * row, r);
    out += buf;
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#e4e4e4\"/>\n",
                  left, y, t.ranks[r].finish * scale, row - 1);
    out += buf;
    for (const Span& s : t.ranks[r].spans) {
      const int k = static_cast<int>(s.kind);
      std::snprintf(buf, sizeof buf,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                    "stroke=\"white\" stroke-width=\"0.3\"><title>step %d %s %.6g..%.6g s</title></rect>\n",
                    left + s.begin * scale, y + k * row, std::max(0.5, (s.end - s.begin) * scale),
                    row - 1, colors[k], s.step, names[k], s.begin, s.end);
      out += buf;
    }
  }
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"%.0f\">0 s</text><text x=\"%.0f\" y=\"%.0f\">%.6g s</text>\n",
                left, height - 12, left + width - 60, height - 12, t.makespan);
  out += buf;
  out += "</svg>\n";
  return out;
}

}  // namespace longseq::plan
