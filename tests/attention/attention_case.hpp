#pragma once
// One attention case shared by the tests and the benchmarks (design.md §9): seeded global inputs,
// the fp64 reference, the distributed run on local ranks, and the comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "longseq/attention/distributed.hpp"
#include "longseq/attention/schedule.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/kernels/ref/attention.hpp"

namespace longseq::testing {

struct LinkBytes {
  int64_t intra = 0, inter = 0;
};

struct AttnCase {
  int64_t n, hq, hkv, d;
  int world;
  std::shared_ptr<attention::MaskSpec> mask = std::make_shared<attention::MaskSpec>();
  std::vector<float> q, k, v, dout;       // global inputs
  std::vector<float> o, lse, dq, dk, dv;  // distributed results, global order
  std::vector<double> ref_o, ref_lse, ref_dq, ref_dk, ref_dv;
  std::vector<LinkBytes> fwd_bytes, bwd_bytes;  // per rank
  std::vector<attention::AttentionStats> fwd_stats, bwd_stats;

  /// mask: full | causal | window | document | blocks | blocks+causal. Block masks use blocks of
  /// 2 * world tokens (a multiple of world, as block-striped needs).
  AttnCase(int64_t n_, int64_t hq_, int64_t hkv_, int64_t d_, const std::string& mask_kind,
           int world_, uint64_t seed)
      : n(n_), hq(hq_), hkv(hkv_), d(d_), world(world_) {
    q.resize(n * hq * d);
    k.resize(n * hkv * d);
    v.resize(n * hkv * d);
    dout.resize(n * hq * d);
    core::fill_normal(q.data(), q.size(), core::derive_seed(seed, 1));
    core::fill_normal(k.data(), k.size(), core::derive_seed(seed, 2));
    core::fill_normal(v.data(), v.size(), core::derive_seed(seed, 3));
    core::fill_normal(dout.data(), dout.size(), core::derive_seed(seed, 4));
    attention::MaskSpec& m = *mask;
    if (mask_kind == "causal") m.causal = true;
    if (mask_kind == "window") m.window = std::max<int64_t>(2, n / 4);
    if (mask_kind == "document") {
      // Uneven documents: boundaries at seeded places, some tiny, some long.
      m.causal = true;
      m.doc_ids.resize(n);
      int32_t doc = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (i > 0 && core::uniform01(seed, 1000 + i) < 4.0 / static_cast<double>(n)) ++doc;
        m.doc_ids[i] = doc;
      }
    }
    if (mask_kind.rfind("blocks", 0) == 0) {
      m.causal = mask_kind == "blocks+causal";
      m.block_size = 2 * world;
      m.num_blocks = (n + m.block_size - 1) / m.block_size;
      m.block_mask.resize(m.num_blocks * m.num_blocks);
      for (int64_t i = 0; i < m.num_blocks; ++i)
        for (int64_t j = 0; j < m.num_blocks;
             ++j)  // local band + global first block + a dilated pattern
          m.block_mask[i * m.num_blocks + j] =
              (std::abs(i - j) <= 1 || j == 0 || (i + 2 * j) % 5 == 0) ? 1 : 0;
      // One block row that sees nothing at all: its rows must come out O = 0, LSE = -inf.
      if (m.num_blocks > 2)
        for (int64_t j = 0; j < m.num_blocks; ++j) m.block_mask[2 * m.num_blocks + j] = 0;
    }
  }

  void run_reference() {
    auto to_d = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
    std::vector<double> qd = to_d(q), kd = to_d(k), vd = to_d(v), dod = to_d(dout);
    std::vector<int64_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = i;
    kernels::Tokens t{pos.data(), mask->doc_ids.empty() ? nullptr : mask->doc_ids.data()};
    kernels::ref::AttnDims dims{n, n, hq, hkv, d};
    ref_o.resize(n * hq * d);
    ref_lse.resize(n * hq);
    ref_dq.resize(n * hq * d);
    ref_dk.resize(n * hkv * d);
    ref_dv.resize(n * hkv * d);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const kernels::Mask km = mask->kernel_mask();
    kernels::ref::attention_forward(qd.data(), kd.data(), vd.data(), t, t, km, scale, dims,
                                    ref_o.data(), ref_lse.data());
    kernels::ref::attention_backward(qd.data(), kd.data(), vd.data(), dod.data(), t, t, km, scale,
                                     dims, ref_dq.data(), ref_dk.data(), ref_dv.data());
  }

