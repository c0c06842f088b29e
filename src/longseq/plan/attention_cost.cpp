#include "longseq/plan/attention_cost.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>

#include "longseq/attention/schedule.hpp"
#include "longseq/core/error.hpp"

namespace longseq::plan {

using attention::Algorithm;
using attention::Backward;
using attention::Chunk;
using attention::Layout;
using attention::MaskSpec;
using attention::PairKind;
using attention::PairTable;
using attention::Pass;
using attention::RankSchedule;
using attention::Route;

namespace {

// The double ring's inner ring size: named (double-ring:I) or the ranks of one node.
int inner_ring(const Algorithm& a, const AttnProblem& p) {
  return a.inner > 0 ? a.inner : p.gpus_per_node;
}

}  // namespace

void validate_algo(const Algorithm& a, const AttnProblem& p) {
  const int world = p.world;
  switch (a.family) {
    case Algorithm::Family::ring:
      if (a.route == Route::double_ring) {
        const int inner = inner_ring(a, p);
        core::require(inner >= 2 && world % inner == 0 && inner < world, "plan", a.name(),
                      ": inner ring size ", inner, " must divide world ", world,
                      " and leave at least two inner rings");
      }
      break;
    case Algorithm::Family::startrail:
      a.validate(world, p.hq, p.hkv);  // throws "needs C*C = .. to divide world .."
      core::require(a.team >= 2, "plan", "startrail:1 is the flat ring; use ring or burst");
      break;
    case Algorithm::Family::ulysses:
    case Algorithm::Family::usp: {
      const int u = a.family == Algorithm::Family::ulysses ? world : a.degree;
      core::require(u >= 1 && world % u == 0, "plan", a.name(), ": Ulysses degree ", u,
                    " must divide world ", world);
      core::require(p.hq % u == 0, "plan", a.name(), ": query heads ", p.hq,
                    " not divisible by Ulysses degree ", u);
      core::require(p.hkv % u == 0 || u % p.hkv == 0, "plan", a.name(), ": kv heads ", p.hkv,
                    " neither divisible by nor dividing Ulysses degree ", u);
      break;
    }
  }
  core::require(p.mask.doc_ids.empty() && p.mask.block_mask.empty(), "plan",
                "the planner costs full, causal and window masks only, got ", p.mask.describe());
}

// ---------------------------------------------------------------------------------------------
// Mask-aware pair counts

namespace {

// Keys of chunk k in positions [lo, hi], below n.
int64_t count_keys(const Chunk& k, int64_t n, int64_t lo, int64_t hi) {
  hi = std::min(hi, n - 1);
  if (hi < lo || k.len == 0) return 0;
  const int64_t kb = k.pos_begin, ks = k.pos_stride;
  const int64_t jlo = lo <= kb ? 0 : (lo - kb + ks - 1) / ks;
  int64_t jhi = hi < kb ? -1 : (hi - kb) / ks;
  jhi = std::min(jhi, k.len - 1);
  return std::max<int64_t>(0, jhi - jlo + 1);
}

}  // namespace

int64_t visible_pairs(const Chunk& q, const Chunk& k, int64_t n, const MaskSpec& m,
                      int64_t q_local_limit) {
  int64_t qlen = q.len;
  if (q_local_limit >= 0) qlen = std::clamp<int64_t>(q_local_limit - q.local_begin, 0, q.len);
  const bool causal = m.causal || m.window > 0;
  int64_t total = 0;
  for (int64_t i = 0; i < qlen; ++i) {
    const int64_t p = q.pos_begin + i * q.pos_stride;
    if (p >= n) continue;
    const int64_t hi = causal ? p : n - 1;
    const int64_t lo = m.window > 0 ? p - m.window + 1 : 0;
    total += count_keys(k, n, std::max<int64_t>(lo, 0), hi);
  }
  return total;
}

namespace {

// Position range of rows [r0, r0 + rows) of a chunk; positions >= n are padding.
struct TileRange {
  bool any_valid = false, all_valid = true, contiguous = true;
  int64_t pmin = 0, pmax = -1;
};

TileRange tile_range(const Chunk& c, int64_t r0, int64_t rows, int64_t n) {
  TileRange t;
  const int64_t first = c.pos_begin + r0 * c.pos_stride;
  // Rows whose position is < n.
  const int64_t valid =
      first >= n ? 0 : std::min<int64_t>(rows, (n - first + c.pos_stride - 1) / c.pos_stride);
  t.any_valid = valid > 0;
  t.all_valid = valid == rows;
  t.contiguous = t.all_valid && (c.pos_stride == 1 || rows == 1);
  if (t.any_valid) {
    t.pmin = first;
    t.pmax = first + (valid - 1) * c.pos_stride;
  }
  return t;
}

}  // namespace

TileWork kernel_tile_work(const Chunk& q, const Chunk& k, int64_t n, const MaskSpec& m,
                          int64_t tile_q, int64_t tile_k, int64_t q_local_limit) {
  LONGSEQ_CHECK(tile_q > 0 && tile_k > 0);
  int64_t qlen = q.len;
  if (q_local_limit >= 0) qlen = std::clamp<int64_t>(q_local_limit - q.local_begin, 0, q.len);
  const bool band = m.causal || m.window > 0;
  TileWork w;
  for (int64_t r0 = 0; r0 < qlen; r0 += tile_q) {
    const int64_t br = std::min(tile_q, qlen - r0);
    const TileRange qi = tile_range(q, r0, br, n);
    if (!qi.any_valid) continue;
    for (int64_t c0 = 0; c0 < k.len; c0 += tile_k) {
      const int64_t bc = std::min(tile_k, k.len - c0);
      const TileRange ki = tile_range(k, c0, bc, n);
      // kernels/cpu/tiles.hpp classify()
      if (!ki.any_valid) continue;
      bool full = qi.all_valid && ki.all_valid;
      if (band) {
        if (ki.pmin > qi.pmax) continue;
        if (ki.pmax > qi.pmin) full = false;
      }
      if (m.window > 0) {
        if (qi.pmin - ki.pmax >= m.window) continue;
        if (qi.pmax - ki.pmin >= m.window) full = false;
      }
      if (full) {
        w.full += br * bc;
        continue;
      }
      // kernels/cpu/tiles.hpp trim()
      int64_t rr0 = 0, rr1 = br, cc0 = 0, cc1 = bc;
      if (band) {
        if (ki.contiguous) cc1 = std::clamp<int64_t>(qi.pmax - ki.pmin + 1, 0, bc);
        if (qi.contiguous) rr0 = std::clamp<int64_t>(ki.pmin - qi.pmin, 0, br);
        if (m.window > 0) {
          if (ki.contiguous) cc0 = std::clamp<int64_t>(qi.pmin - m.window + 1 - ki.pmin, 0, bc);
          if (qi.contiguous) rr1 = std::clamp<int64_t>(ki.pmax + m.window - qi.pmin, 0, br);
        }
      }
      if (rr0 < rr1 && cc0 < cc1) w.partial += (rr1 - rr0) * (cc1 - cc0);
    }
  }
  return w;
}

namespace {

// The chunk-pair classification of a layout, cached: every pass of every algorithm the planner
// costs asks for the same (layout, mask), and building it reads every token's position. Shared
// ownership, because the plan search's threads read tables while another thread's miss may clear
// the cache: a reference into the map would dangle then (it did: a use-after-free in
// make_schedules when two searches ran at once).
std::shared_ptr<const PairTable> pair_table(const Layout& layout, const MaskSpec& mask) {
  using Key = std::tuple<int, int64_t, int, int64_t, std::string>;
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<const PairTable>> cache;
  const Key key{static_cast<int>(layout.balance()), layout.global_len(), layout.world(),
                mask.block_size, mask.describe()};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() > 16) cache.clear();
    it = cache.emplace(key, std::make_shared<const PairTable>(layout, mask)).first;
  }
  return it->second;
}

