// 64-bit safety at sequence lengths past 2^31 (issue 17), where it can be checked without
// materialising the tensors: everything here is metadata (layouts, chunk-pair tables, schedules,
// pair counts, the memory model), so N = 2^33 costs microseconds (and at most seconds where a
// table walks the positions).
//
// 1. Balance layouts at N = 2^33 + 5 (odd, so every layout pads): local_len * P = padded_len,
//    position() and locate() are inverses at local indices past 2^31, the last real token is held
//    by exactly one rank and padding reads -1. An int32 offset would wrap to a negative position.
// 2. The chunk-pair table of a window mask at N = 2^31 + 5 over 4 contiguous ranks: only the
// diagonal
//    and the previous rank are needed (empty pairs skipped), as at small N; causal needs every
//    lower pair. Positions near 2^31 compared in 32 bits would classify wrongly.
// 3. Pair counts past 2^32: attention::attention_work at N = 2^17 (causal: N(N+1)/2 = 2^33 +
//    2^16 pairs; window) equals the closed form exactly, and its FLOPs follow.
// 4. The host memory model at N = 2^30 + 2^20 and twice that with a window: finite, and the
//    per-rank activation part doubles with N (a wrapped count would shrink or go negative).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>

#include "longseq/attention/harness.hpp"
#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/plan/memory.hpp"

namespace {

namespace at = longseq::attention;
namespace plan = longseq::plan;

constexpr int64_t kBig = (int64_t{1} << 33) + 5;

TEST(Sizes64, LayoutsPastTwoToThe31AreInverses) {
  for (const char* name : {"contiguous", "zigzag", "striped"}) {
    const at::Layout l(at::parse_balance(name), kBig, 4);
    EXPECT_EQ(l.local_len() * 4, l.padded_len()) << name;
    EXPECT_GE(l.padded_len(), kBig) << name;
    EXPECT_GT(l.local_len(), int64_t{1} << 31) << name;
    int holders = 0;
    for (int r = 0; r < 4; ++r) {
      for (int64_t i : {int64_t{0}, l.local_len() / 2 + 1, l.local_len() - 3, l.local_len() - 1}) {
        const int64_t p = l.position(r, i);
        ASSERT_GE(p, -1) << name << " rank " << r << " local " << i;
        ASSERT_LT(p, kBig) << name;
        if (p < 0) continue;  // padding
        const auto [rr, ii] = l.locate(p);
        EXPECT_EQ(rr, r) << name << " position " << p;
        EXPECT_EQ(ii, i) << name << " position " << p;
      }
      const auto [lr, li] = l.locate(kBig - 1);
      if (lr == r) {
        ++holders;
        EXPECT_EQ(l.position(r, li), kBig - 1) << name;
      }
    }
    EXPECT_EQ(holders, 1) << name;
    // The padded positions past the end read as padding.
    if (l.padded_len() > kBig) {
      const auto [pr, pi] = l.locate(kBig);
      EXPECT_EQ(l.position(pr, pi), -1) << name;
    }
  }
}

TEST(Sizes64, WindowPairTableAtTwoToThe31SkipsFarRanks) {
  // attention::chunk_info is closed form without documents: microseconds at any N.
  const at::Layout l(at::Balance::contiguous, (int64_t{1} << 31) + 5, 4);
  at::MaskSpec window;
  window.causal = true;
  window.window = 4096;
  const at::PairTable w(l, window);
  at::MaskSpec causal;
  causal.causal = true;
  const at::PairTable c(l, causal);
  for (int q = 0; q < 4; ++q)
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(w.needs(q, k), k == q || k == q - 1) << "window q " << q << " k " << k;
      EXPECT_EQ(c.needs(q, k), k <= q) << "causal q " << q << " k " << k;
    }
}

TEST(Sizes64, PairCountsPastTwoToThe32AreExact) {
  const int64_t n = int64_t{1} << 17;
  at::MaskSpec causal;
  causal.causal = true;
  const at::AttentionWork c = at::attention_work(causal, n, 4, 32);
  const uint64_t want = static_cast<uint64_t>(n) * static_cast<uint64_t>(n + 1) / 2;
  ASSERT_GT(want, uint64_t{1} << 32);
  EXPECT_EQ(c.visible_pairs, want);
  EXPECT_DOUBLE_EQ(c.forward_flops, 4.0 * 4 * 32 * static_cast<double>(want));
  at::MaskSpec window = causal;
  window.window = 50000;
  const uint64_t w = 50000;
  // Rows 0..w-1 see q+1 keys, the rest w.
  const uint64_t want_w = w * (w + 1) / 2 + (static_cast<uint64_t>(n) - w) * w;
  ASSERT_GT(want_w, uint64_t{1} << 32);
  EXPECT_EQ(at::attention_work(window, n, 1, 1).visible_pairs, want_w);
}

TEST(Sizes64, HostMemoryModelStaysLinearUpToPastTwoToThe31) {
  plan::HostTrainerInputs in;
  in.model.layers = 2;
  in.model.hidden = 8;
  in.model.heads = 2;
  in.model.kv_heads = 1;
  in.model.head_dim = 4;
  in.model.intermediate = 16;
  in.model.vocab = 257;
  in.world = 4;
  in.balance = "contiguous";
  auto mask = std::make_shared<at::MaskSpec>();
  mask->causal = true;
  mask->window = 4096;
  in.mask = mask;
  in.checkpoint = longseq::model::CheckpointPolicy::full;
  in.save_checkpoint = false;
  in.ffn_chunk = 1024;
  const int64_t n1 = (int64_t{1} << 30) + (int64_t{1} << 20);
  in.seq = n1;
  in.data_tokens = n1;
  const plan::HostTrainerMemory a = plan::host_trainer_memory(in);
  in.seq = 2 * n1;
  in.data_tokens = 2 * n1;
  const plan::HostTrainerMemory b = plan::host_trainer_memory(in);
  ASSERT_TRUE(std::isfinite(a.total()) && std::isfinite(b.total()));
  EXPECT_GT(a.per_rank_peak, 0);
  // Activations are linear in N (the kernel workspace and gathered units are not): the ratio is
  // 2 within a percent.
  EXPECT_NEAR(b.per_rank_peak / a.per_rank_peak, 2.0, 0.02);
  EXPECT_NEAR(b.data / a.data, 2.0, 1e-6);
}

}  // namespace
