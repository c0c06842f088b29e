#include "longseq/plan/attention_cost.hpp"

#include <algorithm>
#include <map>
#include <mutex>
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

bool schedule_based(const Algorithm& a) {
  return a.family != Algorithm::Family::startrail && a.family != Algorithm::Family::ulysses;
}

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

// Visible pairs of every (q rank, q chunk, k rank, k chunk) of a layout, cached: the planner asks
// for the same layout under many algorithms and passes.
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
            if (kind == PairKind::full && q_limit < 0)
              v = q.len * k.len;
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

const PairCounts& pair_counts(const Layout& layout, const MaskSpec& mask, int64_t q_limit,
                              int64_t tile_q = 0, int64_t tile_k = 0) {
  using Key = std::tuple<int, int64_t, int, int64_t, std::string, int64_t, int64_t>;
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<PairCounts>> cache;
  const Key key{static_cast<int>(layout.balance()),
                layout.global_len(),
                layout.world(),
                q_limit,
                mask.describe(),
                tile_q,
                tile_k};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() > 64) cache.clear();
    it = cache.emplace(key, std::make_unique<PairCounts>(layout, mask, q_limit, tile_q, tile_k))
             .first;
  }
  return *it->second;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Schedule-based passes

int64_t data_part_elems(const Algorithm& algo, Pass pass, int64_t l, int64_t hq, int64_t hkv,
                        int64_t d) {
  if (attention::bundle_is_query(algo, pass)) return 2 * l * hq * d + 2 * l * hq;
  return 2 * l * hkv * d;
}

int64_t grad_part_elems(const Algorithm& algo, int64_t l, int64_t hq, int64_t hkv, int64_t d) {
  return algo.backward == Backward::q ? l * hq * d : 2 * l * hkv * d;
}

ScheduleSet make_schedules(const Algorithm& algo, const AttnProblem& prob, Pass pass) {
  const int world = prob.world;
  Layout layout(prob.balance, prob.n, world, prob.mask.block_size);
  Algorithm sized = algo;
  if (sized.route == Route::double_ring) sized.inner = inner_ring(algo, prob);
  const comm::Topology topo = attention::schedule_topology(sized, comm::Topology(world));
  const PairTable pairs(layout, prob.mask);
  ScheduleSet set{topo, layout, {}};
  set.ranks.reserve(world);
  for (int r = 0; r < world; ++r)
    set.ranks.push_back(attention::make_schedule(r, topo, layout, pairs, algo, pass));
  return set;
}