// Query rows of chunk `q` below the query limit (-1: all rows).
int64_t limited_rows(const Chunk& q, int64_t q_limit) {
  return q_limit < 0 ? q.len : std::clamp<int64_t>(q_limit - q.local_begin, 0, q.len);
}

// Visible pairs of chunk pairs of one (layout, mask, query limit): a full pair is rows x keys; a
// partial one is counted row by row (visible_pairs), memoised by its shift-invariant key when
// neither chunk reaches into the padding. Such a count depends only on the offset between the
// two chunks (visible_pairs clamps a row's key range to [0, n), which cuts no key of a chunk
// that lies inside [0, n)), so the zigzag diagonals and window neighbours of all P ranks are
// counted once per shape instead of once per rank.
class VisibleCounter {
 public:
  VisibleCounter(int64_t n, const MaskSpec& mask, int64_t q_limit)
      : n_(n), mask_(mask), q_limit_(q_limit) {}
  int64_t operator()(const Chunk& q, const Chunk& k, PairKind kind) {
    const int64_t rows = limited_rows(q, q_limit_);
    if (kind == PairKind::empty) return 0;
    if (kind == PairKind::full) return rows * k.len;  // every pair visible, no padding
    const bool inside = rows == 0 || (q.pos_begin + (rows - 1) * q.pos_stride < n_ &&
                                      k.pos_begin + (k.len - 1) * k.pos_stride < n_);
    if (!inside) return visible_pairs(q, k, n_, mask_, q_limit_);
    const Key key{q.pos_begin - k.pos_begin, rows, q.pos_stride, k.len, k.pos_stride};
    auto it = memo_.find(key);
    if (it == memo_.end()) it = memo_.emplace(key, visible_pairs(q, k, n_, mask_, q_limit_)).first;
    return it->second;
  }

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;
  int64_t n_;
  const MaskSpec& mask_;
  int64_t q_limit_;
  std::map<Key, int64_t> memo_;
};

