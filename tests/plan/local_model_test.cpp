// The local-host parts of the cost model: the kernels' tile replay, core sharing (oversubscribed
// ranks), the local backend's copy at the wait, and the profile fields that carry them.
#include <gtest/gtest.h>

#include <vector>

#include "longseq/attention/layout.hpp"
#include "longseq/kernels/cpu/attention.hpp"
#include "longseq/kernels/cpu/tiles.hpp"
#include "longseq/plan/attention_cost.hpp"
#include "longseq/plan/hardware.hpp"

namespace longseq::plan {
namespace {

using attention::Balance;
using attention::Chunk;
using attention::Layout;
using attention::MaskSpec;

// What the kernels do, on explicit position arrays: kernels/cpu/tiles.hpp classify + trim.
TileWork kernel_truth(const Chunk& q, const Chunk& k, int64_t n, const MaskSpec& m, int64_t tq,
                      int64_t tk) {
  auto positions = [n](const Chunk& c) {
    std::vector<int64_t> p(c.len);
    for (int64_t i = 0; i < c.len; ++i) {
      const int64_t x = c.pos_begin + i * c.pos_stride;
      p[i] = x < n ? x : -1;  // padding
    }
    return p;
  };
  const std::vector<int64_t> qp = positions(q), kp = positions(k);
  const kernels::Tokens qt{qp.data(), nullptr}, kt{kp.data(), nullptr};
  const kernels::Mask km = m.kernel_mask();
  TileWork w;
  for (int64_t r0 = 0; r0 < q.len; r0 += tq) {
    const int64_t br = std::min(tq, q.len - r0);
    const auto qi = kernels::cpu::detail::tile_info(qt, r0, r0 + br, false);
    for (int64_t c0 = 0; c0 < k.len; c0 += tk) {
      const int64_t bc = std::min(tk, k.len - c0);
      const auto ki = kernels::cpu::detail::tile_info(kt, c0, c0 + bc, false);
      const auto kind = kernels::cpu::detail::classify(km, qi, ki);
      if (kind == kernels::cpu::detail::TileKind::empty) continue;
      if (kind == kernels::cpu::detail::TileKind::full) {
        w.full += br * bc;
        continue;
      }
      const auto rc = kernels::cpu::detail::trim(km, qi, ki, br, bc);
      if (!rc.empty()) w.partial += (rc.r1 - rc.r0) * (rc.c1 - rc.c0);
    }
  }
  return w;
}

TEST(KernelTiles, ReplayEqualsTheKernelsClassification) {
  // Layouts with contiguous (zigzag), strided (striped) and padded chunks; causal, window, full.
  for (Balance bal : {Balance::zigzag, Balance::striped, Balance::contiguous})
    for (int64_t n : {int64_t{1000}, int64_t{1024}})
      for (int64_t window : {int64_t{0}, int64_t{150}})
        for (bool causal : {true, false}) {
          if (!causal && window > 0) continue;
          MaskSpec m;
          m.causal = causal;
          m.window = window;
          const Layout layout(bal, n, 4, 0);
          for (int qr = 0; qr < 4; ++qr)
            for (int kr = 0; kr < 4; ++kr)
              for (const Chunk& q : layout.chunks(qr))
                for (const Chunk& k : layout.chunks(kr))
                  for (auto [tq, tk] : {std::pair<int64_t, int64_t>{64, 128}, {32, 32}}) {
                    const TileWork a = kernel_tile_work(q, k, n, m, tq, tk);
                    const TileWork b = kernel_truth(q, k, n, m, tq, tk);
                    ASSERT_EQ(a.full, b.full)
                        << attention::balance_name(bal) << " n " << n << " " << m.describe();
                    ASSERT_EQ(a.partial, b.partial)
                        << attention::balance_name(bal) << " n " << n << " " << m.describe();
                    // The kernels compute every visible pair (and, in partial tiles, some masked).
                    ASSERT_GE(a.full + a.partial, visible_pairs(q, k, n, m));
                  }
        }
}

Hardware local_like() {
  Hardware hw;
  hw.name = "test-local";
  hw.gpus_per_node = 2;
  hw.memory_bytes = 1e10;
  hw.peak_flops = 1e11;
  hw.dtype_bytes = 4;
  hw.intra = hw.inter = {1e-5, 1e10};
  hw.inter_node_bandwidth_Bps = 2e10;
  return hw;
}

AttnProblem problem(int world, Balance bal) {
  AttnProblem p;
  p.n = 4096;
  p.hq = p.hkv = 4;
  p.d = 64;
  p.world = world;
  p.gpus_per_node = world;
  p.balance = bal;
  p.mask.causal = true;
  return p;
}

TEST(LocalModel, OversubscribedRanksShareTheCores) {
  Hardware hw = local_like();
  const attention::Algorithm ring = attention::Algorithm::parse("ring");
  const double own = cost_attention(ring, problem(4, Balance::zigzag), hw).forward.compute_s;
  hw.host_cores = 2;
  EXPECT_DOUBLE_EQ(hw.compute_share(2), 1.0);
  EXPECT_DOUBLE_EQ(hw.compute_share(4), 0.5);
  const double shared = cost_attention(ring, problem(4, Balance::zigzag), hw).forward.compute_s;
  EXPECT_NEAR(shared / own, 2.0, 1e-9);
  // World 2 on 2 cores: no sharing.
  Hardware own2 = local_like();
  EXPECT_DOUBLE_EQ(cost_attention(ring, problem(2, Balance::zigzag), hw).forward.compute_s,
                   cost_attention(ring, problem(2, Balance::zigzag), own2).forward.compute_s);
}

TEST(LocalModel, WaitCopyIsPaidAfterCompute) {
  // Fast compute, slow copy: every received K,V bundle costs its copy on the waiting rank.
  Hardware hw = local_like();
  hw.peak_flops = 1e18;
  hw.intra = hw.inter = {0, 1e18};
  const AttnProblem p = problem(2, Balance::zigzag);
  const double before = cost_attention(attention::Algorithm::parse("ring"), p, hw).forward.seconds;
  hw.wait_copy = {1e-3, 1e9};
  const double after = cost_attention(attention::Algorithm::parse("ring"), p, hw).forward.seconds;
  // World 2: one hop of K,V = 2 * L * Hkv * D * 4 bytes, L = 2048.
  const double bytes = 2.0 * 2048 * 4 * 64 * 4;
  EXPECT_NEAR(after - before, 1e-3 + bytes / 1e9, 1e-9);
}

TEST(LocalModel, TileReplayCostsMaskedWorkOnly) {
  Hardware hw = local_like();
  const attention::Algorithm burst = attention::Algorithm::parse("burst");
  AttnProblem full = problem(2, Balance::zigzag);
  full.mask = MaskSpec{};
  const double plain = cost_attention(burst, full, hw).forward.compute_s;
  hw.tiles = {kernels::cpu::kForwardTileQ, kernels::cpu::kForwardTileK,
              kernels::cpu::kBackwardTileQ, kernels::cpu::kBackwardTileK};
  hw.corrections.partial_tile_cost_fwd = 3.0;
  // Full mask: every tile is full, the partial cost never enters.
  EXPECT_NEAR(cost_attention(burst, full, hw).forward.compute_s, plain, 1e-12);
  // Causal striped: partial tiles cost more than the visible pairs say; FLOPs stay the visible
  // ones.
  Hardware no_tiles = local_like();
  const AttnProblem st = problem(2, Balance::striped);
  const PassCost a = cost_attention(burst, st, no_tiles).forward,
                 b = cost_attention(burst, st, hw).forward;
  EXPECT_DOUBLE_EQ(a.flops, b.flops);
  EXPECT_GT(b.compute_s, 1.2 * a.compute_s);
}

TEST(LocalModel, ProfileFieldsRoundTrip) {
  Hardware hw = local_like();
  hw.host_cores = 2;
  hw.wait_copy = {6e-6, 8e9};
  hw.tiles = {256, 512, 256, 256};
  hw.corrections.partial_tile_cost_fwd = 2.0;
  hw.corrections.partial_tile_cost_bwd = 2.5;
  hw.mpi_note = "not measured: not launched under mpirun";
  const Hardware back = parse_hardware(hardware_to_json(hw), "roundtrip");
  EXPECT_EQ(back.host_cores, 2);
  EXPECT_DOUBLE_EQ(back.wait_copy.bandwidth_Bps, 8e9);
  EXPECT_EQ(back.tiles.fwd_k, 512);
  EXPECT_DOUBLE_EQ(back.corrections.partial_tile_cost_bwd, 2.5);
  EXPECT_FALSE(back.mpi_measured);
  EXPECT_EQ(back.mpi_note, hw.mpi_note);
  hw.mpi_measured = true;
  hw.mpi = {2e-6, 5e9};
  EXPECT_DOUBLE_EQ(parse_hardware(hardware_to_json(hw), "roundtrip").mpi.bandwidth_Bps, 5e9);
  // A GPU profile has none of it: no tile replay, no core sharing.
  const Hardware a800 = load_hardware("a800");
  EXPECT_FALSE(a800.tiles.enabled());
  EXPECT_DOUBLE_EQ(a800.compute_share(64), 1.0);
}

}  // namespace
}  // namespace longseq::plan
