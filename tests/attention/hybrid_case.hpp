#pragma once
// Runs a multi-ring / head-parallel algorithm (attention/hybrid.hpp) on the shared attention case
// (attention_case.hpp: seeded global inputs, fp64 reference, comparison), with per-rank byte
// counts, the way AttnCase::run_distributed runs the flat schedules.
#include <string>
#include <vector>

#include "attention/attention_case.hpp"
#include "longseq/attention/hybrid.hpp"
#include "longseq/comm/launch.hpp"

namespace longseq::testing {

// Tolerances (|x - ref| <= atol + rtol |ref|, fp32 against fp64, inputs N(0, 1), D = 16): the
// kernels' own bounds (tests/kernels/cpu_attention_test.cpp: 5e-6 for o/lse, 2e-5 for gradients)
// widened 4x for the LSE-weighted merges and fp32 gradient sums across ranks (up to 8 partials).
inline constexpr double kOutTol = 2e-5;
inline constexpr double kGradTol = 8e-5;

inline attention::Layout make_layout(const std::string& balance, const AttnCase& c) {
  const attention::Balance b = attention::parse_balance(balance);
  return attention::Layout(b, c.n, c.world,
                           b == attention::Balance::block_striped ? 2 * c.world : 0);
}

// startrail:C with the given placement.
inline attention::Algorithm startrail_algo(int c, attention::TeamPlacement placement) {
  attention::Algorithm a;
  a.family = attention::Algorithm::Family::startrail;
  a.team = c;
  a.placement = placement;
  return a;
}

// The USP options of `a` (ulysses: U = the world).
inline attention::UspOptions usp_options_of(const attention::Algorithm& a) {
  return a.family == attention::Algorithm::Family::usp ? attention::UspOptions{a.degree, a.backward}
                                                       : attention::UspOptions{};
}

inline void run_hybrid(AttnCase& c, const attention::Algorithm& algo,
                       const attention::Layout& layout, int nodes, bool backward = true,
                       const comm::LinkModel& link = {}) {
  attention::AttentionSpec spec;
  spec.mask = c.mask;
  const int64_t n = c.n, hq = c.hq, hkv = c.hkv, d = c.d;
  c.o.assign(n * hq * d, 0.f);
  c.lse.assign(n * hq, 0.f);
  c.dq.assign(n * hq * d, 0.f);
  c.dk.assign(n * hkv * d, 0.f);
  c.dv.assign(n * hkv * d, 0.f);
  c.fwd_bytes.assign(c.world, {});
  c.bwd_bytes.assign(c.world, {});
  c.fwd_stats.assign(c.world, {});
  c.bwd_stats.assign(c.world, {});
  comm::Options cfg;
  cfg.world = c.world;
  cfg.nodes = nodes;
  cfg.link = link;
  comm::run_local(cfg, [&](comm::Group& g) {
    const int r = g.rank();
    const int64_t l = layout.local_len();
    std::vector<float> lq(l * hq * d), lk(l * hkv * d), lv(l * hkv * d), ld(l * hq * d);
    layout.shard(c.q.data(), hq * d, r, lq.data());
    layout.shard(c.k.data(), hkv * d, r, lk.data());
    layout.shard(c.v.data(), hkv * d, r, lv.data());
    layout.shard(c.dout.data(), hq * d, r, ld.data());
    core::View<const float> vq(lq.data(), core::Shape{l, hq, d}),
        vk(lk.data(), core::Shape{l, hkv, d}), vv(lv.data(), core::Shape{l, hkv, d}),
        vd(ld.data(), core::Shape{l, hq, d});
    g.reset_stats();
    attention::AttentionSaved saved =
        attention::hybrid_forward(algo, vq, vk, vv, spec, layout, g, &c.fwd_stats[r]);
    c.fwd_bytes[r] = {static_cast<int64_t>(g.stats().sent_intra.bytes),
                      static_cast<int64_t>(g.stats().sent_inter.bytes)};
    layout.unshard(saved.o.data(), hq * d, r, c.o.data());
    layout.unshard(saved.lse.data(), hq, r, c.lse.data());
    if (!backward) return;
    g.reset_stats();
    attention::AttentionGrads gr =
        attention::hybrid_backward(algo, vd, saved, spec, layout, g, &c.bwd_stats[r]);
    c.bwd_bytes[r] = {static_cast<int64_t>(g.stats().sent_intra.bytes),
                      static_cast<int64_t>(g.stats().sent_inter.bytes)};
    layout.unshard(gr.dq.data(), hq * d, r, c.dq.data());
    layout.unshard(gr.dk.data(), hkv * d, r, c.dk.data());
    layout.unshard(gr.dv.data(), hkv * d, r, c.dv.data());
  });
}

inline void expect_matches_reference(const AttnCase& c, bool backward = true) {
  AttnCase::expect_close("o", c.o, c.ref_o, kOutTol, kOutTol);
  AttnCase::expect_close("lse", c.lse, c.ref_lse, kOutTol, kOutTol);
  if (!backward) return;
  AttnCase::expect_close("dq", c.dq, c.ref_dq, kGradTol, kGradTol);
  AttnCase::expect_close("dk", c.dk, c.ref_dk, kGradTol, kGradTol);
  AttnCase::expect_close("dv", c.dv, c.ref_dv, kGradTol, kGradTol);
}

}  // namespace longseq::testing
