#include "longseq/attention/ulysses.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "longseq/attention/subring.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/kernels/cpu/attention.hpp"

namespace longseq::attention {

using detail::Attend;
using detail::Exchange;
using detail::Pieces;
using detail::Ring;

HeadSplit::HeadSplit(int64_t hq_, int64_t hkv_, int u_) : hq(hq_), hkv(hkv_), u(u_) {
  core::require(u >= 1, "attention", "Ulysses group size must be >= 1, got ", u);
  core::require(hq >= 1 && hkv >= 1 && hq % hkv == 0, "attention", "query heads ", hq,
                " must be a multiple of kv heads ", hkv);
  core::require(hq % u == 0, "attention", "Ulysses over ", u, " ranks needs the query heads ", hq,
                " to be divisible by ", u);
  core::require(hkv % u == 0 || u % hkv == 0, "attention", "Ulysses over ", u,
                " ranks needs the kv heads ", hkv, " to be divisible by ", u, " or to divide ", u,
                " (GQA group ", hq / hkv, ")");
  hq_per = hq / u;
  replicated = hkv % u != 0;
  kv_per = replicated ? 1 : hkv / u;
}

int64_t HeadSplit::kv_begin(int i) const {
  // Split: member i owns kv heads [i*Hkv/U, ...), exactly the ones its query heads use. Replicated
  // (U = m*Hkv): query heads [i*Hq/U, (i+1)*Hq/U) all map to kv head i*Hq/U / g = i / m.
  return replicated ? q_begin(i) / (hq / hkv) : i * kv_per;
}

void validate_usp(const UspOptions& opt, int world, int64_t hq, int64_t hkv) {
  const int u = opt.u == 0 ? world : opt.u;
  core::require(u >= 1 && world % u == 0, "attention", "--algo usp:", u,
                " needs U to divide world ", world);
  HeadSplit(hq, hkv, u);
}

namespace {

constexpr int kTagA2A = 1000;   // + tensor index
constexpr int kTagBack = 1100;  // + tensor index
constexpr int kTagRing = 2000;  // ring_pass uses 2*size()+4 tags from here

// Sequence-sharded x [L, H, D] -> head-sharded out [U*L, per, D]: member j receives heads
// [begin(j), begin(j) + per) of every token; source i's rows land at out[i*L ...]. `pack` must
// live until the exchange completes.
template <class Begin>
void post_to_heads(Exchange& ex, const std::vector<int>& ranks, const float* x, int64_t l,
                   int64_t h, int64_t d, int64_t per, Begin begin, std::vector<float>& pack,
                   float* out, int tag) {
  const int u = static_cast<int>(ranks.size());
  const int64_t piece = l * per * d;
  pack.resize(static_cast<size_t>(u * piece));
  for (int j = 0; j < u; ++j) {
    float* dst = pack.data() + j * piece;
    const int64_t b = begin(j);
    for (int64_t t = 0; t < l; ++t)
      std::memcpy(dst + t * per * d, x + (t * h + b) * d,
                  static_cast<size_t>(per * d) * sizeof(float));
  }
  for (int j = 0; j < u; ++j) ex.send(pack.data() + j * piece, piece, ranks[j], tag);
  for (int i = 0; i < u; ++i) ex.recv(out + i * piece, piece, ranks[i], tag);
}

// The reverse: head-sharded y [U*L, per, D] -> staging [U][L][per][D] (member i's heads of this
// rank's tokens). Complete with unpack_from_heads after the wait.
void post_from_heads(Exchange& ex, const std::vector<int>& ranks, const float* y, int64_t l,
                     int64_t per, int64_t d, std::vector<float>& staging, int tag) {
  const int u = static_cast<int>(ranks.size());
  const int64_t piece = l * per * d;
  staging.resize(static_cast<size_t>(u * piece));
  for (int j = 0; j < u; ++j) ex.send(y + j * piece, piece, ranks[j], tag);
  for (int i = 0; i < u; ++i) ex.recv(staging.data() + i * piece, piece, ranks[i], tag);
}

// x [L, H, D] += staging of every member at its heads; members sharing a (replicated kv) head
// add up in member order, so the sum is the same on every run.
template <class Begin>
void unpack_from_heads(const std::vector<float>& staging, int u, int64_t l, int64_t h, int64_t d,
                       int64_t per, Begin begin, float* x) {
  const int64_t piece = l * per * d;
  for (int i = 0; i < u; ++i) {
    const float* src = staging.data() + i * piece;
    const int64_t b = begin(i);
    for (int64_t t = 0; t < l; ++t) {
      float* dst = x + (t * h + b) * d;
      const float* s = src + t * per * d;
      for (int64_t e = 0; e < per * d; ++e) dst[e] += s[e];
    }
  }
}

void check_input(const char* what, core::View<const float> x, int64_t l, int64_t h, int64_t d) {
  LONGSEQ_CHECK_MSG(
      x.rank() == 3 && x.dim(0) == l && x.dim(1) == h && x.dim(2) == d && x.is_contiguous(), what,
      " must be contiguous [", l, ", ", h, ", ", d, "], got ", x.shape().str());
}

// Everything both passes derive from (layout, spec, options, rank).
struct Setup {
  int world, u, groups, rank, group, member;
  int64_t l, hq, hkv, d;
  HeadSplit heads;
  std::vector<int> group_ranks;
  Ring ring;
  std::vector<Pieces> pieces;  // [group]: the group's U rank shards
  double scale;

