#include "longseq/attention/startrail.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "longseq/attention/subring.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/kernels/cpu/attention.hpp"

namespace longseq::attention {

// ---------------------------------------------------------------------------------------------
// Configuration generator

StarTrailConfig::StarTrailConfig(int world, int c, TeamPlacement placement)
    : world_(world), c_(c), placement_(placement) {
  core::require(world >= 1, "attention", "startrail needs a world of at least 1 rank, got ", world);
  core::require(c >= 1, "attention", "--algo startrail:", c, " needs C >= 1");
  core::require(world % c == 0, "attention", "--algo startrail:", c, " needs C to divide world ",
                world);
  core::require(world % (c * c) == 0, "attention", "--algo startrail:", c, " needs C*C = ", c * c,
                " to divide world ", world);
}

StarTrailConfig::Coord StarTrailConfig::coord(int rank) const {
  LONGSEQ_CHECK_MSG(rank >= 0 && rank < world_, "rank ", rank, " of ", world_);
  const int g_len = ring_len();
  Coord x;
  if (placement_ == TeamPlacement::teams) {  // rank = (g*G + j)*C + a
    const int t = rank / c_;
    x.member = rank % c_;
    x.group = t / g_len;
    x.slot = t % g_len;
  } else {  // rank = (g*C + a)*G + j
    const int ring = rank / g_len;
    x.slot = rank % g_len;
    x.group = ring / c_;
    x.member = ring % c_;
  }
  return x;
}

int StarTrailConfig::rank_of(const Coord& x) const {
  const int g_len = ring_len();
  LONGSEQ_CHECK(x.group >= 0 && x.group < c_ && x.slot >= 0 && x.slot < g_len && x.member >= 0 &&
                x.member < c_);
  if (placement_ == TeamPlacement::teams) return (x.group * g_len + x.slot) * c_ + x.member;
  return (x.group * c_ + x.member) * g_len + x.slot;
}

int StarTrailConfig::team_of(int rank) const {
  const Coord x = coord(rank);
  return x.group * ring_len() + x.slot;
}

int StarTrailConfig::team_member_rank(int team, int member) const {
  LONGSEQ_CHECK(team >= 0 && team < teams());
  return rank_of({team / ring_len(), team % ring_len(), member});
}

std::vector<int> StarTrailConfig::team_ranks(int team) const {
  std::vector<int> r(c_);
  for (int a = 0; a < c_; ++a) r[a] = team_member_rank(team, a);
  return r;
}

std::vector<int> StarTrailConfig::ring_ranks(int rank) const {
  Coord x = coord(rank);
  std::vector<int> r(ring_len());
  for (int j = 0; j < ring_len(); ++j) {
    x.slot = j;
    r[j] = rank_of(x);
  }
  return r;
}

// Algorithm 2: the target team group is the sender's intra-team rank (every member of a team
// holds the same gathered shard, so member a serves team group a), the target team within that
// group is t / C and the target member t % C. A group's G teams times C members then hold the
// T = G*C shards exactly once each.
int StarTrailConfig::init_send_target(int rank) const {
  const int t = team_of(rank);
  return rank_of({member_of(rank), t / c_, t % c_});
}

int StarTrailConfig::init_recv_source(int rank) const {
  const Coord x = coord(rank);
  return team_member_rank(initial_shard(rank), x.group);
}

int StarTrailConfig::initial_shard(int rank) const {
  const Coord x = coord(rank);
  return x.slot * c_ + x.member;
}

// Algorithm 3: the next and previous team of the same team group, same intra-team rank.
int StarTrailConfig::ring_next(int rank) const {
  Coord x = coord(rank);
  x.slot = (x.slot + 1) % ring_len();
  return rank_of(x);
}

int StarTrailConfig::ring_prev(int rank) const {
  Coord x = coord(rank);
  x.slot = (x.slot + ring_len() - 1) % ring_len();
  return rank_of(x);
}

int StarTrailConfig::shard_at_step(int rank, int step) const {
  LONGSEQ_CHECK(step >= 0 && step < ring_len());
  Coord x = coord(rank);
  x.slot = ((x.slot - step) % ring_len() + ring_len()) % ring_len();
  return initial_shard(rank_of(x));
}

}  // namespace longseq::attention

// ---------------------------------------------------------------------------------------------
// Attention