  void run_distributed(const attention::AttentionSpec& spec, const attention::Layout& layout,
                       int nodes, bool backward = true, const comm::LinkModel& link = {}) {
    o.assign(n * hq * d, 0.f);
    lse.assign(n * hq, 0.f);
    dq.assign(n * hq * d, 0.f);
    dk.assign(n * hkv * d, 0.f);
    dv.assign(n * hkv * d, 0.f);
    fwd_bytes.assign(world, {});
    bwd_bytes.assign(world, {});
    fwd_stats.assign(world, {});
    bwd_stats.assign(world, {});
    comm::Options cfg;
    cfg.backend = "local";
    cfg.world = world;
    cfg.nodes = nodes;
    cfg.link = link;
    // Inputs and outputs live on spec.device: a device's copy of the host shard, and back.
    const core::Device dev = spec.device;
    comm::run_local(cfg, [&](comm::Group& g) {
      const int r = g.rank();
      const int64_t l = layout.local_len();
      auto shard = [&](const std::vector<float>& global, int64_t heads) {
        core::Tensor<float> local(core::Shape{l, heads, d});
        layout.shard(global.data(), heads * d, r, local.data());
        if (dev.is_cpu()) return local;
        core::Tensor<float> on(local.shape(), dev, "test input");
        core::copy_bytes(on.data(), dev, local.data(), core::Device::cpu(),
                         sizeof(float) * static_cast<size_t>(local.numel()));
        return on;
      };
      auto unshard = [&](const core::Tensor<float>& t, int64_t row, std::vector<float>& global) {
        std::vector<float> local(static_cast<size_t>(t.numel()));
        core::copy_bytes(local.data(), core::Device::cpu(), t.data(), dev,
                         local.size() * sizeof(float));
        layout.unshard(local.data(), row, r, global.data());
      };
      const core::Tensor<float> lq = shard(q, hq), lk = shard(k, hkv), lv = shard(v, hkv),
                                ld = shard(dout, hq);
      attention::prepare(spec, layout, g);
      g.reset_rank_stats();
      attention::AttentionSaved saved = attention::distributed_attention_forward(
          lq.view(), lk.view(), lv.view(), spec, layout, g, &fwd_stats[r]);
      fwd_bytes[r] = {static_cast<int64_t>(g.rank_stats().sent_intra.bytes),
                      static_cast<int64_t>(g.rank_stats().sent_inter.bytes)};
      unshard(saved.o, hq * d, o);
      unshard(saved.lse, hq, lse);
      if (!backward) return;
      g.reset_rank_stats();
      attention::AttentionGrads gr = attention::distributed_attention_backward(
          ld.view(), saved, spec, layout, g, &bwd_stats[r]);
      bwd_bytes[r] = {static_cast<int64_t>(g.rank_stats().sent_intra.bytes),
                      static_cast<int64_t>(g.rank_stats().sent_inter.bytes)};
      unshard(gr.dq, hq * d, dq);
      unshard(gr.dk, hkv * d, dk);
      unshard(gr.dv, hkv * d, dv);
    });
  }

  /// run_distributed of `algo` in fp32 with the case's mask.
  void run(const attention::Algorithm& algo, const attention::Layout& layout, int nodes,
           bool backward = true, const comm::LinkModel& link = {}) {
    attention::AttentionSpec spec;
    spec.algo = algo;
    spec.mask = mask;
    run_distributed(spec, layout, nodes, backward, link);
  }

  /// |got - ref| <= atol + rtol * |ref| elementwise; -inf must match -inf exactly; no NaN.
  static void expect_close(const char* what, const std::vector<float>& got,
                           const std::vector<double>& ref, double atol, double rtol) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double g = got[i], r = ref[i];
      const bool ok = std::isinf(r)
                          ? (g == r)
                          : (!std::isnan(g) && std::fabs(g - r) <= atol + rtol * std::fabs(r));
      if (!ok && bad++ < 5) ADD_FAILURE() << what << "[" << i << "] = " << g << ", reference " << r;
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                       << " elements out of tolerance";
  }
};

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

inline void expect_matches_reference(const AttnCase& c, bool backward = true) {
  AttnCase::expect_close("o", c.o, c.ref_o, kOutTol, kOutTol);
  AttnCase::expect_close("lse", c.lse, c.ref_lse, kOutTol, kOutTol);
  if (!backward) return;
  AttnCase::expect_close("dq", c.dq, c.ref_dq, kGradTol, kGradTol);
  AttnCase::expect_close("dk", c.dk, c.ref_dk, kGradTol, kGradTol);
  AttnCase::expect_close("dv", c.dv, c.ref_dv, kGradTol, kGradTol);
}

// Every rank's schedule bytes (schedule.hpp) of one pass: what the counters must show.
inline std::vector<attention::PassBytes> schedule_bytes_of(const AttnCase& c,
                                                           const attention::Algorithm& algo,
                                                           const attention::Layout& layout,
                                                           int nodes, attention::Pass pass,
                                                           int64_t elem = 4) {
  const attention::PairTable pairs(layout, *c.mask);
  const comm::Topology topo =
      attention::schedule_topology(algo, comm::Topology::declared(c.world, nodes));
  std::vector<attention::PassBytes> out;
  for (int r = 0; r < c.world; ++r)
    out.push_back(
        attention::schedule_bytes(attention::make_schedule(r, topo, layout, pairs, algo, pass),
                                  algo, pass, {layout.local_len(), c.hq, c.hkv, c.d, elem}));
  return out;
}

// The byte counters of the last run equal the schedules' bytes, rank by rank and pass by pass.
inline void expect_schedule_bytes(const AttnCase& c, const attention::Algorithm& algo,
                                  const attention::Layout& layout, int nodes, bool backward = true,
                                  int64_t elem = 4) {
  const auto f = schedule_bytes_of(c, algo, layout, nodes, attention::Pass::forward, elem);
  const auto b = schedule_bytes_of(c, algo, layout, nodes, attention::Pass::backward, elem);
  for (int r = 0; r < c.world; ++r) {
    EXPECT_EQ(c.fwd_bytes[r].intra + c.fwd_bytes[r].inter, f[r].total()) << "rank " << r;
    if (backward) {
      EXPECT_EQ(c.bwd_bytes[r].intra + c.bwd_bytes[r].inter, b[r].total()) << "rank " << r;
    }
  }
}

}  // namespace longseq::testing
