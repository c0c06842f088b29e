#include "longseq/attention/schedule.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include "longseq/core/error.hpp"

namespace longseq::attention {

using core::fail;
using core::require;

comm::Topology schedule_topology(const Algorithm& algo, const comm::Topology& group) {
  if (algo.route != Route::double_ring || algo.inner == 0) return group;
  require(group.size() % algo.inner == 0, "attention", "--algo ", algo.name(),
          " needs the inner ring size ", algo.inner, " to divide the group's ", group.size(),
          " ranks");
  return comm::Topology::declared(group.size(), group.size() / algo.inner);
}

namespace {

// Coordinates of every rank on the (node, local) grid of the double ring.
struct Grid {
  int nodes = 1, per = 1;
  std::vector<int> node, local;  // by rank
  std::vector<int> rank_at;      // [node * per + local]
};

Grid make_grid(const comm::Topology& topo) {
  Grid g;
  const int world = topo.size();
  g.nodes = topo.num_nodes();
  require(topo.uniform(), "attention",
          "the double ring needs the same number of ranks on every node; ", g.nodes, " nodes hold ",
          world, " ranks unevenly");
  g.per = world / g.nodes;
  g.node.resize(world);
  g.local.resize(world);
  g.rank_at.assign(world, -1);
  for (int r = 0; r < world; ++r) {
    g.node[r] = topo.node(r);
    g.local[r] = topo.local_rank(r);
    g.rank_at[g.node[r] * g.per + g.local[r]] = r;
  }
  return g;
}

// The route tree of one bundle: visit step, parent and gradient chain of every rank.
struct Tree {
  std::vector<int> step, parent, chain;
  std::vector<uint8_t> needs, kept;
};

Tree route_tree(int origin, const Grid& g, Route route, const PairTable& pairs, bool bundle_is_q) {
  const int world = g.nodes * g.per;
  Tree t;
  t.step.resize(world);
  t.parent.assign(world, -1);
  t.chain.resize(world);
  t.needs.resize(world);
  t.kept.assign(world, 0);
  for (int r = 0; r < world; ++r) {
    if (route == Route::flat) {
      t.step[r] = (r - origin + world) % world;
      t.parent[r] = r == origin ? -1 : (r - 1 + world) % world;
      t.chain[r] = 0;
    } else {
      const int o = (g.node[r] - g.node[origin] + g.nodes) % g.nodes;
      const int i = (g.local[r] - g.local[origin] + g.per) % g.per;
      t.step[r] = o * g.per + i;
      if (i > 0)
        t.parent[r] = g.rank_at[g.node[r] * g.per + (g.local[r] - 1 + g.per) % g.per];
      else if (o > 0)
        t.parent[r] = g.rank_at[((g.node[r] - 1 + g.nodes) % g.nodes) * g.per + g.local[r]];
      t.chain[r] = g.node[r];
    }
    t.needs[r] = bundle_is_q ? pairs.needs(origin, r) : pairs.needs(r, origin);
  }
  // Keep a rank when it or anything below it needs the bundle (children have larger steps).
  std::vector<int> order(world);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return t.step[a] > t.step[b]; });
  for (int r : order) {
    if (t.needs[r]) t.kept[r] = 1;
    if (t.kept[r] && t.parent[r] >= 0) t.kept[t.parent[r]] = 1;
  }
  t.kept[origin] = 1;
  return t;
}

// Greedy interval colouring: intervals [start, free) share a slot when they do not overlap.
class SlotPool {
 public:
  int take(int start, int free) {
    LONGSEQ_CHECK_MSG(free > start, "slot interval [", start, ", ", free, ")");
    for (size_t s = 0; s < busy_until_.size(); ++s)
      if (busy_until_[s] <= start) {
        busy_until_[s] = free;
        return static_cast<int>(s);
      }
    busy_until_.push_back(free);
    return static_cast<int>(busy_until_.size()) - 1;
  }
  int size() const { return static_cast<int>(busy_until_.size()); }

 private:
  std::vector<int> busy_until_;
};

struct Interval {
  int start, free;
  int kind;  // 0 data (bundle origin), 1 grad contribution, 2 grad receive
  int origin;
  int index;  // grad receive: index into pending receives
};

}  // namespace