namespace longseq::attention {

using detail::Attend;
using detail::Exchange;
using detail::Pieces;
using detail::Ring;

namespace {

constexpr int kTagGather = 3000;  // + tensor index
constexpr int kTagInit = 3100;
constexpr int kTagCombine = 3200;  // + tensor index
constexpr int kTagRing = 4000;     // ring_pass uses 2*G+4 tags from here

void check_input(const char* what, core::View<const float> x, int64_t l, int64_t h, int64_t d) {
  LONGSEQ_CHECK_MSG(
      x.rank() == 3 && x.dim(0) == l && x.dim(1) == h && x.dim(2) == d && x.is_contiguous(), what,
      " must be contiguous [", l, ", ", h, ", ", d, "], got ", x.shape().str());
}

// What both passes derive from (config, layout, rank).
struct Setup {
  StarTrailConfig cfg;
  int rank, team, member, c;
  int64_t l;
  std::vector<int> team_ranks;
  Ring ring;
  Pieces team_pieces;                 // this team's C*L tokens (the queries)
  std::vector<Pieces> origin_pieces;  // [ring position]: the team shard that bundle holds (fwd)
  double scale;

  Setup(const StarTrailOptions& opt, const AttentionSpec& spec, const Layout& layout, int rank_,
        int64_t d)
      : cfg(layout.world(), opt.c, opt.placement),
        rank(rank_),
        team(cfg.team_of(rank_)),
        member(cfg.member_of(rank_)),
        c(opt.c),
        l(layout.local_len()),
        team_ranks(cfg.team_ranks(team)),
        team_pieces(team_ranks, layout, *spec.mask) {
    ring.ranks = cfg.ring_ranks(rank);
    ring.pos = cfg.coord(rank).slot;
    scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(static_cast<double>(d));
  }
  int64_t team_tokens() const { return static_cast<int64_t>(c) * l; }
};

// The reduce-scatter that ends both passes: member m receives every member's partial for its own
// L rows. Posts sends of rows [m*L, (m+1)*L) of `full` ([C*L, row]) and receives into staging
// [C][L, row] (member order; the own part is copied).
void post_scatter(Exchange& ex, const Setup& s, const float* full, int64_t row,
                  std::vector<float>& staging, int tag) {
  const int64_t piece = s.l * row;
  staging.resize(static_cast<size_t>(s.c * piece));
  for (int m = 0; m < s.c; ++m) ex.send(full + m * piece, piece, s.team_ranks[m], tag);
  for (int m = 0; m < s.c; ++m) ex.recv(staging.data() + m * piece, piece, s.team_ranks[m], tag);
}

void sum_staging(const std::vector<float>& staging, int c, int64_t n, float* out) {
  std::fill(out, out + n, 0.f);
  for (int m = 0; m < c; ++m) {
    const float* src = staging.data() + m * n;
    for (int64_t i = 0; i < n; ++i) out[i] += src[i];
  }
}

}  // namespace

AttentionSaved startrail_forward(core::View<const float> q, core::View<const float> k,
                                 core::View<const float> v, const AttentionSpec& spec,
                                 const Layout& layout, comm::Group& group, AttentionStats* stats,
                                 const StarTrailOptions& opt) {
  const int64_t l = layout.local_len(), hq = q.dim(1), hkv = k.dim(1), d = q.dim(2);
  core::require(group.size() == layout.world(), "attention", "group of ", group.size(),
                " ranks runs a layout over ", layout.world());
  check_input("q", q, l, hq, d);
  check_input("k", k, l, hkv, d);
  check_input("v", v, l, hkv, d);
  const Setup s(opt, spec, layout, group.rank(), d);
  const int64_t tt = s.team_tokens(), kve = tt * hkv * d;

  // (1) Team all-gather of Q, K, V (K and V side by side: the bundle of the initial transfer).
  Exchange ex(group);
  std::vector<float> qt(static_cast<size_t>(tt * hq * d)), kvt(static_cast<size_t>(2 * kve));
  detail::post_all_gather(ex, s.team_ranks, s.member, q.data(), l * hq * d, qt.data(), kTagGather);
  detail::post_all_gather(ex, s.team_ranks, s.member, k.data(), l * hkv * d, kvt.data(),
                          kTagGather + 1);
  detail::post_all_gather(ex, s.team_ranks, s.member, v.data(), l * hkv * d, kvt.data() + kve,
                          kTagGather + 2);
  ex.wait_all(stats);
  // (2) Initial transfer: our team's shard to its place in team group `member`.
  std::vector<float> kv0(static_cast<size_t>(2 * kve));
  ex.send(kvt.data(), 2 * kve, s.cfg.init_send_target(s.rank), kTagInit);
  ex.recv(kv0.data(), 2 * kve, s.cfg.init_recv_source(s.rank), kTagInit);
  ex.wait_all(stats);
  kvt = {};

  // (3) Sub-ring: the team's queries against the G shards of this sub-ring.
  std::vector<Pieces> shard_pieces(s.ring.size());
  for (int j = 0; j < s.ring.size(); ++j)
    shard_pieces[j] =
        Pieces(s.cfg.team_ranks(s.cfg.initial_shard(s.ring.ranks[j])), layout, *spec.mask);
  std::vector<float> ot(static_cast<size_t>(tt * hq * d), 0.f);
  std::vector<float> lset(static_cast<size_t>(tt * hq), -std::numeric_limits<float>::infinity());
  BlockOps ops(hq, hkv, d, s.scale, spec.threads);
  const PairTable pairs(layout, *spec.mask);
  const Attend at{&ops, hq, hkv, d, &pairs, &layout, spec.mask->kernel_mask(), stats};
  detail::ring_pass(
      ex, s.ring, kv0.data(), 2 * kve, nullptr, 0, kTagRing,
      [&](int origin, const float* b, float*) {
        at.forward(s.team_pieces, qt.data(), shard_pieces[origin], b, b + kve, ot.data(),
                   lset.data());
      },
      stats);

  // (4) Reduce-scatter with LSE weights: every member merges the C partials of its rows.
  std::vector<float> so, sl;
  post_scatter(ex, s, ot.data(), hq * d, so, kTagCombine);
  post_scatter(ex, s, lset.data(), hq, sl, kTagCombine + 1);
  ex.wait_all(stats);
  AttentionSaved saved{q, k, v, core::Tensor<float>(core::Shape{l, hq, d}),
                       core::Tensor<float>(core::Shape{l, hq})};
  const core::Timer t;
  std::fill(saved.o.begin(), saved.o.end(), 0.f);
  std::fill(saved.lse.begin(), saved.lse.end(), -std::numeric_limits<float>::infinity());
  for (int m = 0; m < s.c; ++m)  // member order: the same rounding on every run
    kernels::cpu::merge_partials(saved.o.data(), saved.lse.data(), so.data() + m * l * hq * d,
                                 sl.data() + m * l * hq, l, hq, d, spec.threads);
  if (stats) stats->compute_s += t.elapsed();
  return saved;
}

AttentionGrads startrail_backward(core::View<const float> dout, const AttentionSaved& saved,
                                  const AttentionSpec& spec, const Layout& layout,
                                  comm::Group& group, AttentionStats* stats,
                                  const StarTrailOptions& opt) {
  const int64_t l = layout.local_len(), hq = saved.q.dim(1), hkv = saved.k.dim(1),
                d = saved.q.dim(2);
  core::require(group.size() == layout.world(), "attention", "group of ", group.size(),
                " ranks runs a layout over ", layout.world());
  check_input("dout", dout, l, hq, d);
  const Setup s(opt, spec, layout, group.rank(), d);
  const int64_t tt = s.team_tokens(), kve = tt * hkv * d, qe = tt * hq * d, re = tt * hq;

  std::vector<float> dvec(static_cast<size_t>(l * hq));
  {
    const core::Timer t;
    kernels::cpu::attention_delta(dout.data(), saved.o.data(), l, hq, d, spec.threads, dvec.data());
    if (stats) stats->compute_s += t.elapsed();
  }
  // Team all-gather of the circulating bundle [Q | dO | D | LSE] and of K, V.
  Exchange ex(group);
  std::vector<float> bundle(static_cast<size_t>(2 * qe + 2 * re)),
      kvt(static_cast<size_t>(2 * kve));
  float* qt = bundle.data();
  detail::post_all_gather(ex, s.team_ranks, s.member, saved.q.data(), l * hq * d, qt, kTagGather);
  detail::post_all_gather(ex, s.team_ranks, s.member, dout.data(), l * hq * d, qt + qe,
                          kTagGather + 1);
  detail::post_all_gather(ex, s.team_ranks, s.member, dvec.data(), l * hq, qt + 2 * qe,
                          kTagGather + 2);
  detail::post_all_gather(ex, s.team_ranks, s.member, saved.lse.data(), l * hq, qt + 2 * qe + re,
                          kTagGather + 3);
  detail::post_all_gather(ex, s.team_ranks, s.member, saved.k.data(), l * hkv * d, kvt.data(),
                          kTagGather + 4);
  detail::post_all_gather(ex, s.team_ranks, s.member, saved.v.data(), l * hkv * d, kvt.data() + kve,
                          kTagGather + 5);
  ex.wait_all(stats);
  // K, V go where the forward's ring started, and stay there with their gradients.
  std::vector<float> kv0(static_cast<size_t>(2 * kve));
  ex.send(kvt.data(), 2 * kve, s.cfg.init_send_target(s.rank), kTagInit);
  ex.recv(kv0.data(), 2 * kve, s.cfg.init_recv_source(s.rank), kTagInit);
  ex.wait_all(stats);
  kvt = {};

  // Sub-ring: the bundles of the G teams of our team group visit our K,V shard; dQ follows them.
  const StarTrailConfig::Coord me = s.cfg.coord(s.rank);
  std::vector<Pieces> team_pieces(s.ring.size());
  for (int j = 0; j < s.ring.size(); ++j)
    team_pieces[j] = Pieces(s.cfg.team_ranks(me.group * s.cfg.ring_len() + j), layout, *spec.mask);
  const Pieces kv_pieces(s.cfg.team_ranks(s.cfg.initial_shard(s.rank)), layout, *spec.mask);
  std::vector<float> dqt(static_cast<size_t>(qe), 0.f), dkv0(static_cast<size_t>(2 * kve), 0.f);
  BlockOps ops(hq, hkv, d, s.scale, spec.threads);
  const PairTable pairs(layout, *spec.mask);
  const Attend at{&ops, hq, hkv, d, &pairs, &layout, spec.mask->kernel_mask(), stats};
  detail::ring_pass(
      ex, s.ring, bundle.data(), static_cast<int64_t>(bundle.size()), dqt.data(), qe, kTagRing,
      [&](int origin, const float* b, float* dq) {
        at.backward(team_pieces[origin], b, b + qe, b + 2 * qe + re, b + 2 * qe, kv_pieces,
                    kv0.data(), kv0.data() + kve, dq, dkv0.data(), dkv0.data() + kve);
      },
      stats);

  // dQ: reduce-scatter in the team. dK, dV: back along the reversed initial transfer (we get our
  // own team shard's partial from team group `member`), then reduce-scatter in the team.
  std::vector<float> dkv_home(static_cast<size_t>(2 * kve));
  ex.send(dkv0.data(), 2 * kve, s.cfg.init_recv_source(s.rank), kTagInit + 1);
  ex.recv(dkv_home.data(), 2 * kve, s.cfg.init_send_target(s.rank), kTagInit + 1);
  std::vector<float> sq, sk, sv;
  post_scatter(ex, s, dqt.data(), hq * d, sq, kTagCombine);
  ex.wait_all(stats);
  post_scatter(ex, s, dkv_home.data(), hkv * d, sk, kTagCombine + 1);
  post_scatter(ex, s, dkv_home.data() + kve, hkv * d, sv, kTagCombine + 2);
  ex.wait_all(stats);
  AttentionGrads g{core::Tensor<float>(core::Shape{l, hq, d}),
                   core::Tensor<float>(core::Shape{l, hkv, d}),
                   core::Tensor<float>(core::Shape{l, hkv, d})};
  const core::Timer t;
  sum_staging(sq, s.c, l * hq * d, g.dq.data());
  sum_staging(sk, s.c, l * hkv * d, g.dk.data());
  sum_staging(sv, s.c, l * hkv * d, g.dv.data());
  if (stats) stats->compute_s += t.elapsed();
  return g;
}

StarTrailVolume startrail_forward_volume(const StarTrailConfig& cfg, int rank, int64_t l,
                                         int64_t hq, int64_t hkv, int64_t d) {
  const int64_t c = cfg.c(), g = cfg.ring_len(), kv = 2 * c * l * hkv * d;
  StarTrailVolume vol;
  vol.collective = (c - 1) * l * (hq + 2 * hkv) * d + (c - 1) * l * hq * (d + 1);
  vol.p2p = (cfg.init_send_target(rank) != rank ? kv : 0) + (g - 1) * kv;
  return vol;
}

StarTrailVolume startrail_backward_volume(const StarTrailConfig& cfg, int rank, int64_t l,
                                          int64_t hq, int64_t hkv, int64_t d) {
  const int64_t c = cfg.c(), g = cfg.ring_len(), kv = 2 * c * l * hkv * d;
  StarTrailVolume vol;
  // Gathers: Q, dO, D, LSE, K, V. Reduce-scatters: dQ, dK, dV.
  vol.collective =
      (c - 1) * l * (2 * hq * d + 2 * hq + 2 * hkv * d) + (c - 1) * l * (hq + 2 * hkv) * d;
  const bool moves = cfg.init_send_target(rank) != rank;
  vol.p2p = (moves ? 2 * kv : 0) + (g - 1) * c * l * (hq * (2 * d + 2) + hq * d);
  return vol;
}

}  // namespace longseq::attention