// Visible pairs of every (q rank, k rank) of a layout under the mask and a query limit, summed
// over their non-empty chunk pairs: P^2 integers built from the PairTable's non-empty entries
// (linear in them), where a table of every (q rank, q chunk, k rank, k chunk) cost P^2 chunks^2
// entries and a classification lookup each. Cached: the planner asks for the same layout under
// many algorithms and passes.
class RankPairCounts {
 public:
  RankPairCounts(const Layout& layout, const MaskSpec& mask, int64_t q_limit)
      : world_(layout.world()) {
    const std::shared_ptr<const PairTable> held = pair_table(layout, mask);
    const PairTable& table = *held;
    VisibleCounter count(layout.global_len(), mask, q_limit);
    counts_.assign(static_cast<size_t>(world_) * world_, 0);
    for (int qr = 0; qr < world_; ++qr)
      for (int qc = 0; qc < table.chunks_per_rank(); ++qc) {
        const Chunk& q = layout.chunks(qr)[qc];
        int64_t* row = counts_.data() + static_cast<size_t>(qr) * world_;
        for (const PairTable::Entry& e : table.chunk_row(qr, qc))
          row[e.k_rank] += count(q, layout.chunks(e.k_rank)[e.kc], e.kind);
      }
  }
  /// Visible pairs of all chunk pairs of query rank qr with key rank kr.
  int64_t at(int qr, int kr) const { return counts_[static_cast<size_t>(qr) * world_ + kr]; }

 private:
  int world_;
  std::vector<int64_t> counts_;
};

// Shared ownership for the reason pair_table gives.
std::shared_ptr<const RankPairCounts> rank_pair_counts(const Layout& layout, const MaskSpec& mask,
                                                       int64_t q_limit) {
  using Key = std::tuple<int, int64_t, int, int64_t, std::string>;
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<const RankPairCounts>> cache;
  const Key key{static_cast<int>(layout.balance()), layout.global_len(), layout.world(), q_limit,
                mask.describe()};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() > 64) cache.clear();
    it = cache.emplace(key, std::make_shared<const RankPairCounts>(layout, mask, q_limit)).first;
  }
  return it->second;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Schedule-based passes

ScheduleSet make_schedules(const Algorithm& algo, const AttnProblem& prob, Pass pass) {
  const int world = prob.world;
  Layout layout(prob.balance, prob.n, world, prob.mask.block_size);
  Algorithm sized = algo;
  if (sized.route == Route::double_ring) sized.inner = inner_ring(algo, prob);
  const comm::Topology topo = attention::schedule_topology(sized, comm::Topology(world));
  const std::shared_ptr<const PairTable> pairs = pair_table(layout, prob.mask);
  return {topo, layout,
          attention::make_schedules(topo, layout, *pairs, algo, pass, {prob.hq, prob.hkv})};
}

