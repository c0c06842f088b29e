#include "longseq/attention/schedule.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include "longseq/comm/group.hpp"
#include "longseq/core/error.hpp"

namespace longseq::attention {

using core::fail;
using core::require;

Pieces::Pieces(std::initializer_list<std::vector<int>> lists) {
  for (const auto& l : lists) push_back(std::span<const int>(l));
}

void Pieces::push_back(std::span<const int> list) {
  if (!data_) {
    data_ = std::make_shared<Data>();
  } else if (data_.use_count() > 1) {
    data_ = std::make_shared<Data>(*data_);  // copies never see a later append
  }
  data_->ranks.insert(data_->ranks.end(), list.begin(), list.end());
  data_->offsets.push_back(data_->ranks.size());
}

bool Pieces::operator==(const Pieces& o) const {
  if (data_ == o.data_) return true;
  if (size() != o.size()) return false;
  if (size() == 0) return true;
  return data_->offsets == o.data_->offsets && data_->ranks == o.data_->ranks;
}

comm::Topology schedule_topology(const Algorithm& algo, const comm::Topology& group) {
  if (algo.route != Route::double_ring || algo.inner == 0) return group;
  require(group.size() % algo.inner == 0, "attention", "--algo ", algo.name(),
          " needs the inner ring size ", algo.inner, " to divide the group's ", group.size(),
          " ranks");
  return comm::Topology::declared(group.size(), group.size() / algo.inner);
}

StarTrailConfig::StarTrailConfig(int world, int c, TeamPlacement placement)
    : world_(world), c_(c), placement_(placement) {
  require(world >= 1 && c >= 1, "attention", "--algo startrail:", c, " needs C >= 1 and a world of",
          " at least 1 rank, got world ", world);
  require(world % (c * c) == 0, "attention", "--algo startrail:", c, " needs C*C = ", c * c,
          " to divide world ", world);
}

StarTrailConfig::Coord StarTrailConfig::coord(int rank) const {
  LONGSEQ_CHECK_MSG(rank >= 0 && rank < world_, "rank ", rank, " of ", world_);
  const int g_len = ring_len();
  if (placement_ == TeamPlacement::teams)  // rank = (g*G + j)*C + a
    return {rank / c_ / g_len, rank / c_ % g_len, rank % c_};
  return {rank / g_len / c_, rank % g_len, rank / g_len % c_};  // rank = (g*C + a)*G + j
}

int StarTrailConfig::rank_of(const Coord& x) const {
  const int g_len = ring_len();
  LONGSEQ_CHECK(x.group >= 0 && x.group < c_ && x.slot >= 0 && x.slot < g_len && x.member >= 0 &&
                x.member < c_);
  if (placement_ == TeamPlacement::teams) return (x.group * g_len + x.slot) * c_ + x.member;
  return (x.group * c_ + x.member) * g_len + x.slot;
}

std::vector<int> StarTrailConfig::team_ranks(int team) const {
  std::vector<int> r(c_);
  for (int a = 0; a < c_; ++a) r[a] = team_member_rank(team, a);
  return r;
}

std::vector<int> StarTrailConfig::ring_ranks(int rank) const {
  std::vector<int> r(ring_len());
  for (int j = 0; j < ring_len(); ++j) r[j] = ring_step(rank, j - coord(rank).slot + ring_len());
  return r;
}

// Algorithm 2: every member of a team holds the same gathered shard, so member a serves team
// group a; the target team in that group is t / C, the target member t % C. A group's G teams
// times C members then hold the T = G*C shards exactly once each.
int StarTrailConfig::init_send_target(int rank) const {
  const int t = team_of(rank);
  return rank_of({member_of(rank), t / c_, t % c_});
}

int StarTrailConfig::init_recv_source(int rank) const {
  return team_member_rank(initial_shard(rank), coord(rank).group);
}

int StarTrailConfig::ring_step(int rank, int k) const {
  Coord x = coord(rank);
  x.slot = (x.slot + k) % ring_len();
  return rank_of(x);
}

int StarTrailConfig::shard_at_step(int rank, int step) const {
  LONGSEQ_CHECK(step >= 0 && step < ring_len());
  return initial_shard(ring_step(rank, ring_len() - step));
}

HeadSplit::HeadSplit(int64_t hq_, int64_t hkv_, int u_) : hq(hq_), hkv(hkv_), u(u_) {
  require(u >= 1, "attention", "Ulysses group size must be >= 1, got ", u);
  require(hq >= 1 && hkv >= 1 && hq % hkv == 0, "attention", "query heads ", hq,
          " must be a multiple of kv heads ", hkv);
  require(hq % u == 0, "attention", "Ulysses over ", u, " ranks needs the query heads ", hq,
          " to be divisible by ", u);
  require(hkv % u == 0 || u % hkv == 0, "attention", "Ulysses over ", u,
          " ranks needs the kv heads ", hkv, " to be divisible by ", u, " or to divide ", u,
          " (GQA group ", hq / hkv, ")");
  hq_per = hq / u;
  replicated = hkv % u != 0;
  kv_per = replicated ? 1 : hkv / u;
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

// The ring a schedule runs on: n members on a (node, local) grid, the shards each member's query
// and key sides hold, and which (query member, key member) pairs have work.
struct RingView {
  Grid g;
  Route route = Route::flat;
  Pieces qp, kp;
  std::vector<uint8_t> needs;  // [q member * n + k member]
  int size() const { return static_cast<int>(qp.size()); }
  RingView(Grid grid, Route r, Pieces q, Pieces k, const PairTable& pairs)
      : g(std::move(grid)), route(r), qp(std::move(q)), kp(std::move(k)) {
    const int n = size();
    needs.assign(static_cast<size_t>(n) * n, 0);
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b)
        for (int x : qp[a])
          for (int y : kp[b]) needs[a * n + b] |= pairs.needs(x, y) ? 1 : 0;
  }
};

// The route tree of one bundle: visit step, parent and gradient chain of every member, with what
// plan_ring asks of every member precomputed (kept children; neighbours in the gradient chain), so
// that planning one member against every bundle is linear in what it does, not in the ring size.
struct Tree {
  std::vector<int> step, parent, chain;
  std::vector<uint8_t> needs, kept;
  std::vector<int> kids_begin, kids;  // kept children of r: kids[kids_begin[r] .. kids_begin[r+1])
  // Gradient chains (the computing members, origin excluded, by chain id then step): the member
  // before r (-1: r is first) and after r (the origin when r is last); -1 when r is in no chain.
  std::vector<int> chain_prev, chain_next;
  std::vector<int> chain_last;  // the last member of every chain, by chain id
};

Tree route_tree(int origin, const RingView& v, bool bundle_is_q) {
  const int world = v.size();
  const Grid& g = v.g;
  Tree t;
  t.step.resize(world);
  t.parent.assign(world, -1);
  t.chain.resize(world);
  t.needs.resize(world);
  t.kept.assign(world, 0);
  for (int r = 0; r < world; ++r) {
    if (v.route == Route::flat) {
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
    t.needs[r] = bundle_is_q ? v.needs[origin * world + r] : v.needs[r * world + origin];
  }
  // Steps are a permutation of 0..world-1 (one member per step on either route), so the members
  // by step need no sort.
  std::vector<int> by_step(world, -1);
  for (int r = 0; r < world; ++r) {
    LONGSEQ_CHECK(t.step[r] >= 0 && t.step[r] < world && by_step[t.step[r]] < 0);
    by_step[t.step[r]] = r;
  }
  // Keep a member when it or anything below it needs the bundle (children have larger steps).
  for (int s = world - 1; s >= 0; --s) {
    const int r = by_step[s];
    if (t.needs[r]) t.kept[r] = 1;
    if (t.kept[r] && t.parent[r] >= 0) t.kept[t.parent[r]] = 1;
  }
  t.kept[origin] = 1;
  t.kids_begin.assign(world + 1, 0);
  for (int r = 0; r < world; ++r)
    if (t.parent[r] >= 0 && t.kept[r]) ++t.kids_begin[t.parent[r] + 1];
  for (int r = 0; r < world; ++r) t.kids_begin[r + 1] += t.kids_begin[r];
  t.kids.resize(t.kids_begin[world]);
  std::vector<int> fill(t.kids_begin.begin(), t.kids_begin.end() - 1);
  for (int r = 0; r < world; ++r)  // ascending r within every parent
    if (t.parent[r] >= 0 && t.kept[r]) t.kids[fill[t.parent[r]]++] = r;
  t.chain_prev.assign(world, -1);
  t.chain_next.assign(world, -1);
  std::map<int, int> tail;  // chain id -> its last member so far (members visited by step)
  for (int s = 0; s < world; ++s) {
    const int r = by_step[s];
    if (r == origin || !t.needs[r]) continue;
    auto [it, fresh] = tail.try_emplace(t.chain[r], r);
    if (!fresh) {
      t.chain_prev[r] = it->second;
      t.chain_next[it->second] = r;
      it->second = r;
    }
  }
  for (const auto& [id, last] : tail) {
    t.chain_next[last] = origin;
    t.chain_last.push_back(last);
  }
  return t;
}

// The route trees of one ring stored member by member: what plan_ring asks of member r about
// the bundle of origin j (its step, its parent's, its kept children's and its gradient chain
// neighbours' steps) lies at visits[row(r) * n + j], so planning one member reads one contiguous
// row. (Reading n separate trees per member cost a cache miss per tree field per bundle: at
// P = 1024 most of make_schedules.) Built tree by tree from route_tree, for every member or for
// one (make_schedule).
struct Visit {
  int step = 0, parent = -1, parent_step = 0;
  int prev = -1, prev_step = 0;  // gradient chain predecessor (-1: none)
  int next = -1, next_step = 0;  // gradient chain successor (the origin after the last; -1: none)
  uint32_t kids_at = 0;          // first kept child in Forest::kids[row]
  uint32_t kids = 0;             // kept children
  uint8_t kept = 0, needs = 0;
};

struct Forest {
  int n = 0;
  std::vector<int> row_of;  // [member] -> row, -1 when the member has none
  std::vector<Visit> visits;
  std::vector<std::vector<std::pair<int, int>>> kids;   // [row]: (child, its step), by bundle
  std::vector<std::vector<std::pair<int, int>>> lasts;  // [origin]: (last of a chain, its step)
  const Visit& at(int member, int origin) const {
    return visits[static_cast<size_t>(row_of[member]) * n + origin];
  }
};

Forest route_forest(const RingView& v, bool bq, int only = -1) {
  Forest f;
  f.n = v.size();
  std::vector<int> members;
  f.row_of.assign(f.n, -1);
  for (int r = 0; r < f.n; ++r)
    if (only < 0 || r == only) {
      f.row_of[r] = static_cast<int>(members.size());
      members.push_back(r);
    }
  f.visits.resize(members.size() * static_cast<size_t>(f.n));
  f.kids.resize(members.size());
  f.lasts.resize(f.n);
  for (int j = 0; j < f.n; ++j) {
    const Tree t = route_tree(j, v, bq);
    for (size_t row = 0; row < members.size(); ++row) {
      const int r = members[row];
      Visit& x = f.visits[row * f.n + j];
      x.kept = t.kept[r];
      x.needs = t.needs[r];
      x.step = t.step[r];
      x.parent = t.parent[r];
      x.parent_step = x.parent >= 0 ? t.step[x.parent] : 0;
      x.prev = t.chain_prev[r];
      x.prev_step = x.prev >= 0 ? t.step[x.prev] : 0;
      x.next = t.chain_next[r];
      x.next_step = x.next >= 0 ? t.step[x.next] : 0;
      x.kids_at = static_cast<uint32_t>(f.kids[row].size());
      for (int c = t.kids_begin[r]; c < t.kids_begin[r + 1]; ++c)
        f.kids[row].push_back({t.kids[c], t.step[t.kids[c]]});
      x.kids = static_cast<uint32_t>(f.kids[row].size()) - x.kids_at;
    }
    for (int a : t.chain_last) f.lasts[j].push_back({a, t.step[a]});
  }
  return f;
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

// The ring part of `rs` (member rs.member of `v`): transfers, work, accumulates, slots.
void plan_ring(RankSchedule& rs, const RingView& v, const Forest& forest, const PairTable& pairs,
               bool bq, bool backward) {
  const int world = v.size(), rank = rs.member;
  const int chunks = pairs.chunks_per_rank();
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
  std::vector<size_t> hints;  // PairTable::row_near hints by (q piece, q chunk, k piece)
  std::vector<SubPair> scratch;

  const std::vector<std::pair<int, int>>& my_kids = forest.kids[forest.row_of[rank]];
  for (int j = 0; j < world; ++j) {
    const Visit& t = forest.at(rank, j);
    if (!t.kept) continue;
    const int my = t.step;

    // ---- data part: receive from the parent, forward to kept children, compute if needed.
    int start = j == rank ? 0 : t.parent_step;
    int free = my + 1;
    const auto kid0 = my_kids.begin() + t.kids_at, kid1 = kid0 + t.kids;
    for (auto c = kid0; c != kid1; ++c) free = std::max(free, c->second);
    intervals.push_back({start, free, 0, j, 0});
    const size_t data_iv = intervals.size() - 1;
    if (j == rank) {
      slot_of_work.push_back({static_cast<size_t>(-1), data_iv});  // own slot marker
    } else {
      rs.xfers.push_back({false, t.parent, j, Part::data, -1, start, my});
      slot_of_xfer.push_back({rs.xfers.size() - 1, data_iv});
    }
    for (auto c = kid0; c != kid1; ++c) {
      rs.xfers.push_back({true, c->first, j, Part::data, -1, my, c->second});
      slot_of_xfer.push_back({rs.xfers.size() - 1, data_iv});
      last_step = std::max(last_step, c->second);
    }

    // ---- compute.
    long contrib_iv = -1;
    if (t.needs) {
      Work w;
      w.step = my;
      w.origin = j;
      const auto& qs = v.qp[bq ? j : rank];
      const auto& ks = v.kp[bq ? rank : j];
      // The pairs of row(qs[a], qc, ks[b]), looked up from where the same (piece, chunk, piece)
      // slot found them for the previous bundle: the bundle's side moves on by one member while
      // ours stays, so the row (our query rank) or the column (our key rank, burst backward) is
      // read front to back.
      const size_t slots = qs.size() * static_cast<size_t>(chunks) * ks.size();
      if (hints.size() < slots) hints.resize(slots, 0);
      scratch.clear();
      for (size_t a = 0; a < qs.size(); ++a)
        for (int qc = 0; qc < chunks; ++qc)
          for (size_t b = 0; b < ks.size(); ++b) {
            size_t& hint = hints[(a * chunks + qc) * ks.size() + b];
            auto add = [&](const auto& e) {
              scratch.push_back({qc, e.kc, e.kind, static_cast<int>(a), static_cast<int>(b)});
            };
            if (bq)
              for (const auto& e : pairs.column_near(ks[b], qs[a], qc, hint)) add(e);
            else
              for (const auto& e : pairs.row_near(qs[a], qc, ks[b], hint)) add(e);
          }
      w.pairs.assign(scratch.begin(), scratch.end());  // one allocation of the exact size
      rs.work.push_back(std::move(w));
      slot_of_work.push_back({rs.work.size() - 1, data_iv});
      last_step = std::max(last_step, my);
    }

    if (!backward) continue;

    // ---- gradient part: chains of computing ranks (origin excluded) in visit order. Member a
    // sends its partial sum to the next member (the origin after the last one) at step(a) + 1;
    // the receiver adds it at step(next) + 1 (the origin: step(a) + 2). Ours, in chain order: the
    // partial from our predecessor, then our own; the origin receives every chain's last partial.
    const size_t first_acc = accs.size();
    // `a` sends its partial to us; `last`: it is the last of its chain (we are the origin).
    auto receive = [&](int a, int a_step, bool last) {
      const int send_post = a_step + 1;
      const int recv_wait = last ? a_step + 2 : my + 1;
      // A partial arrives into a receive slot and is added at recv_wait.
      intervals.push_back({send_post, recv_wait, 2, j, 0});
      const size_t recv_iv = intervals.size() - 1;
      rs.xfers.push_back({false, a, j, Part::grad, -1, send_post, recv_wait});
      slot_of_xfer.push_back({rs.xfers.size() - 1, recv_iv});
      accs.push_back({recv_wait, recv_iv, -2});  // into: resolved below
      last_step = std::max(last_step, recv_wait);
    };
    if (rank == j) {
      for (const auto& [a, a_step] : forest.lasts[j]) receive(a, a_step, true);
    } else if (t.next >= 0) {
      if (t.prev >= 0) receive(t.prev, t.prev_step, false);  // its successor is us, not j
      const int next = t.next;
      const bool last = next == j;
      const int send_post = my + 1;
      const int recv_wait = last ? my + 2 : t.next_step + 1;
      // Our contribution slot lives from our compute until the forward of the sum completes.
      intervals.push_back({my, recv_wait, 1, j, 0});
      contrib_iv = static_cast<long>(intervals.size() - 1);
      rs.xfers.push_back({true, next, j, Part::grad, -1, send_post, recv_wait});
      slot_of_xfer.push_back({rs.xfers.size() - 1, static_cast<size_t>(contrib_iv)});
      last_step = std::max(last_step, recv_wait);
    }
    // Receives for this bundle add into our contribution slot, or home when we are the origin.
    for (size_t i = first_acc; i < accs.size(); ++i)
      accs[i].into_interval = j == rank ? -1 : contrib_iv;
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
  for (Xfer& x : rs.xfers) {
    last_step = std::max(last_step, x.wait_step);
    x.peer = rs.ring[x.peer];
    x.tag = x.origin * 2 + static_cast<int>(x.part);
  }
  rs.num_steps = last_step + 1;
}

std::vector<int> iota_vec(int begin, int n, int stride = 1) {
  std::vector<int> r(n);
  for (int i = 0; i < n; ++i) r[i] = begin + i * stride;
  return r;
}

}  // namespace

namespace {

// What make_schedule decides before the ring: the rank's collective steps, ring and pieces (in
// rs), and the ring's shape. Every member of one ring gets the same grid, route and pieces.
struct RingSetup {
  Pieces qp, kp;
  Grid grid;
  Route route = Route::flat;
};

RingSetup setup_schedule(RankSchedule& rs, int rank, const comm::Topology& topo,
                         const Layout& layout, Algorithm algo, Pass pass) {
  using Op = Collective::Op;
  const int world = topo.size();
  require(layout.world() == world, "attention", "layout world ", layout.world(),
          " != topology world ", world);
  LONGSEQ_CHECK(rank >= 0 && rank < world);
  const bool fwd = pass == Pass::forward;
  rs.rank = rank;
  Pieces qp, kp;
  Grid grid;
  Route route = Route::flat;
  switch (algo.family) {
    case Algorithm::Family::ring:
      rs.ring = iota_vec(0, world);
      rs.member = rank;
      for (int r = 0; r < world; ++r) qp.push_back({r});
      kp = qp;  // shared
      route = algo.route;
      // The flat ring ignores nodes (one grid row), so any placement of ranks runs it.
      grid = make_grid(route == Route::flat ? comm::Topology(world) : topo);
      break;
    case Algorithm::Family::ulysses:
    case Algorithm::Family::usp: {
      // Ulysses group u = ranks u*U .. u*U+U-1; member i of every group forms ring i.
      const int u = algo.family == Algorithm::Family::ulysses ? world : algo.degree;
      require(u >= 1 && world % u == 0, "attention", "--algo ", algo.name(),
              " needs U to divide world ", world);
      const int groups = world / u, i = rank % u;
      rs.ring = iota_vec(i, groups, u);
      rs.member = rank / u;
      for (int g = 0; g < groups; ++g) qp.push_back(iota_vec(g * u, u));
      kp = qp;  // shared
      rs.head_slices = u;
      rs.head_slice = i;
      if (u > 1) {
        const std::string part = core::cat("ulysses:", u);
        const std::vector<int> mem(qp[rs.member].begin(), qp[rs.member].end());
        using F = Field;
        rs.pre.push_back({Op::to_heads,
                          fwd ? std::vector{F::q, F::k, F::v}
                              : std::vector{F::q, F::dout, F::dvec, F::lse, F::k, F::v},
                          mem, part});
        rs.post.push_back({Op::from_heads,
                           fwd ? std::vector{F::o, F::lse} : std::vector{F::dq, F::dk, F::dv}, mem,
                           part});
      }
      grid = make_grid(comm::Topology(groups));
      break;
    }
    case Algorithm::Family::startrail: {
      const StarTrailConfig cfg(world, algo.team, algo.placement);
      rs.ring = cfg.ring_ranks(rank);
      rs.member = cfg.coord(rank).slot;
      for (int r : rs.ring) {
        qp.push_back(cfg.team_ranks(cfg.team_of(r)));
        kp.push_back(cfg.team_ranks(cfg.initial_shard(r)));
      }
      if (algo.team > 1) {
        const std::string part = core::cat(
            "team:", algo.team, ":", algo.placement == TeamPlacement::teams ? "teams" : "rings");
        const auto mem = cfg.team_ranks(cfg.team_of(rank));
        using F = Field;
        // The initial transfer of the gathered K,V and the return of dK,dV are side transfers
        // of the ring (stage_side), not collective steps: they overlap the first step's compute.
        rs.pre.push_back({Op::all_gather,
                          fwd ? std::vector{F::q, F::k, F::v}
                              : std::vector{F::q, F::dout, F::dvec, F::lse, F::k, F::v},
                          mem, part});
        if (fwd) {
          rs.post.push_back({Op::merge, {F::o, F::lse}, mem, part});
        } else {
          rs.post.push_back({Op::reduce_scatter, {F::dq}, mem, part});
          rs.post.push_back({Op::reduce_scatter, {F::dk, F::dv}, mem, part});
        }
      }
      grid = make_grid(comm::Topology(cfg.ring_len()));
      break;
    }
  }
  rs.q_pieces = qp;
  rs.kv_pieces = kp;
  return {std::move(qp), std::move(kp), std::move(grid), route};
}

// StarTrail with teams (C > 1): the initial transfer of the team's K,V (Algorithm 2) and the
// backward's return of their gradients as Part::side transfers of row blocks, and the steps that
// read them cut block by block, so compute on the blocks that have landed hides the rest.
//
// Before (issue 31), both were send_recv collective steps: every rank waited for the whole
// cross-host K,V before its first chunk pair, and for the whole dK,dV after its last, which was
// most of StarTrail's wait on a 1 Gbit/s link. Now, with U = pieces x split blocks:
//  * step 0 only posts: every block's receive and send (the gathered side is complete after
//    `pre`), so the blocks travel back to back from the start;
//  * the ring's step 0 (own bundle: forward K,V, backward Q against the own key side) becomes
//    steps 1..U, block u's chunk pairs at step 1 + u, right after block u's wait; every later ring
//    step moves by U. Blocks are taken in (piece, chunk) order, which is the order the unstaged
//    work met its chunk pairs in for every output row, so the sums and merges round alike;
//  * in the forward the own K,V bundle is complete only after the last block: its sends move from
//    step 0 to step U (the executor packs the own slot there; the staged steps read the side);
//  * in the backward the ring's last step is cut the same way (G > 1; for G = 1 it is the one
//    already cut), and block u's dK,dV go back at the step after the last work that writes them;
//    the receiver waits at one final step F, the same for every rank, before `post`.
// Sends wait at the final step too: a slow send never stalls the sender's compute.
void stage_side(RankSchedule& rs, const StarTrailConfig& cfg, const Layout& layout,
                const PairTable& pairs, bool backward) {
  const int c = cfg.c(), g_len = cfg.ring_len();
  const int cpr = pairs.chunks_per_rank();
  const int split = std::min(cpr, kSideSplit);
  const int units = c * split;
  const int64_t l = layout.local_len();
  const bool bq = backward;  // StarTrail's backward circulates queries (bundle_is_query)
  auto block_of = [&](int kc) { return kc * split / cpr; };
  const std::vector<int> pieces(rs.kv_pieces[rs.member].begin(), rs.kv_pieces[rs.member].end());
  LONGSEQ_CHECK(static_cast<int>(pieces.size()) == c);
  rs.side_units = units;

  auto shift_after = [&](int at, int by) {
    for (Xfer& x : rs.xfers) {
      if (x.post_step > at) x.post_step += by;
      if (x.wait_step > at) x.wait_step += by;
    }
    for (Work& w : rs.work)
      if (w.step > at) w.step += by;
    for (Accumulate& a : rs.accumulates)
      if (a.step > at) a.step += by;
    rs.num_steps += by;
  };
  // The work at step `at` (if any) as one work per non-empty block, block u at step first + u.
  auto cut = [&](int at, int first) {
    auto it =
        std::find_if(rs.work.begin(), rs.work.end(), [&](const Work& w) { return w.step == at; });
    if (it == rs.work.end()) return;
    Work whole = std::move(*it);
    rs.work.erase(it);
    std::vector<std::vector<SubPair>> blocks(units);
    for (const SubPair& p : whole.pairs) blocks[p.kp * split + block_of(p.kc)].push_back(p);
    bool first_part = true;
    for (int u = 0; u < units; ++u) {
      if (blocks[u].empty()) continue;
      Work w;
      w.pairs.assign(blocks[u].begin(), blocks[u].end());
      w.step = first + u;
      w.origin = whole.origin;
      w.slot = whole.slot;
      w.grad_slot = whole.grad_slot;
      w.unit = u;
      w.clear_grad = first_part;
      first_part = false;
      rs.work.push_back(std::move(w));
    }
    std::stable_sort(rs.work.begin(), rs.work.end(),
                     [](const Work& a, const Work& b) { return a.step < b.step; });
  };

  // Step 0 -> steps 1..U; everything after it moves by U.
  shift_after(0, units);
  if (!bq)
    for (Xfer& x : rs.xfers)
      if (x.part == Part::data && x.post_step == 0) x.post_step = units;
  cut(0, 1);
  if (backward && g_len > 1) {
    // The ring's last step, the same on every rank: a shift that depended on the rank's own last
    // work would move a transfer's post on one side and not its wait on the other.
    const int last = g_len - 1 + units;
    shift_after(last, units - 1);
    cut(last, last);
  }

  // Blocks: the rows of every piece cut at its rank's chunk boundaries. Our key side holds the
  // shards of `pieces`; the side we send (the gathered one) and the gradients we get back, our
  // team's.
  struct Rows {
    int64_t begin, rows;
  };
  auto rows_of = [&](std::span<const int> ranks) {
    std::vector<Rows> r(units);
    for (int m = 0; m < c; ++m) {
      const auto& chunks = layout.chunks(ranks[m]);
      for (int b = 0; b < split; ++b) {
        int kc0 = 0;
        while (kc0 < cpr && block_of(kc0) < b) ++kc0;
        int kc1 = kc0;
        while (kc1 < cpr && block_of(kc1) == b) ++kc1;
        const int64_t begin = b == 0 ? 0 : chunks[kc0].local_begin;
        const int64_t end = b == split - 1 ? l : chunks[kc1].local_begin;
        LONGSEQ_CHECK_MSG(begin <= end, "side block ", b, " of rank ", ranks[m], " rows ", begin,
                          "..", end);
        r[m * split + b] = {begin, end - begin};
      }
    }
    return r;
  };
  const std::vector<Rows> side_rows = rows_of(pieces);
  const std::vector<int> team = cfg.team_ranks(cfg.team_of(rs.rank));
  const std::vector<Rows> team_rows = rows_of(team);
  // The final step: after every post of every rank (so one bound for all ranks of the world).
  const int bound = backward ? (g_len > 1 ? (g_len - 1) + 2 * units + 1 : units + 2) : 0;
  const int final_step = std::max(rs.num_steps, bound);
  rs.num_steps = final_step + 1;
  const int out = cfg.init_send_target(rs.rank), in = cfg.init_recv_source(rs.rank);
  const int n = static_cast<int>(rs.ring.size());
  auto add = [&](bool send, int peer, Field f, int field, int u, const std::vector<Rows>& rows,
                 int post, int wait) {
    rs.side_blocks.push_back({f, u / split, u, rows[u].begin, rows[u].rows});
    rs.xfers.push_back({send, peer, -1, Part::side, static_cast<int>(rs.side_blocks.size()) - 1,
                        post, wait, 2 * n + field * units + u});
  };
  // Initial transfer: receive from `in`, send our gathered side to `out` (none to ourselves).
  for (int u = 0; u < units; ++u)
    for (int fi = 0; fi < 2; ++fi) {
      const Field f = fi == 0 ? Field::k : Field::v;
      if (in != rs.rank) add(false, in, f, fi, u, side_rows, 0, 1 + u);
      if (out != rs.rank) add(true, out, f, fi, u, team_rows, 0, final_step);
    }
  if (!backward) return;
  // Return: block u of dK,dV goes back to `in` once the last work that writes it is done; ours
  // come from `out`. Both sides post at one rank-independent step, the one after block u's part
  // of the cut last step (last + u: no work writes block u later on any rank), not at the
  // sender's own last work: a tagless transport (NCCL) runs each rank's posted steps in order on
  // one stream, so a receive posted at step 0 for a send posted at the peer's step 5 would hold
  // back every step after 0 on the receiver, including transfers the peer needs to reach step 5
  // (the pair-order rule, comm/group.hpp; tests/attention/pair_order_test.cpp).
  const int last_cut = g_len > 1 ? g_len - 1 + units : 1;
  std::vector<int> done(units, 0);
  for (const Work& w : rs.work)
    for (const SubPair& p : w.pairs) {
      const int u = p.kp * split + block_of(p.kc);
      done[u] = std::max(done[u], w.step);
    }
  for (int u = 0; u < units; ++u) {
    const int post = last_cut + u + 1;
    LONGSEQ_CHECK_MSG(done[u] < post && post < final_step, "side block ", u, " done at step ",
                      done[u], ", returned at ", post, ", final step ", final_step);
    for (int fi = 2; fi < 4; ++fi) {
      const Field f = fi == 2 ? Field::dk : Field::dv;
      if (out != rs.rank) add(false, out, f, fi, u, team_rows, post, final_step);
      if (in != rs.rank) add(true, in, f, fi, u, side_rows, post, final_step);
    }
  }
}

// Ulysses head groups (schedule.hpp): the pre / post all-to-alls of `rs` become Part::heads
// transfers, group by group, and its ring runs once per head group on the group's heads.
//
// Group g's ring is the unsplit ring shifted by 1 + g * K steps (K = ring members: every work of
// the flat ring is at a step below K), with its own slots (data and grad slots g * slots .. ) and
// tags (g * 2n ..); the shifts are the same on every rank, so matching sends and receives stay at
// one step and the posting order per pair is group by group, as before within a group. A group's
// ring may still be draining (gradient partials going home) while the next group's starts.
// Group g's to_heads blocks are posted at 1 + (g - 1) * K (step 0 for group 0) and waited at the
// start of its ring; its from_heads blocks are posted once its ring has ended, at
// 1 + g * K + S (S: steps of the longest ring schedule of any rank), and waited at the final step.
// With one ring member (Ulysses over the whole world) K = S = 1: group g computes at 1 + g.
void split_heads(RankSchedule& rs, HeadCounts heads, bool backward) {
  if (rs.head_slices <= 1 || heads.q <= 0 || rs.pre.size() != 1 || rs.post.size() != 1 ||
      rs.side_units > 0)
    return;
  const HeadSplit hs(heads.q, heads.kv, rs.head_slices);
  if (hs.replicated) return;  // one kv head per side: nothing to split along kv heads
  const int n = static_cast<int>(rs.ring.size());
  // The largest group count that divides the side's kv heads and keeps every group's ring tags
  // and head tags inside the pass's half of comm's tag space (only the largest worlds with
  // two-member Ulysses groups come near it).
  int g_count = 1;
  for (int g = head_groups_for(hs.kv_per); g > 1; --g)
    if (hs.kv_per % g == 0 &&
        static_cast<int64_t>(g) * (2 * n + 2 * kFieldCount) <= comm::kMaxTag / 2) {
      g_count = g;
      break;
    }
  if (g_count <= 1) return;
  const Collective in = std::move(rs.pre.front()), out = std::move(rs.post.front());
  rs.pre.clear();
  rs.post.clear();
  LONGSEQ_CHECK(in.op == Collective::Op::to_heads && out.op == Collective::Op::from_heads);
  // K and S for the flat ring USP runs (schedule.hpp): works at steps < n, waits at most two
  // steps after the last (a backward's gradient partials going home).
  const int stride = n;
  const int span = n == 1 ? 1 : (backward ? n + 2 : n);
  LONGSEQ_CHECK_MSG(rs.num_steps <= span, "rank ", rs.rank, ": ring schedule of ", rs.num_steps,
                    " steps, more than the ", span, " of a flat ring of ", n);
  for (const Work& w : rs.work) LONGSEQ_CHECK(w.step < stride);
  rs.head_groups = g_count;
  rs.group_stride = stride;
  const int me = rs.head_slice;
  LONGSEQ_CHECK(in.members.at(me) == rs.rank);
  const int final_step = 1 + (g_count - 1) * stride + span + 1;
  const int dslots = rs.data_slots, gslots = rs.grad_slots;
  std::vector<Work> works;
  std::vector<Xfer> xfers;
  std::vector<Accumulate> accs;
  for (int g = 0; g < g_count; ++g) {
    const int by = 1 + g * stride;
    for (const Work& w : rs.work) {
      Work x = w;
      x.step += by;
      x.head_group = g;
      if (x.slot >= 0) x.slot += g * dslots;
      if (x.grad_slot >= 0) x.grad_slot += g * gslots;
      works.push_back(std::move(x));
    }
    for (const Accumulate& a : rs.accumulates)
      accs.push_back({a.step + by, a.from + g * gslots, a.into < 0 ? -1 : a.into + g * gslots, g});
  }
  // Transfers: every step's in list order, group by group (the unsplit order within a group).
  for (int g = 0; g < g_count; ++g)
    for (const Xfer& x : rs.xfers) {
      Xfer y = x;
      y.post_step += 1 + g * stride;
      y.wait_step += 1 + g * stride;
      y.slot += g * (x.part == Part::data ? dslots : gslots);
      y.tag += g * 2 * n;
      xfers.push_back(y);
    }
  rs.work = std::move(works);
  rs.accumulates = std::move(accs);
  rs.xfers = std::move(xfers);
  rs.data_slots = g_count * dslots;
  rs.grad_slots = g_count * gslots;
  if (n == 1) {  // nothing travels: every group's one work reads the group's sides, no bundle
    LONGSEQ_CHECK(rs.xfers.empty() && rs.accumulates.empty() && rs.grad_slots == 0);
    rs.own_slot = -1;
    rs.data_slots = 0;
    for (Work& w : rs.work) w.slot = -1;
  }
  rs.num_steps = final_step + 1;
  const int base = 2 * n * g_count;
  auto add = [&](const Collective& c, int dir, int g, int post, int recv_wait) {
    for (const Field f : c.fields)
      for (int j = 0; j < static_cast<int>(c.members.size()); ++j) {
        if (j == me) continue;  // our own slice is copied, not sent
        rs.head_blocks.push_back({c.op, f, g, j});
        const int slot = static_cast<int>(rs.head_blocks.size()) - 1;
        const int tag = base + (dir * g_count + g) * kFieldCount + static_cast<int>(f);
        rs.xfers.push_back({false, c.members[j], -1, Part::heads, slot, post, recv_wait, tag});
        rs.xfers.push_back({true, c.members[j], -1, Part::heads, slot, post, final_step, tag});
      }
  };
  // In a step's list order: the blocks the next ring needs before the outputs of the last.
  for (int g = 0; g < g_count; ++g)
    add(in, 0, g, g == 0 ? 0 : 1 + (g - 1) * stride, 1 + g * stride);
  for (int g = 0; g < g_count; ++g) add(out, 1, g, 1 + g * stride + span, final_step);
  // The executor walks the transfers of a step in list order: sort by post step, stably.
  std::stable_sort(rs.xfers.begin(), rs.xfers.end(),
                   [](const Xfer& a, const Xfer& b) { return a.post_step < b.post_step; });
  std::stable_sort(rs.work.begin(), rs.work.end(),
                   [](const Work& a, const Work& b) { return a.step < b.step; });
  std::stable_sort(rs.accumulates.begin(), rs.accumulates.end(),
                   [](const Accumulate& a, const Accumulate& b) { return a.step < b.step; });
}

}  // namespace

int head_groups_for(int64_t side_kv) {
  for (int64_t g = std::min<int64_t>(kMaxHeadGroups, side_kv); g > 1; --g)
    if (side_kv % g == 0) return static_cast<int>(g);
  return 1;
}

RankSchedule make_schedule(int rank, const comm::Topology& topo, const Layout& layout,
                           const PairTable& pairs, Algorithm algo, Pass pass, HeadCounts heads) {
  RankSchedule rs;
  RingSetup su = setup_schedule(rs, rank, topo, layout, algo, pass);
  const bool bq = bundle_is_query(algo, pass);
  const RingView view(std::move(su.grid), su.route, std::move(su.qp), std::move(su.kp), pairs);
  plan_ring(rs, view, route_forest(view, bq, rs.member), pairs, bq, pass == Pass::backward);
  if (algo.family == Algorithm::Family::startrail && algo.team > 1)
    stage_side(rs, StarTrailConfig(topo.size(), algo.team, algo.placement), layout, pairs,
               pass == Pass::backward);
  split_heads(rs, heads, pass == Pass::backward);
  return rs;
}

std::vector<RankSchedule> make_schedules(const comm::Topology& topo, const Layout& layout,
                                         const PairTable& pairs, Algorithm algo, Pass pass,
                                         HeadCounts heads) {
  const int world = topo.size();
  const bool bq = bundle_is_query(algo, pass);
  std::vector<RankSchedule> out(world);
  // Ranks by ring (first member's order); one view and one set of route trees per ring.
  std::map<std::vector<int>, std::vector<int>> rings;
  std::vector<RingSetup> setups(world);
  for (int r = 0; r < world; ++r) {
    setups[r] = setup_schedule(out[r], r, topo, layout, algo, pass);
    rings[out[r].ring].push_back(r);
  }
  for (auto& [ring, members] : rings) {
    RingSetup& su = setups[members.front()];
    for (int r : members) {
      if (r == members.front()) continue;
      LONGSEQ_CHECK_MSG(setups[r].qp == su.qp && setups[r].kp == su.kp, "rank ", r,
                        " shares its ring with rank ", members.front(), " but not its pieces");
      setups[r] = {};
      // One storage for the ring's pieces (equal lists, checked above).
      out[r].q_pieces = out[members.front()].q_pieces;
      out[r].kv_pieces = out[members.front()].kv_pieces;
    }
    const RingView view(std::move(su.grid), su.route, std::move(su.qp), std::move(su.kp), pairs);
    const Forest forest = route_forest(view, bq);
    for (int r : members) plan_ring(out[r], view, forest, pairs, bq, pass == Pass::backward);
  }
  if (algo.family == Algorithm::Family::startrail && algo.team > 1) {
    const StarTrailConfig cfg(world, algo.team, algo.placement);
    for (int r = 0; r < world; ++r) stage_side(out[r], cfg, layout, pairs, pass == Pass::backward);
  }
  for (RankSchedule& rs : out) split_heads(rs, heads, pass == Pass::backward);
  return out;
}

int64_t field_width(Field f, int64_t hq, int64_t hkv, int64_t d) {
  switch (f) {
    case Field::k:
    case Field::v:
    case Field::dk:
    case Field::dv:
      return hkv * d;
    case Field::dvec:
    case Field::lse:
      return hq;
    default:
      return hq * d;
  }
}

int64_t field_bytes(Field f, const Dims& dims) {
  return f <= Field::dout ? dims.elem : 4;
}

int64_t side_hq(const RankSchedule& rs, const Dims& dm) {
  return dm.hq / rs.head_slices;
}
int64_t side_hkv(const RankSchedule& rs, const Dims& dm) {
  return rs.head_slices == 1 ? dm.hkv : HeadSplit(dm.hq, dm.hkv, rs.head_slices).kv_per;
}

namespace {
// Heads of one bundle: the side's, or one head group's (RankSchedule::head_groups).
int64_t bundle_hq(const RankSchedule& rs, const Dims& dm) {
  return side_hq(rs, dm) / rs.head_groups;
}
int64_t bundle_hkv(const RankSchedule& rs, const Dims& dm) {
  return side_hkv(rs, dm) / rs.head_groups;
}
}  // namespace

std::vector<bool> used_data_slots(const RankSchedule& rs, bool bq) {
  std::vector<bool> used(static_cast<size_t>(rs.data_slots), false);
  for (const Xfer& x : rs.xfers)
    if (x.part == Part::data) used[static_cast<size_t>(x.slot)] = true;
  if (bq && rs.own_slot >= 0) {
    const int groups = std::max(rs.head_groups, 1);
    for (int g = 0; g < groups; ++g)
      used[static_cast<size_t>(rs.own_slot + g * (rs.data_slots / groups))] = true;
  }
  for (const Work& w : rs.work)
    if (w.slot >= 0 && (bq || w.origin != rs.member)) used[static_cast<size_t>(w.slot)] = true;
  return used;
}

int used_data_slot_count(const RankSchedule& rs, bool bq) {
  const std::vector<bool> used = used_data_slots(rs, bq);
  return static_cast<int>(std::count(used.begin(), used.end(), true));
}

BundleLayout data_layout(const RankSchedule& rs, const Algorithm& algo, Pass pass, const Dims& dm) {
  const bool bq = bundle_is_query(algo, pass);
  const int64_t rows = dm.l * static_cast<int64_t>(bq ? rs.q_pieces[rs.member].size()
                                                      : rs.kv_pieces[rs.member].size());
  const int64_t hq = bundle_hq(rs, dm);
  const int64_t part = rows * (bq ? hq : bundle_hkv(rs, dm)) * dm.d;
  BundleLayout b;
  b.second = static_cast<size_t>(part * dm.elem);
  b.bytes = 2 * b.second;
  if (!bq) return b;
  // D and LSE stay fp32: softmax statistics every score is measured against (a bf16 LSE would
  // put a 2^-8 relative error into every exp(s - lse)).
  b.dvec = (b.bytes + 3) / 4 * 4;
  b.lse = b.dvec + static_cast<size_t>(rows * hq) * 4;
  b.bytes = b.lse + static_cast<size_t>(rows * hq) * 4;
  return b;
}

int64_t grad_elems(const RankSchedule& rs, const Algorithm& algo, Pass pass, const Dims& dm) {
  if (pass == Pass::forward) return 0;
  if (bundle_is_query(algo, pass))
    return dm.l * static_cast<int64_t>(rs.q_pieces[rs.member].size()) * bundle_hq(rs, dm) * dm.d;
  return 2 * dm.l * static_cast<int64_t>(rs.kv_pieces[rs.member].size()) * bundle_hkv(rs, dm) *
         dm.d;
}

int64_t head_block_bytes(const RankSchedule& rs, const HeadBlock& b, const Dims& dm) {
  const int64_t g = rs.head_groups;
  return dm.l * field_width(b.field, side_hq(rs, dm) / g, side_hkv(rs, dm) / g, dm.d) *
         field_bytes(b.field, dm);
}

PassBytes schedule_bytes(const RankSchedule& rs, const Algorithm& algo, Pass pass, const Dims& dm) {
  PassBytes b;
  const int64_t hq = side_hq(rs, dm), hkv = side_hkv(rs, dm);
  for (const auto* list : {&rs.pre, &rs.post})
    for (const Collective& c : *list)
      for (Field f : c.fields) {
        const int64_t others = static_cast<int64_t>(c.members.size()) - 1;
        const int64_t row = field_bytes(f, dm);
        switch (c.op) {
          case Collective::Op::all_gather:
          case Collective::Op::reduce_scatter:
          case Collective::Op::merge:
            b.collective += others * dm.l * field_width(f, dm.hq, dm.hkv, dm.d) * row;
            break;
          case Collective::Op::to_heads:
          case Collective::Op::from_heads:
            b.collective += others * dm.l * field_width(f, hq, hkv, dm.d) * row;
            break;
        }
      }
  const int64_t data = static_cast<int64_t>(data_layout(rs, algo, pass, dm).bytes);
  const int64_t grad = grad_elems(rs, algo, pass, dm) * 4;
  for (const Xfer& x : rs.xfers) {
    if (!x.send || x.peer == rs.rank) continue;
    if (x.part == Part::heads) {
      b.collective += head_block_bytes(rs, rs.head_blocks[x.slot], dm);
    } else if (x.part == Part::side) {
      const SideBlock& sb = rs.side_blocks[x.slot];
      b.p2p += sb.rows * field_width(sb.field, hq, hkv, dm.d) * field_bytes(sb.field, dm);
    } else {
      b.p2p += x.part == Part::data ? data : grad;
    }
  }
  return b;
}

}  // namespace longseq::attention