  Setup(const UspOptions& opt, const AttentionSpec& spec, const Layout& layout, int rank_,
        int64_t hq_, int64_t hkv_, int64_t d_)
      : world(layout.world()),
        u(opt.u == 0 ? layout.world() : opt.u),
        groups(0),
        rank(rank_),
        group(0),
        member(0),
        l(layout.local_len()),
        hq(hq_),
        hkv(hkv_),
        d(d_),
        heads(hq_, hkv_, opt.u == 0 ? layout.world() : opt.u) {
    groups = world / u;
    group = rank / u;
    member = rank % u;
    for (int i = 0; i < u; ++i) group_ranks.push_back(group * u + i);
    for (int g = 0; g < groups; ++g) ring.ranks.push_back(g * u + member);
    ring.pos = group;
    for (int g = 0; g < groups; ++g) {
      std::vector<int> rs;
      for (int i = 0; i < u; ++i) rs.push_back(g * u + i);
      pieces.emplace_back(std::move(rs), layout, *spec.mask);
    }
    scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(static_cast<double>(d));
  }
  int64_t q_begin(int i) const { return heads.q_begin(i); }
  int64_t kv_begin(int i) const { return heads.kv_begin(i); }
  int64_t tokens() const { return static_cast<int64_t>(u) * l; }  // per group
};

}  // namespace

AttentionSaved usp_forward(core::View<const float> q, core::View<const float> k,
                           core::View<const float> v, const AttentionSpec& spec,
                           const Layout& layout, comm::Group& group, AttentionStats* stats,
                           const UspOptions& opt) {
  const int64_t l = layout.local_len(), hq = q.dim(1), hkv = k.dim(1), d = q.dim(2);
  core::require(group.size() == layout.world(), "attention", "group of ", group.size(),
                " ranks runs a layout over ", layout.world());
  check_input("q", q, l, hq, d);
  check_input("k", k, l, hkv, d);
  check_input("v", v, l, hkv, d);
  validate_usp(opt, layout.world(), hq, hkv);
  const Setup s(opt, spec, layout, group.rank(), hq, hkv, d);
  const HeadSplit& hs = s.heads;
  const int64_t tq = s.tokens();
  const int64_t kv_elems = tq * hs.kv_per * d;
  auto qb = [&](int i) { return s.q_begin(i); };
  auto kb = [&](int i) { return s.kv_begin(i); };

  Exchange ex(group);
  std::vector<float> qh(static_cast<size_t>(tq * hs.hq_per * d)),
      kvh(static_cast<size_t>(2 * kv_elems));
  std::vector<float> pq, pk, pv;
  {
    const core::Timer t;
    post_to_heads(ex, s.group_ranks, q.data(), l, hq, d, hs.hq_per, qb, pq, qh.data(), kTagA2A);
    post_to_heads(ex, s.group_ranks, k.data(), l, hkv, d, hs.kv_per, kb, pk, kvh.data(),
                  kTagA2A + 1);
    post_to_heads(ex, s.group_ranks, v.data(), l, hkv, d, hs.kv_per, kb, pv, kvh.data() + kv_elems,
                  kTagA2A + 2);
    if (stats) stats->compute_s += t.elapsed();
  }
  ex.wait_all(stats);

  std::vector<float> oh(static_cast<size_t>(tq * hs.hq_per * d), 0.f);
  std::vector<float> lseh(static_cast<size_t>(tq * hs.hq_per),
                          -std::numeric_limits<float>::infinity());
  BlockOps ops(hs.hq_per, hs.kv_per, d, s.scale, spec.threads);
  const PairTable pairs(layout, *spec.mask);
  const Attend at{&ops, hs.hq_per, hs.kv_per, d, &pairs, &layout, spec.mask->kernel_mask(), stats};
  const Pieces& mine = s.pieces[s.group];
  detail::ring_pass(
      ex, s.ring, kvh.data(), 2 * kv_elems, nullptr, 0, kTagRing,
      [&](int origin, const float* data, float*) {
        at.forward(mine, qh.data(), s.pieces[origin], data, data + kv_elems, oh.data(),
                   lseh.data());
      },
      stats);

  AttentionSaved saved{q, k, v, core::Tensor<float>(core::Shape{l, hq, d}),
                       core::Tensor<float>(core::Shape{l, hq})};
  std::vector<float> so, sl;
  post_from_heads(ex, s.group_ranks, oh.data(), l, hs.hq_per, d, so, kTagBack);
  post_from_heads(ex, s.group_ranks, lseh.data(), l, hs.hq_per, 1, sl, kTagBack + 1);
  ex.wait_all(stats);
  const core::Timer t;
  std::fill(saved.o.begin(), saved.o.end(), 0.f);
  std::fill(saved.lse.begin(), saved.lse.end(), 0.f);
  unpack_from_heads(so, s.u, l, hq, d, hs.hq_per, qb, saved.o.data());
  unpack_from_heads(sl, s.u, l, hq, 1, hs.hq_per, qb, saved.lse.data());
  if (stats) stats->compute_s += t.elapsed();
  return saved;
}

AttentionGrads usp_backward(core::View<const float> dout, const AttentionSaved& saved,
                            const AttentionSpec& spec, const Layout& layout, comm::Group& group,
                            AttentionStats* stats, const UspOptions& opt) {
  const int64_t l = layout.local_len(), hq = saved.q.dim(1), hkv = saved.k.dim(1),
                d = saved.q.dim(2);
  core::require(group.size() == layout.world(), "attention", "group of ", group.size(),
                " ranks runs a layout over ", layout.world());
  check_input("dout", dout, l, hq, d);
  validate_usp(opt, layout.world(), hq, hkv);
  const Setup s(opt, spec, layout, group.rank(), hq, hkv, d);
  const HeadSplit& hs = s.heads;
  const int64_t tq = s.tokens();
  const int64_t qe = tq * hs.hq_per * d, re = tq * hs.hq_per, kv_elems = tq * hs.kv_per * d;
  auto qb = [&](int i) { return s.q_begin(i); };
  auto kb = [&](int i) { return s.kv_begin(i); };

  // D = rowsum(dO * O) where O lives (sequence-sharded), so O itself never moves.
  std::vector<float> dvec(static_cast<size_t>(l * hq));
  {
    const core::Timer t;
    kernels::cpu::attention_delta(dout.data(), saved.o.data(), l, hq, d, spec.threads, dvec.data());
    if (stats) stats->compute_s += t.elapsed();
  }
  // The query-side bundle [q | dO | D | LSE] and the kv bundle [k | v], head-sharded.
  std::vector<float> qside(static_cast<size_t>(2 * qe + 2 * re)),
      kvh(static_cast<size_t>(2 * kv_elems));
  float* qh = qside.data();
  float* doh = qh + qe;
  float* dvh = doh + qe;
  float* lseh = dvh + re;
  std::vector<float> p0, p1, p2, p3, p4, p5;
  Exchange ex(group);
  post_to_heads(ex, s.group_ranks, saved.q.data(), l, hq, d, hs.hq_per, qb, p0, qh, kTagA2A);
  post_to_heads(ex, s.group_ranks, dout.data(), l, hq, d, hs.hq_per, qb, p1, doh, kTagA2A + 1);
  post_to_heads(ex, s.group_ranks, dvec.data(), l, hq, 1, hs.hq_per, qb, p2, dvh, kTagA2A + 2);
  post_to_heads(ex, s.group_ranks, saved.lse.data(), l, hq, 1, hs.hq_per, qb, p3, lseh,
                kTagA2A + 3);
  post_to_heads(ex, s.group_ranks, saved.k.data(), l, hkv, d, hs.kv_per, kb, p4, kvh.data(),
                kTagA2A + 4);
  post_to_heads(ex, s.group_ranks, saved.v.data(), l, hkv, d, hs.kv_per, kb, p5,
                kvh.data() + kv_elems, kTagA2A + 5);
  ex.wait_all(stats);

  BlockOps ops(hs.hq_per, hs.kv_per, d, s.scale, spec.threads);
  const PairTable pairs(layout, *spec.mask);
  const Attend at{&ops, hs.hq_per, hs.kv_per, d, &pairs, &layout, spec.mask->kernel_mask(), stats};
  const Pieces& mine = s.pieces[s.group];
  std::vector<float> dqh(static_cast<size_t>(qe), 0.f),
      dkvh(static_cast<size_t>(2 * kv_elems), 0.f);
  if (opt.backward == Backward::q) {
    // Burst: Q, dO, D, LSE and dQ circulate; K, V, dK, dV stay.
    detail::ring_pass(
        ex, s.ring, qside.data(), static_cast<int64_t>(qside.size()), dqh.data(), qe, kTagRing,
        [&](int origin, const float* b, float* dq) {
          at.backward(s.pieces[origin], b, b + qe, b + 2 * qe + re, b + 2 * qe, mine, kvh.data(),
                      kvh.data() + kv_elems, dq, dkvh.data(), dkvh.data() + kv_elems);
        },
        stats);
  } else {
    // Ring: K, V, dK, dV circulate; Q, dO, D, LSE, dQ stay.
    detail::ring_pass(
        ex, s.ring, kvh.data(), 2 * kv_elems, dkvh.data(), 2 * kv_elems, kTagRing,
        [&](int origin, const float* b, float* dkv) {
          at.backward(mine, qh, doh, lseh, dvh, s.pieces[origin], b, b + kv_elems, dqh.data(), dkv,
                      dkv + kv_elems);
        },
        stats);
  }

  AttentionGrads g{core::Tensor<float>(core::Shape{l, hq, d}),
                   core::Tensor<float>(core::Shape{l, hkv, d}),
                   core::Tensor<float>(core::Shape{l, hkv, d})};
  std::vector<float> s0, s1, s2;
  post_from_heads(ex, s.group_ranks, dqh.data(), l, hs.hq_per, d, s0, kTagBack);
  post_from_heads(ex, s.group_ranks, dkvh.data(), l, hs.kv_per, d, s1, kTagBack + 1);
  post_from_heads(ex, s.group_ranks, dkvh.data() + kv_elems, l, hs.kv_per, d, s2, kTagBack + 2);
  ex.wait_all(stats);
  const core::Timer t;
  std::fill(g.dq.begin(), g.dq.end(), 0.f);
  std::fill(g.dk.begin(), g.dk.end(), 0.f);
  std::fill(g.dv.begin(), g.dv.end(), 0.f);
  unpack_from_heads(s0, s.u, l, hq, d, hs.hq_per, qb, g.dq.data());
  unpack_from_heads(s1, s.u, l, hkv, d, hs.kv_per, kb, g.dk.data());
  unpack_from_heads(s2, s.u, l, hkv, d, hs.kv_per, kb, g.dv.data());
  if (stats) stats->compute_s += t.elapsed();
  return g;
}

UspVolume usp_forward_volume(const UspOptions& opt, int world, int64_t l, int64_t hq, int64_t hkv,
                             int64_t d) {
  const int u = opt.u == 0 ? world : opt.u;
  const HeadSplit hs(hq, hkv, u);
  UspVolume vol;
  vol.all_to_all = (u - 1) * l * ((hs.hq_per + 2 * hs.kv_per) * d + hs.hq_per * (d + 1));
  vol.ring = (world / u - 1) * 2 * u * l * hs.kv_per * d;
  return vol;
}

UspVolume usp_backward_volume(const UspOptions& opt, int world, int64_t l, int64_t hq, int64_t hkv,
                              int64_t d) {
  const int u = opt.u == 0 ? world : opt.u;
  const HeadSplit hs(hq, hkv, u);
  UspVolume vol;
  // In: q, dO, D, LSE, k, v. Out: dq, dk, dv.
  vol.all_to_all =
      (u - 1) * l *
      ((2 * hs.hq_per * d + 2 * hs.hq_per + 2 * hs.kv_per * d) + (hs.hq_per + 2 * hs.kv_per) * d);
  const int64_t hops = world / u - 1, tg = u * l;
  if (opt.backward == Backward::q)
    vol.ring = hops * (tg * hs.hq_per * (2 * d + 2) + tg * hs.hq_per * d);
  else
    vol.ring = hops * (2 * tg * hs.kv_per * d + 2 * tg * hs.kv_per * d);
  return vol;
}

}  // namespace longseq::attention