namespace {

// The timelines of a cluster of p.replicas groups: one per distinct placement of a group on the
// nodes, and the one each replica runs (AttnProblem's placement note); or, whole_world, one
// timeline of every rank (class_of = {0} over one "replica" of all ranks).
struct ClusterTimelines {
  std::vector<Timeline> timelines;
  std::vector<int> class_of;
};

// Where node boundaries fall inside a group that starts at physical rank `start`: the first group
// rank that begins a node, or -1 when the group lies inside one node. Equal keys, equal links.
int placement_key(int64_t start, int world, int gpn) {
  int64_t first = (gpn - start % gpn) % gpn;
  if (first == 0) first = gpn;
  return first < world ? static_cast<int>(first) : -1;
}

// The schedules of every replica as one world: replica d's ranks are d * world + r, their peers and
// collective members moved with them.
std::vector<RankSchedule> whole_world(const std::vector<RankSchedule>& group, int replicas) {
  const int world = static_cast<int>(group.size());
  std::vector<RankSchedule> all;
  all.reserve(static_cast<size_t>(world) * replicas);
  for (int d = 0; d < replicas; ++d)
    for (const RankSchedule& rs : group) {
      const int base = d * world;
      RankSchedule x = rs;
      x.rank += base;
      for (attention::Xfer& t : x.xfers) t.peer += base;
      for (int& r : x.ring) r += base;
      for (auto* steps : {&x.pre, &x.post})
        for (attention::Collective& col : *steps)
          for (int& r : col.members) r += base;
      all.push_back(std::move(x));
    }
  return all;
}

ClusterTimelines replay_cluster(const std::vector<RankSchedule>& group, const ReplayModel& m,
                                const AttnProblem& p, bool keep) {
  const int world = static_cast<int>(group.size()), gpn = p.gpus_per_node;
  ClusterTimelines out;
  if (p.whole_world && p.replicas > 1) {
    // The model's functions read the group's schedules (pieces, head blocks): by group rank.
    ReplayModel w = m;
    w.bytes = [&m, world](int r, const attention::Xfer& x) { return m.bytes(r % world, x); };
    w.flops = [&m, world](int r, const attention::Work& x) { return m.flops(r % world, x); };
    if (m.cost_flops)
      w.cost_flops = [&m, world](int r, const attention::Work& x) {
        return m.cost_flops(r % world, x);
      };
    if (m.message_bytes)
      w.message_bytes = [&m, world](int r, const attention::Collective& c, attention::Field f) {
        return m.message_bytes(r % world, c, f);
      };
    w.same_node = [gpn](int x, int y) { return x / gpn == y / gpn; };
    out.timelines.push_back(replay(whole_world(group, p.replicas), w));
    out.class_of = {0};
    return out;
  }
  std::vector<int> keys;
  std::vector<int64_t> starts;  // a start of every class
  for (int d = 0; d < std::max(1, p.replicas); ++d) {
    const int64_t start = static_cast<int64_t>(d) * world;
    const int key = placement_key(start, world, gpn);
    const auto it = std::find(keys.begin(), keys.end(), key);
    out.class_of.push_back(static_cast<int>(it - keys.begin()));
    if (it == keys.end()) {
      keys.push_back(key);
      starts.push_back(start);
    }
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    ReplayModel mk = m;
    const int64_t off = starts[k] % gpn;
    mk.same_node = [gpn, off](int x, int y) { return (x + off) / gpn == (y + off) / gpn; };
    mk.spans = keep && k == 0;
    out.timelines.push_back(replay(group, mk));
  }
  return out;
}

// A pass's cost from its cluster timelines, every rank of every replica in rank order: the sums
// and maxima a replay of the whole cluster gives, bit for bit.
PassCost combine(const ClusterTimelines& t) {
  PassCost c;
  c.model = "schedule";
  double ranks = 0, best = -1;
  for (int k : t.class_of) ranks += static_cast<double>(t.timelines[k].ranks.size());
  for (int k : t.class_of) {
    const Timeline& tl = t.timelines[k];
    c.seconds = std::max(c.seconds, tl.makespan);
    for (const auto& r : tl.ranks) {
      if (r.finish > best) {  // the critical rank: the longest finish, the first of equals
        best = r.finish;
        c.compute_s = r.compute_s;
        c.collective_s = r.collective_s;
      }
      c.flops = std::max(c.flops, r.flops);
      c.flops_total += r.flops;
      c.messages_intra += static_cast<double>(r.messages_intra) / ranks;
      c.messages_inter += static_cast<double>(r.messages_inter) / ranks;
      c.bytes_intra += r.bytes_intra / ranks;
      c.bytes_inter += r.bytes_inter / ranks;
      c.bytes_inter_max = std::max(c.bytes_inter_max, r.bytes_inter);
      c.collective_bytes += r.collective_bytes / ranks;
    }
  }
  return c;
}

// One pass of any algorithm: all ranks' make_schedule plans replayed by the simulator. Bundle,
// gradient and collective message sizes are the schedule's (pieces x L rows, the rank's head
// slice), counted in hw.dtype_bytes per element.
PassCost replay_pass(const ScheduleSet& set, const Algorithm& algo, const AttnProblem& p, Pass pass,
                     const Hardware& hw, int64_t q_limit, bool keep, double* buffer_bytes) {
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
  const double per_pair = (fwd ? 4.0 : 10.0) * static_cast<double>(hq_s * p.d);
  // The FLOPs of a work item were summed pair by pair in doubles (f += count); every partial sum
  // is an integer no larger than the item's rows_q x rows_k pairs, so below 2^53 each sum is exact
  // and the total is the same double in any order: then the item's count is the sum of its rank
  // pairs' totals (RankPairCounts), one lookup per piece pair. Above 2^53 (never at planner sizes,
  // kept for exactness) the pairs are summed in their order as before.
  size_t max_q_pieces = 0, max_kv_pieces = 0;
  bool single_pieces = true;                           // every side one shard (the ring family)
  std::set<std::pair<const void*, const void*>> seen;  // each ring's lists read once
  for (const RankSchedule& rs : set.ranks) {
    if (!seen.insert({rs.q_pieces.storage(), rs.kv_pieces.storage()}).second) continue;
    for (const auto& v : rs.q_pieces) {
      max_q_pieces = std::max(max_q_pieces, v.size());
      single_pieces = single_pieces && v.size() == 1;
    }
    for (const auto& v : rs.kv_pieces) {
      max_kv_pieces = std::max(max_kv_pieces, v.size());
      single_pieces = single_pieces && v.size() == 1;
    }
  }
  const bool exact_sums = static_cast<double>(l) * static_cast<double>(max_q_pieces) *
                              static_cast<double>(l) * static_cast<double>(max_kv_pieces) <
                          9007199254740992.0;  // 2^53
  const std::shared_ptr<const RankPairCounts> held_counts =
      exact_sums ? rank_pair_counts(set.layout, p.mask, q_limit) : nullptr;
  const RankPairCounts* rank_counts = held_counts.get();
  VisibleCounter chunk_count(set.layout.global_len(), p.mask, q_limit);
  // The (q rank, q chunk, k rank, k chunk) of every pair of a step.
  auto for_pairs = [&](int rank, const attention::Work& w, auto&& f) {
    const RankSchedule& rs = set.ranks[rank];
    const int qm = bq ? w.origin : rs.member, km = bq ? rs.member : w.origin;
    for (const auto& sp : w.pairs) {
      const int qr = rs.q_pieces[qm][sp.qp], kr = rs.kv_pieces[km][sp.kp];
      f(set.layout.chunks(qr)[sp.qc], set.layout.chunks(kr)[sp.kc], sp.kind);
    }
  };

  // A work item is fixed by its (query member, key member) and the ranks' pieces, and ranks with
  // equal pieces (every ring of a USP degree) repeat the same items: their FLOPs are summed once
  // per class of ranks (same sum, same order, so the same double).
  const int world = static_cast<int>(set.ranks.size());
  std::vector<int> cls(world);
  std::vector<int> rep;  // a rank of every class
  {
    std::map<uint64_t, std::vector<int>> by_hash;  // hash -> classes
    // Ranks whose pieces are copies of one storage (the members of a ring) are one class without
    // reading the lists.
    std::map<std::pair<const void*, const void*>, int> by_storage;
    for (int r = 0; r < world; ++r) {
      const RankSchedule& rs = set.ranks[r];
      const auto [known, fresh] =
          by_storage.try_emplace({rs.q_pieces.storage(), rs.kv_pieces.storage()}, -1);
      if (!fresh) {
        cls[r] = known->second;
        continue;
      }
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
      known->second = cls[r];
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
  // A staged work (Work::unit >= 0) is one block of its (query member, key member) pairs: not
  // what the memo holds for the pair of members.
  auto memoized = [&](std::vector<std::vector<double>>& memo, int rank, const attention::Work& w,
                      auto&& compute) {
    std::vector<double>& t = memo[cls[rank]];
    if (t.empty() || w.unit >= 0) return compute();
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
    if (rank_counts && single_pieces) {  // one lookup: no memo needed
      const RankSchedule& rs = set.ranks[rank];
      const int qr = rs.q_pieces[bq ? w.origin : rs.member][0];
      const int kr = rs.kv_pieces[bq ? rs.member : w.origin][0];
      return static_cast<double>(rank_counts->at(qr, kr)) * per_pair;
    }
    return memoized(flops_memo, rank, w, [&] {
      if (rank_counts && w.unit < 0) {
        const RankSchedule& rs = set.ranks[rank];
        const auto& qs = rs.q_pieces[bq ? w.origin : rs.member];
        const auto& ks = rs.kv_pieces[bq ? rs.member : w.origin];
        int64_t pairs = 0;
        for (int qr : qs)
          for (int kr : ks) pairs += rank_counts->at(qr, kr);
        return static_cast<double>(pairs) * per_pair;
      }
      double f = 0;
      for_pairs(rank, w, [&](const Chunk& q, const Chunk& k, PairKind kind) {
        f += static_cast<double>(chunk_count(q, k, kind));
      });
      return f * per_pair;
    });
  };
  // gamma = peak x (labelled) kernel efficiency, x the core share when ranks oversubscribe a host.
  const BlockCurve& curve = hw.attention_curve;
  if (tq > 0 || curve.enabled()) {
    // Time from the pairs the kernels compute (full tiles, partial tiles at the labelled relative
    // cost), and with a block curve each kernel call (one per chunk pair, as the executor calls
    // them) at its block length's efficiency instead of the constant one that flops_per_s holds;
    // m.flops stays the useful (visible) FLOPs.
    const double partial_cost =
        fwd ? hw.corrections.partial_tile_cost_fwd : hw.corrections.partial_tile_cost_bwd;
    const double base_eff =
        fwd ? hw.corrections.attention_fwd_efficiency : hw.corrections.attention_bwd_efficiency;
    m.cost_flops = [&, partial_cost, base_eff](int rank, const attention::Work& w) {
      return memoized(cost_memo, rank, w, [&] {
        double f = 0;
        for_pairs(rank, w, [&](const Chunk& q, const Chunk& k, PairKind kind) {
          double pairs = 0;
          if (tq > 0) {
            const TileWork t =
                kernel_tile_work(q, k, set.layout.global_len(), p.mask, tq, tk, q_limit);
            pairs = static_cast<double>(t.full) + partial_cost * static_cast<double>(t.partial);
          } else {
            pairs = static_cast<double>(chunk_count(q, k, kind));
          }
          if (curve.enabled() && pairs > 0)
            pairs *=
                base_eff /
                curve.at(std::sqrt(static_cast<double>(q.len) * static_cast<double>(k.len)), fwd);
          f += pairs;
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
  m.flops_per_s = (fwd ? hw.attention_fwd_flops() : hw.attention_bwd_flops()) *
                  hw.compute_share(p.share_ranks());
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
  const ClusterTimelines cluster = replay_cluster(set.ranks, m, p, keep);
  PassCost c = combine(cluster);
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
  if (keep) c.timeline = cluster.timelines.front();
  return c;
}

}  // namespace

Algorithm forward_key(const Algorithm& a) {
  Algorithm k = a;
  k.backward = Algorithm{}.backward;
  return k;
}

AttentionCost cost_forward(const Algorithm& a, const AttnProblem& p, const Hardware& hw,
                           double frac, bool keep) {
  validate_algo(a, p);
  AttentionCost c;
  const ScheduleSet fwd = make_schedules(a, p, Pass::forward);
  c.forward = replay_pass(fwd, a, p, Pass::forward, hw, -1, keep, &c.buffer_bytes_forward);
  const int64_t l = fwd.layout.local_len();
  const RankSchedule& r0 = fwd.ranks[0];
  if (frac > 0) {
    // The executor limits the query rows only where the query side is the rank's own tokens (no
    // collective steps); elsewhere the recomputation is the whole forward, whose replay (the same
    // schedules, no query limit) is c.forward's: taken from it instead of replayed again.
    const bool own_rows = attention::sides_are_home(r0);
    if (own_rows) {
      c.partial_recompute =
          replay_pass(fwd, a, p, Pass::forward, hw,
                      static_cast<int64_t>(frac * static_cast<double>(l)), false, nullptr);
    } else {
      c.partial_recompute = c.forward;
      c.partial_recompute.timeline.reset();
    }
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

void cost_backward(const Algorithm& a, const AttnProblem& p, const Hardware& hw, AttentionCost& c,
                   bool keep) {
  validate_algo(a, p);
  c.backward = replay_pass(make_schedules(a, p, Pass::backward), a, p, Pass::backward, hw, -1, keep,
                           &c.buffer_bytes_backward);
}

AttentionCost cost_attention(const Algorithm& a, const AttnProblem& p, const Hardware& hw,
                             double frac, bool keep) {
  AttentionCost c = cost_forward(a, p, hw, frac, keep);
  cost_backward(a, p, hw, c, keep);
  return c;
}

// ---------------------------------------------------------------------------------------------
// Lower bounds without schedules

namespace {

// The valid (< n) positions of a chunk's rows [0, rows): first, last and count (stride apart).
struct Span {
  int64_t first = 0, last = -1, count = 0;
};

Span valid_span(const Chunk& c, int64_t rows, int64_t n) {
  Span s;
  if (rows <= 0 || c.pos_begin >= n) return s;
  s.count = std::min<int64_t>(rows, (n - 1 - c.pos_begin) / c.pos_stride + 1);
  s.first = c.pos_begin;
  s.last = c.pos_begin + (s.count - 1) * c.pos_stride;
  return s;
}

// Sum over the positions p of a span of the keys a query at p sees: n (full), p + 1 (causal), or
// min(p + 1, W) (window, causal).
double span_keys(const Span& sp, int64_t stride, int64_t n, const MaskSpec& m) {
  if (sp.count == 0) return 0;
  const double count = static_cast<double>(sp.count), b = static_cast<double>(sp.first),
               st = static_cast<double>(stride);
  if (!m.causal && m.window <= 0) return count * static_cast<double>(n);
  // Rows whose p + 1 stays within the window (all of them without one).
  double below = count;
  if (m.window > 0) {
    const int64_t room = m.window - 1 - sp.first;  // p <= W - 1
    below = room < 0 ? 0.0 : std::min(count, static_cast<double>(room / stride + 1));
  }
  return below * (b + 1) + st * below * (below - 1) / 2 +
         (count - below) * static_cast<double>(m.window);
}

// Inbound inter-node bytes every node must take for one pass (see attention_lower_bound): by
// node of group ranks (node = rank / gpn), the remote ranks whose bundle the node needs times
// `block` bytes. `queries_move`: a rank's bundle is needed where its queries see a key of the
// node, else where a query of the node sees one of its keys. Empty when the mask or layout is
// outside what the visibility test below knows.
std::vector<double> node_imports(const Layout& layout, const MaskSpec& m, int gpn, double block,
                                 bool queries_move) {
  const int world = layout.world();
  const int64_t n = layout.global_len();
  const int nodes = (world + gpn - 1) / gpn;
  std::vector<double> out(static_cast<size_t>(nodes), 0.0);
  if (nodes < 2) return out;
  // Valid position range of every rank (the union of its chunks).
  std::vector<int64_t> lo(world, INT64_MAX), hi(world, -1);
  for (int r = 0; r < world; ++r)
    for (const Chunk& c : layout.chunks(r)) {
      const Span sp = valid_span(c, c.len, n);
      if (sp.count == 0) continue;
      lo[r] = std::min(lo[r], sp.first);
      hi[r] = std::max(hi[r], sp.last);
    }
  auto node_of = [gpn](int r) { return r / gpn; };
  if (m.window <= 0) {
    // Full: every remote rank with tokens. Causal: rank j's keys are seen by node n's queries iff
    // its first position is at most the node's last (queries_move: the roles swapped).
    std::vector<int64_t> sorted;
    for (int r = 0; r < world; ++r)
      if (hi[r] >= 0) sorted.push_back(queries_move ? hi[r] : lo[r]);
    std::sort(sorted.begin(), sorted.end());
    for (int node = 0; node < nodes; ++node) {
      int64_t node_lo = INT64_MAX, node_hi = -1;
      for (int r = node * gpn; r < std::min(world, (node + 1) * gpn); ++r)
        if (hi[r] >= 0) {
          node_lo = std::min(node_lo, lo[r]);
          node_hi = std::max(node_hi, hi[r]);
        }
      if (node_hi < 0) continue;
      auto sees = [&](int64_t v) {  // v: a rank's lo (keys) or hi (queries_move)
        if (!m.causal) return true;
        return queries_move ? v >= node_lo : v <= node_hi;
      };
      int64_t count = 0;
      if (!m.causal)
        count = static_cast<int64_t>(sorted.size());
      else if (queries_move)
        count = sorted.end() - std::lower_bound(sorted.begin(), sorted.end(), node_lo);
      else
        count = std::upper_bound(sorted.begin(), sorted.end(), node_hi) - sorted.begin();
      for (int r = node * gpn; r < std::min(world, (node + 1) * gpn); ++r)
        if (hi[r] >= 0 && sees(queries_move ? hi[r] : lo[r])) --count;
      out[node] = static_cast<double>(count) * block;
    }
    return out;
  }
  // Window W (causal): intervals of contiguous chunks only. A query chunk [qa, qb] sees a key
  // chunk [ka, kb] iff ka <= qb and kb >= qa - W + 1.
  struct Iv {
    int64_t a, b;
    int rank;
  };
  std::vector<Iv> all;
  for (int r = 0; r < world; ++r)
    for (const Chunk& c : layout.chunks(r)) {
      const Span sp = valid_span(c, c.len, n);
      if (sp.count == 0) continue;
      if (sp.count > 1 && c.pos_stride != 1) return std::vector<double>(out.size(), 0.0);
      all.push_back({sp.first, sp.last, r});
    }
  std::sort(all.begin(), all.end(), [](const Iv& x, const Iv& y) { return x.a < y.a; });
  std::vector<int> stamp(world, -1);
  const int64_t w = m.window;
  for (int node = 0; node < nodes; ++node) {
    int64_t count = 0;
    for (const Iv& own : all) {
      if (node_of(own.rank) != node) continue;
      // The positions whose chunks meet this one: keys [qa - W + 1, qb] of its queries, or the
      // queries [ka, kb + W - 1] that see its keys.
      const int64_t from = queries_move ? own.a : own.a - w + 1;
      const int64_t to = queries_move ? own.b + w - 1 : own.b;
      // Chunks are disjoint: sorted by start, their ends increase too.
      auto it = std::lower_bound(all.begin(), all.end(), from,
                                 [](const Iv& x, int64_t v) { return x.b < v; });
      for (; it != all.end() && it->a <= to; ++it)
        if (node_of(it->rank) != node && stamp[it->rank] != node) {
          stamp[it->rank] = node;
          ++count;
        }
    }
    out[node] = static_cast<double>(count) * block;
  }
  return out;
}

// Do the consecutive blocks of `size` group ranks each lie inside one node?
bool blocks_inside_nodes(int world, int size, int gpn) {
  for (int b = 0; b + size <= world; b += size)
    if (b / gpn != (b + size - 1) / gpn) return false;
  return true;
}

constexpr double kBoundShrink = 1.0 - 1e-9;

}  // namespace

double layout_visible_pairs(const Layout& layout, const MaskSpec& m, int64_t q_limit) {
  double total = 0;
  for (int r = 0; r < layout.world(); ++r)
    for (const Chunk& c : layout.chunks(r))
      total += span_keys(valid_span(c, limited_rows(c, q_limit), layout.global_len()), c.pos_stride,
                         layout.global_len(), m);
  return total;
}

AttentionCost attention_lower_bound(const Algorithm& a, const AttnProblem& p, const Hardware& hw,
                                    double frac) {
  validate_algo(a, p);
  const Layout layout(p.balance, p.n, p.world, p.mask.block_size);
  const int64_t l = layout.local_len();
  const double share = hw.compute_share(p.share_ranks());
  const BlockCurve& curve = hw.attention_curve;
  // The fastest a visible pair can be computed: the curve's best point (it replaces the constant
  // per kernel call), partial tiles at their relative cost where that is below 1.
  auto rate = [&](bool fwd) {
    double eff =
        fwd ? hw.corrections.attention_fwd_efficiency : hw.corrections.attention_bwd_efficiency;
    if (curve.enabled()) {
      eff = 0;
      for (const auto& pt : curve.points) eff = std::max(eff, fwd ? pt.fwd : pt.bwd);
    }
    double cheapest = 1;
    if (hw.tiles.enabled())
      cheapest = std::min(
          1.0, fwd ? hw.corrections.partial_tile_cost_fwd : hw.corrections.partial_tile_cost_bwd);
    return hw.peak_flops * eff * share / cheapest;
  };
  const double hqd = static_cast<double>(p.hq * p.d), world = p.world;
  auto compute = [&](bool fwd, int64_t q_limit) {
    PassCost c;
    c.model = "lower bound";
    c.flops_total = layout_visible_pairs(layout, p.mask, q_limit) * (fwd ? 4.0 : 10.0) * hqd;
    c.compute_s = c.flops_total / world / rate(fwd) * kBoundShrink;
    c.seconds = c.compute_s;
    return c;
  };
  AttentionCost out;
  out.forward = compute(true, -1);
  out.backward = compute(false, -1);
  if (frac > 0) {
    out.partial_recompute = compute(true, static_cast<int64_t>(frac * static_cast<double>(l)));
    out.recompute_fraction = frac;
  }
  // Transfers: which algorithms keep the queries of a node's ranks on that node (the bound's
  // premise), and what their bundles carry per L rows.
  using F = Algorithm::Family;
  const int gpn = p.gpus_per_node;
  bool premise = a.family == F::ring;
  if (a.family == F::usp) premise = blocks_inside_nodes(p.world, a.degree, gpn);
  const bool startrail_teams = a.family == F::startrail &&
                               a.placement == attention::TeamPlacement::teams &&
                               blocks_inside_nodes(p.world, a.team, gpn);
  if (!premise && !startrail_teams) return out;
  const bool simple_mask = p.mask.doc_ids.empty() && p.mask.block_mask.empty();
  if (!simple_mask) return out;
  const double e = hw.dtype_bytes, rows = static_cast<double>(l);
  const double kv_block = 2 * rows * static_cast<double>(p.hkv * p.d) * e;
  const double q_block = (2 * rows * hqd + 2 * rows * static_cast<double>(p.hq)) * e;
  auto transfers = [&](PassCost& c, bool queries_move) {
    const std::vector<double> imports =
        node_imports(layout, p.mask, gpn, queries_move ? q_block : kv_block, queries_move);
    double total = 0, slowest = 0;
    for (size_t node = 0; node < imports.size(); ++node) {
      const int ranks = std::min(gpn, p.world - static_cast<int>(node) * gpn);
      total += imports[node];
      slowest = std::max(slowest, imports[node] / (ranks * hw.inter.bandwidth_Bps));
    }
    c.bytes_inter_max = total / world * kBoundShrink;
    c.seconds = std::max(c.seconds, slowest * kBoundShrink);
  };
  transfers(out.forward, false);
  if (premise) transfers(out.backward, attention::bundle_is_query(a, Pass::backward));
  return out;
}

}  // namespace longseq::plan