RankSchedule make_schedule(int rank, const comm::Topology& topo, const Layout& layout,
                           const PairTable& pairs, Algorithm algo, Pass pass) {
  const int world = topo.size();
  require(layout.world() == world, "attention", "layout world ", layout.world(),
          " != topology world ", world);
  LONGSEQ_CHECK(rank >= 0 && rank < world);
  require(algo.ring_family(), "attention", "--algo ", algo.name(),
          " has no schedule (ring family only)");
  // The flat ring ignores nodes (one grid row), so any placement of ranks runs it.
  const Grid g = make_grid(algo.route == Route::flat ? comm::Topology(world) : topo);
  const bool bq = bundle_is_query(algo, pass);
  const bool backward = pass == Pass::backward;
  const int chunks = pairs.chunks_per_rank();

  RankSchedule rs;
  rs.rank = rank;
  std::vector<Interval> intervals;
  // Transfers whose slot is filled in after colouring: (xfer index, interval index).
  std::vector<std::pair<size_t, size_t>> slot_of_xfer;
  std::vector<std::pair<size_t, size_t>> slot_of_work, grad_of_work;
  struct PendingAcc {
    int step;
    size_t from_interval;
    long into_interval;  // -1 home
  };
  std::vector<PendingAcc> accs;
  int last_step = 0;

  for (int j = 0; j < world; ++j) {
    const Tree t = route_tree(j, g, algo.route, pairs, bq);
    if (!t.kept[rank]) continue;
    const int my = t.step[rank];

    // ---- data part: receive from the parent, forward to kept children, compute if needed.
    int start = j == rank ? 0 : t.step[t.parent[rank]];
    int free = my + 1;
    std::vector<int> children;
    for (int r = 0; r < world; ++r)
      if (t.parent[r] == rank && t.kept[r]) children.push_back(r);
    for (int c : children) free = std::max(free, t.step[c]);
    intervals.push_back({start, free, 0, j, 0});
    const size_t data_iv = intervals.size() - 1;
    if (j == rank) {
      slot_of_work.push_back({static_cast<size_t>(-1), data_iv});  // own slot marker
    } else {
      rs.xfers.push_back({false, t.parent[rank], j, Part::data, -1, start, my});
      slot_of_xfer.push_back({rs.xfers.size() - 1, data_iv});
    }
    for (int c : children) {
      rs.xfers.push_back({true, c, j, Part::data, -1, my, t.step[c]});
      slot_of_xfer.push_back({rs.xfers.size() - 1, data_iv});
      last_step = std::max(last_step, t.step[c]);
    }

    // ---- compute.
    long contrib_iv = -1;
    if (t.needs[rank]) {
      Work w;
      w.step = my;
      w.origin = j;
      const int qr = bq ? j : rank, kr = bq ? rank : j;
      for (int qc = 0; qc < chunks; ++qc)
        for (int kc = 0; kc < chunks; ++kc) {
          const PairKind k = pairs.kind(qr, qc, kr, kc);
          if (k != PairKind::empty) w.pairs.push_back({qc, kc, k});
        }
      rs.work.push_back(std::move(w));
      slot_of_work.push_back({rs.work.size() - 1, data_iv});
      last_step = std::max(last_step, my);
    }

    if (!backward) continue;

    // ---- gradient part: chains of computing ranks (origin excluded) in visit order.
    std::map<int, std::vector<int>> chains;  // chain id -> ranks by step
    for (int r = 0; r < world; ++r)
      if (r != j && t.needs[r]) chains[t.chain[r]].push_back(r);
    for (auto& [id, members] : chains) {
      std::sort(members.begin(), members.end(),
                [&](int a, int b) { return t.step[a] < t.step[b]; });
      for (size_t m = 0; m < members.size(); ++m) {
        const int a = members[m];
        const bool last = m + 1 == members.size();
        const int next = last ? j : members[m + 1];
        const int send_post = t.step[a] + 1;
        const int recv_wait = last ? t.step[a] + 2 : t.step[next] + 1;
        if (a == rank) {
          // Our contribution slot lives from our compute until the forward of the sum completes.
          intervals.push_back({my, recv_wait, 1, j, 0});
          contrib_iv = static_cast<long>(intervals.size() - 1);
          rs.xfers.push_back({true, next, j, Part::grad, -1, send_post, recv_wait});
          slot_of_xfer.push_back({rs.xfers.size() - 1, static_cast<size_t>(contrib_iv)});
          last_step = std::max(last_step, recv_wait);
        }
        if (next == rank) {
          // A partial arrives into a receive slot and is added at recv_wait.
          intervals.push_back({send_post, recv_wait, 2, j, 0});
          const size_t recv_iv = intervals.size() - 1;
          rs.xfers.push_back({false, a, j, Part::grad, -1, send_post, recv_wait});
          slot_of_xfer.push_back({rs.xfers.size() - 1, recv_iv});
          accs.push_back({recv_wait, recv_iv, -2});  // into: resolved below
          last_step = std::max(last_step, recv_wait);
        }
      }
    }
    // Receives for this bundle add into our contribution slot, or home when we are the origin.
    for (auto& acc : accs)
      if (acc.into_interval == -2) acc.into_interval = j == rank ? -1 : contrib_iv;
    if (contrib_iv >= 0)
      grad_of_work.push_back({rs.work.size() - 1, static_cast<size_t>(contrib_iv)});
  }

  // ---- colour data and grad intervals separately, in order of start.
  std::vector<int> slot(intervals.size(), -1);
  std::vector<size_t> order(intervals.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return intervals[a].start < intervals[b].start; });
  SlotPool data_pool, grad_pool;
  for (size_t i : order) {
    const Interval& iv = intervals[i];
    slot[i] = (iv.kind == 0 ? data_pool : grad_pool).take(iv.start, iv.free);
  }
  rs.data_slots = data_pool.size();
  rs.grad_slots = grad_pool.size();
  for (auto [x, iv] : slot_of_xfer) rs.xfers[x].slot = slot[iv];
  for (auto [w, iv] : slot_of_work) {
    if (w == static_cast<size_t>(-1))
      rs.own_slot = slot[iv];
    else
      rs.work[w].slot = slot[iv];
  }
  for (auto [w, iv] : grad_of_work) rs.work[w].grad_slot = slot[iv];
  for (const auto& acc : accs)
    rs.accumulates.push_back(
        {acc.step, slot[acc.from_interval],
         acc.into_interval < 0 ? -1 : slot[static_cast<size_t>(acc.into_interval)]});
  std::sort(rs.work.begin(), rs.work.end(),
            [](const Work& a, const Work& b) { return a.step < b.step; });
  std::stable_sort(rs.accumulates.begin(), rs.accumulates.end(),
                   [](const Accumulate& a, const Accumulate& b) { return a.step < b.step; });
  for (const Xfer& x : rs.xfers) last_step = std::max(last_step, x.wait_step);
  rs.num_steps = last_step + 1;
  return rs;
}

}  // namespace longseq::attention