namespace {

struct RingProblem {
  Algorithm algo;
  AttnProblem prob;                         // world = ring length, heads per member
  std::function<bool(int, int)> same_node;  // over ring positions
  int host_ranks = 0;  // all ranks of the job (USP: groups x U), for Hardware::compute_share
};

PassCost replay_pass(const RingProblem& rp, Pass pass, const Hardware& hw, int64_t q_limit,
                     bool keep, double* buffer_bytes) {
  const ScheduleSet set = make_schedules(rp.algo, rp.prob, pass);
  const AttnProblem& p = rp.prob;
  const int64_t l = set.layout.local_len();
  const double e = hw.dtype_bytes;
  const double data_b =
      static_cast<double>(data_part_elems(rp.algo, pass, l, p.hq, p.hkv, p.d)) * e;
  const double grad_b = static_cast<double>(grad_part_elems(rp.algo, l, p.hq, p.hkv, p.d)) * e;
  const bool fwd = pass == Pass::forward;
  const int64_t tq = hw.tiles.enabled() ? (fwd ? hw.tiles.fwd_q : hw.tiles.bwd_q) : 0;
  const int64_t tk = hw.tiles.enabled() ? (fwd ? hw.tiles.fwd_k : hw.tiles.bwd_k) : 0;
  const PairCounts& counts = pair_counts(set.layout, p.mask, q_limit, tq, tk);
  const bool bq = attention::bundle_is_query(rp.algo, pass);
  const double per_pair = (pass == Pass::forward ? 4.0 : 10.0) * static_cast<double>(p.hq * p.d);

  ReplayModel m;
  m.bytes = [&](const attention::Xfer& x) {
    return x.part == attention::Part::data ? data_b : grad_b;
  };
  m.flops = [&](int rank, const attention::Work& w) {
    const int qr = bq ? w.origin : rank, kr = bq ? rank : w.origin;
    double f = 0;
    for (const auto& sp : w.pairs) f += static_cast<double>(counts.at(qr, sp.qc, kr, sp.kc));
    return f * per_pair;
  };
  // gamma = peak x (labelled) kernel efficiency, x the core share when ranks oversubscribe a host.
  if (tq > 0) {
    // Time from the pairs the kernels compute (full tiles, partial tiles at the labelled relative
    // cost); m.flops stays the useful (visible) FLOPs.
    const double partial_cost =
        fwd ? hw.corrections.partial_tile_cost_fwd : hw.corrections.partial_tile_cost_bwd;
    m.cost_flops = [&, partial_cost](int rank, const attention::Work& w) {
      const int qr = bq ? w.origin : rank, kr = bq ? rank : w.origin;
      double f = 0;
      for (const auto& sp : w.pairs) {
        const TileWork& t = counts.tiles(qr, sp.qc, kr, sp.kc);
        f += static_cast<double>(t.full) + partial_cost * static_cast<double>(t.partial);
      }
      return f * per_pair;
    };
  }
  m.flops_per_s = (pass == Pass::forward ? hw.attention_fwd_flops() : hw.attention_bwd_flops()) *
                  hw.compute_share(rp.host_ranks > 0 ? rp.host_ranks : p.world);
  m.same_node = rp.same_node;
  m.intra = hw.intra;
  m.inter = hw.inter;
  m.wait_copy = hw.wait_copy;
  Timeline tl = replay(set.ranks, m);

  PassCost c;
  c.model = "schedule";
  const int crit = tl.critical_rank();
  c.seconds = tl.makespan;
  c.compute_s = tl.ranks[crit].compute_s;
  const double ranks = static_cast<double>(tl.ranks.size());
  for (const auto& r : tl.ranks) {
    c.flops = std::max(c.flops, r.flops);
    c.flops_total += r.flops;
    c.messages_intra += static_cast<double>(r.messages_intra) / ranks;
    c.messages_inter += static_cast<double>(r.messages_inter) / ranks;
    c.bytes_intra += r.bytes_intra / ranks;
    c.bytes_inter += r.bytes_inter / ranks;
    c.bytes_inter_max = std::max(c.bytes_inter_max, r.bytes_inter);
  }
  if (buffer_bytes) {
    double b = 0;
    for (const RankSchedule& rs : set.ranks)
      b = std::max(b, rs.data_slots * data_b + rs.grad_slots * grad_b);
    *buffer_bytes = b;
  }
  if (keep) c.timeline = std::move(tl);
  return c;
}

// A collective or point-to-point term of the formula models: per rank, per link class.
struct CommTerm {
  int64_t msgs_intra = 0, msgs_inter = 0;
  double bytes_intra = 0, bytes_inter = 0;
  double seconds = 0;
  void add_to(PassCost& c) const {
    c.messages_intra += static_cast<double>(msgs_intra);
    c.messages_inter += static_cast<double>(msgs_inter);
    c.bytes_intra += bytes_intra;
    c.bytes_inter += bytes_inter;
    c.bytes_inter_max += bytes_inter;
  }
};

// `msgs` messages of `bytes` each over one link class; ring collectives get the labelled
// collective efficiency, point-to-point hops do not.
CommTerm term(bool inter, int64_t msgs, double bytes_each, const Hardware& hw, bool collective) {
  CommTerm t;
  const Link& link = inter ? hw.inter : hw.intra;
  const double eff = collective ? hw.corrections.collective_efficiency : 1.0;
  (inter ? t.msgs_inter : t.msgs_intra) = msgs;
  (inter ? t.bytes_inter : t.bytes_intra) = static_cast<double>(msgs) * bytes_each;
  t.seconds =
      static_cast<double>(msgs) * (link.latency_s + bytes_each / (link.bandwidth_Bps * eff));
  return t;
}

// All-to-all inside groups of U consecutive ranks: every rank sends `per_peer` bytes to each of
// its U-1 peers; intra-node and inter-node rails run concurrently. (Formula: DeepSpeed-Ulysses.)
CommTerm all_to_all(int u, int gpn, double per_peer, const Hardware& hw) {
  const int intra_peers = std::min(u, gpn) - 1, inter_peers = u - std::min(u, gpn);
  const CommTerm a = term(false, intra_peers, per_peer, hw, true);
  const CommTerm b = term(true, inter_peers, per_peer, hw, true);
  CommTerm t;
  t.msgs_intra = a.msgs_intra;
  t.bytes_intra = a.bytes_intra;
  t.msgs_inter = b.msgs_inter;
  t.bytes_inter = b.bytes_inter;
  t.seconds = std::max(a.seconds, b.seconds);
  return t;
}

int64_t total_visible(const AttnProblem& p, int64_t q_limit) {
  const Layout layout(p.balance, p.n, p.world, p.mask.block_size);
  return pair_counts(layout, p.mask, q_limit).total();
}

// ---------------------------------------------------------------------------------------------
// USP / Ulysses: all-to-all (formula) + the ring across groups (schedule; world 1 for Ulysses).

AttentionCost cost_usp(const Algorithm& a, const AttnProblem& p, const Hardware& hw, double frac,
                       bool keep) {
  const int u = a.family == Algorithm::Family::ulysses ? p.world : a.degree;
  const int groups = p.world / u;
  const int64_t kv_per = p.hkv % u == 0 ? p.hkv / u : 1;
  const int64_t hq_per = p.hq / u;
  RingProblem rp;
  rp.algo = Algorithm{Route::flat, a.backward};
  rp.prob = p;
  rp.prob.world = groups;
  rp.prob.hq = hq_per;
  rp.prob.hkv = kv_per;
  rp.host_ranks = p.world;
  const int gpn = p.gpus_per_node;
  rp.same_node = [u, gpn](int x, int y) { return (x * u) / gpn == (y * u) / gpn; };

  const Layout world_layout(p.balance, p.n, p.world, p.mask.block_size);
  const double l = static_cast<double>(world_layout.local_len()), e = hw.dtype_bytes;
  const double dd = static_cast<double>(p.d);
  AttentionCost c;
  auto finish = [&](PassCost& pc, double in_per_peer, double out_per_peer) {
    const CommTerm in = all_to_all(u, gpn, in_per_peer * e, hw);
    const CommTerm out = all_to_all(u, gpn, out_per_peer * e, hw);
    in.add_to(pc);
    out.add_to(pc);
    pc.collective_bytes = in.bytes_intra + in.bytes_inter + out.bytes_intra + out.bytes_inter;
    pc.collective_s = in.seconds + out.seconds;
    pc.seconds += pc.collective_s;  // DeepSpeed-Ulysses does not overlap its all-to-alls
    pc.model = (a.family == Algorithm::Family::ulysses
                    ? std::string("formula: DeepSpeed-Ulysses all-to-all")
                    : std::string("schedule (ring across groups) + formula: all-to-all")) +
               " inside groups of " + std::to_string(u);
  };
  double buf_f = 0, buf_b = 0;
  // U rings (one per Ulysses member) run at once; the replay is of one of them.
  auto all_rings = [u](PassCost& pc) { pc.flops_total *= u; };
  c.forward = replay_pass(rp, Pass::forward, hw, -1, keep, &buf_f);
  all_rings(c.forward);
  finish(c.forward, l * dd * (hq_per + 2 * kv_per), l * hq_per * (dd + 1));
  c.backward = replay_pass(rp, Pass::backward, hw, -1, keep, &buf_b);
  all_rings(c.backward);
  finish(c.backward, l * (2 * hq_per * dd + 2 * hq_per + 2 * kv_per * dd),
         l * dd * (hq_per + 2 * kv_per));
  if (frac > 0) {
    // The group's U*L tokens per member: the first `frac` of them are recomputed.
    const int64_t limit = static_cast<int64_t>(frac * static_cast<double>(u) * l);
    c.partial_recompute = replay_pass(rp, Pass::forward, hw, limit, false, nullptr);
    all_rings(c.partial_recompute);
    finish(c.partial_recompute, l * dd * (hq_per + 2 * kv_per), l * hq_per * (dd + 1));
    c.recompute_fraction = frac;
  }
  // The head-sharded copies of q, k, v (and o) of U*L tokens replace the sequence-sharded ones.
  c.buffer_bytes_forward = buf_f + u * l * dd * (2 * hq_per + 2 * kv_per) * e;
  c.buffer_bytes_backward = buf_b + u * l * (dd * (3 * hq_per + 4 * kv_per) + 2 * hq_per) * e;
  return c;
}

// ---------------------------------------------------------------------------------------------
// StarTrail / WallFacer (formula: WallFacer eq. (6)-(7), StarTrail §3.2; placement from the
// executor's StarTrailConfig).

AttentionCost cost_startrail(const Algorithm& a, const AttnProblem& p, const Hardware& hw,
                             double frac) {
  const attention::StarTrailConfig cfg(p.world, a.team, a.placement);
  const int gpn = p.gpus_per_node;
  auto node = [gpn](int r) { return r / gpn; };
  bool team_inter = false, ring_inter = false, init_inter = false, init_moves = false;
  for (int r = 0; r < p.world; ++r) {
    const std::vector<int> team = cfg.team_ranks(cfg.team_of(r));
    for (int x : team) team_inter = team_inter || node(x) != node(r);
    ring_inter = ring_inter || node(cfg.ring_next(r)) != node(r);
    const int t = cfg.init_send_target(r);
    init_moves = init_moves || t != r;
    init_inter = init_inter || node(t) != node(r);
  }
  const int64_t c = a.team, g = cfg.ring_len();
  const Layout layout(p.balance, p.n, p.world, p.mask.block_size);
  const double l = static_cast<double>(layout.local_len()), e = hw.dtype_bytes;
  const double hq = static_cast<double>(p.hq), hkv = static_cast<double>(p.hkv),
               d = static_cast<double>(p.d);
  const double kv_shard = 2 * c * l * hkv * d * e;  // one team shard of K,V
  const std::string label =
      std::string("formula: WallFacer eq. (6)-(7) / StarTrail §3.2, placement ") +
      std::string(attention::team_placement_name(a.placement)) + " from StarTrailConfig";
  // Mask-aware compute, assuming the team shards balance it (labelled; the schedule-based models
  // take it per rank from the schedule instead).
  auto pass = [&](bool fwd, int64_t q_limit) {
    PassCost pc;
    pc.model = label;
    const double per_pair = (fwd ? 4.0 : 10.0) * hq * d;
    const double vis = static_cast<double>(total_visible(p, q_limit));
    pc.flops_total = vis * per_pair;
    pc.flops = pc.flops_total / p.world;
    pc.compute_s = pc.flops / ((fwd ? hw.attention_fwd_flops() : hw.attention_bwd_flops()) *
                               hw.compute_share(p.world));
    // Team collectives: ring all-gather / reduce-scatter over C members, C-1 messages each.
    const double gather = fwd ? l * (hq + 2 * hkv) * d : l * (2 * hq * d + 2 * hq + 2 * hkv * d);
    const double scatter = fwd ? l * hq * (d + 1) : l * (hq + 2 * hkv) * d;
    const CommTerm ag = term(team_inter, c - 1, gather * e, hw, true);
    const CommTerm rs = term(team_inter, c - 1, scatter * e, hw, true);
    // Point-to-point: the initial transfer of K,V (and its reverse for dK,dV), then G-1 hops.
    const CommTerm init = term(init_inter, init_moves ? (fwd ? 1 : 2) : 0, kv_shard, hw, false);
    const double hop_bytes = fwd ? kv_shard : c * l * (hq * (2 * d + 2) + hq * d) * e;
    const CommTerm hops = term(ring_inter, g - 1, hop_bytes, hw, false);
    const double hop_s = g > 1 ? hops.seconds / static_cast<double>(g - 1) : 0.0;
    const double step_s = pc.compute_s / static_cast<double>(g);
    for (const CommTerm* t : {&ag, &rs, &init, &hops}) t->add_to(pc);
    pc.collective_bytes = ag.bytes_intra + ag.bytes_inter + rs.bytes_intra + rs.bytes_inter;
    pc.collective_s = ag.seconds + rs.seconds + init.seconds;
    pc.seconds = pc.collective_s + step_s + static_cast<double>(g - 1) * std::max(step_s, hop_s);
    return pc;
  };
  AttentionCost out;
  out.forward = pass(true, -1);
  out.backward = pass(false, -1);
  if (frac > 0) {
    out.partial_recompute = pass(true, static_cast<int64_t>(frac * l));
    out.recompute_fraction = frac;
  }
  // WallFacer eq. (10): the gathered Q,K,V hold 3CA instead of 3A, i.e. 3(C-1)A extra.
  out.extra_activation_bytes = (c - 1) * l * (hq + 2 * hkv) * d * e;
  out.buffer_bytes_forward =
      2 * kv_shard + c * l * hq * (d + 1) * 4.0;  // ring double buffer + fp32 partials
  out.buffer_bytes_backward = kv_shard + 2 * c * l * (hq * (2 * d + 2) + hq * d) * e;
  return out;
}

}  // namespace

AttentionCost cost_attention(const Algorithm& a, const AttnProblem& p, const Hardware& hw,
                             double frac, bool keep) {
  validate_algo(a, p);
  if (a.family == Algorithm::Family::startrail) return cost_startrail(a, p, hw, frac);
  if (!a.ring_family()) return cost_usp(a, p, hw, frac, keep);

  RingProblem rp;
  rp.prob = p;
  rp.algo = a;
  const int gpn = p.gpus_per_node;
  rp.same_node = [gpn](int x, int y) { return x / gpn == y / gpn; };
  AttentionCost c;
  c.forward = replay_pass(rp, Pass::forward, hw, -1, keep, &c.buffer_bytes_forward);
  c.backward = replay_pass(rp, Pass::backward, hw, -1, keep, &c.buffer_bytes_backward);
  if (frac > 0) {
    const Layout layout(p.balance, p.n, p.world, p.mask.block_size);
    c.partial_recompute = replay_pass(
        rp, Pass::forward, hw, static_cast<int64_t>(frac * static_cast<double>(layout.local_len())),
        false, nullptr);
    c.recompute_fraction = frac;
  }
  return c;
}

}  // namespace longseq::plan
