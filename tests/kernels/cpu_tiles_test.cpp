// kernels/cpu tile machinery (internal header tiles.hpp) against brute force over the mask
// predicate: classification must be sound (empty: no visible pair; full: every pair visible),
// trimming must keep every visible pair (and be tight for pure band masks on contiguous tiles),
// the per-element mask must equal the predicate, and exp2 must be accurate and exact at -inf. The
// row kernels are checked in every kernel variant this CPU can run (kernels/cpu/dispatch.hpp).
//
// Legend: a tile pair is Bq query tokens x Bk key tokens with global positions (negative =
// padding) and document ids; visible(i, j) is kernels/mask.hpp's predicate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "longseq/core/cpu.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/kernels/cpu/dispatch.hpp"
#include "longseq/kernels/cpu/tiles.hpp"
#include "longseq/kernels/mask.hpp"

namespace {

namespace kd = longseq::kernels::cpu::detail;
namespace kcpu = longseq::kernels::cpu;
using longseq::core::Isa;

// The variants of this build that this CPU runs.
std::vector<const kcpu::KernelTable*> runnable_tables() {
  std::vector<const kcpu::KernelTable*> out;
  for (Isa isa : kcpu::built_isas())
    if (isa <= longseq::core::best_isa(longseq::core::cpu_features()))
      out.push_back(&kcpu::kernel_table(isa));
  return out;
}
using longseq::kernels::Mask;
using longseq::kernels::Tokens;
using longseq::kernels::visible;

struct Side {
  std::vector<int64_t> pos;
  std::vector<int32_t> doc;
  Tokens tokens() const { return {pos.data(), doc.data()}; }
};

// Seeded random tile: contiguous from a random start, or shuffled/strided with optional padding.
Side random_side(int64_t n, uint64_t seed, bool contiguous) {
  Side s;
  const int64_t start = static_cast<int64_t>(longseq::core::uniform01(seed, 1) * 600);
  for (int64_t i = 0; i < n; ++i) s.pos.push_back(start + i);
  if (!contiguous) {
    const int64_t stride = 1 + static_cast<int64_t>(longseq::core::uniform01(seed, 2) * 3);
    for (int64_t i = 0; i < n; ++i) s.pos[i] = start + i * stride;
    for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates with the counter-based rng
      const int64_t j = static_cast<int64_t>(longseq::core::uniform01(seed, 10 + i) * (i + 1));
      std::swap(s.pos[i], s.pos[j]);
    }
    for (int64_t i = 0; i < n; ++i)
      if (longseq::core::uniform01(seed, 5000 + i) < 0.05) s.pos[i] = -1;
  }
  // Documents of 40..160 positions.
  const int64_t len = 40 + static_cast<int64_t>(longseq::core::uniform01(seed, 3) * 120);
  for (int64_t p : s.pos) s.doc.push_back(p < 0 ? -1 : static_cast<int32_t>(p / len));
  return s;
}

struct MaskCase {
  Mask mask;
  std::vector<uint8_t> blocks;
};

MaskCase random_mask(uint64_t seed) {
  MaskCase c;
  const double u = longseq::core::uniform01(seed, 100);
  c.mask.causal = longseq::core::uniform01(seed, 101) < 0.6;
  if (longseq::core::uniform01(seed, 102) < 0.4)
    c.mask.window = 1 + static_cast<int64_t>(longseq::core::uniform01(seed, 103) * 300);
  c.mask.docs = longseq::core::uniform01(seed, 104) < 0.3;
  if (u < 0.3) {
    c.mask.block_size = 16 + static_cast<int64_t>(longseq::core::uniform01(seed, 105) * 64);
    c.mask.num_blocks = 2000 / c.mask.block_size + 1;
    c.blocks.resize(c.mask.num_blocks * c.mask.num_blocks);
    for (size_t i = 0; i < c.blocks.size(); ++i)
      c.blocks[i] = longseq::core::uniform01(seed, 200 + i) < 0.7 ? 1 : 0;
  }
  return c;
}

TEST(CpuTiles, ClassificationAndTrimAreSoundAndTight) {
  int checked_empty = 0, checked_full = 0, checked_tight = 0;
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    const int64_t bq = 1 + static_cast<int64_t>(longseq::core::uniform01(seed, 7) * 40);
    const int64_t bk = 1 + static_cast<int64_t>(longseq::core::uniform01(seed, 8) * 60);
    const bool qc = longseq::core::uniform01(seed, 9) < 0.7,
               kc = longseq::core::uniform01(seed, 6) < 0.7;
    const Side q = random_side(bq, seed * 2 + 1, qc), k = random_side(bk, seed * 2 + 2, kc);
    MaskCase mc = random_mask(seed);
    if (!mc.blocks.empty()) mc.mask.block_mask = mc.blocks.data();
    const Mask& m = mc.mask;
    const kd::TileInfo qi = kd::tile_info(q.tokens(), 0, bq, m.docs);
    const kd::TileInfo ki = kd::tile_info(k.tokens(), 0, bk, m.docs);
    auto is_contiguous = [](const Side& s) {
      for (size_t i = 0; i < s.pos.size(); ++i)
        if (s.pos[i] < 0 || s.pos[i] != s.pos[0] + static_cast<int64_t>(i)) return false;
      return true;
    };
    EXPECT_EQ(qi.contiguous, is_contiguous(q)) << seed;
    EXPECT_EQ(ki.contiguous, is_contiguous(k)) << seed;
    const kd::TileKind kind = kd::classify(m, qi, ki);
    const kd::Rect rc = kd::trim(m, qi, ki, bq, bk);
    const kd::Rect rq = kd::quantize(rc, bq, bk);
    bool any = false, all = true;
    int64_t vr0 = bq, vr1 = 0, vc0 = bk, vc1 = 0;  // bounding box of the visible pairs
    for (int64_t i = 0; i < bq; ++i)
      for (int64_t j = 0; j < bk; ++j) {
        const bool v = visible(m, q.tokens(), i, k.tokens(), j);
        any = any || v;
        all = all && v;
        if (v) {
          vr0 = std::min(vr0, i);
          vr1 = std::max(vr1, i + 1);
          vc0 = std::min(vc0, j);
          vc1 = std::max(vc1, j + 1);
          ASSERT_TRUE(i >= rc.r0 && i < rc.r1 && j >= rc.c0 && j < rc.c1)
              << "seed " << seed << ": visible pair (" << i << ", " << j << ") trimmed away";
          ASSERT_TRUE(i >= rq.r0 && i < rq.r1 && j >= rq.c0 && j < rq.c1) << seed;
        }
      }
    if (kind == kd::TileKind::empty) {
      EXPECT_FALSE(any) << "seed " << seed << ": classified empty but a pair is visible";
      ++checked_empty;
    }
    if (kind == kd::TileKind::full) {
      EXPECT_TRUE(all) << "seed " << seed << ": classified full but a pair is masked";
      ++checked_full;
    }
    // Quantised rectangles are multiples of the quantum (or the tile edge) and contain the trim.
    if (!rc.empty()) {
      EXPECT_TRUE(rq.r0 % kd::kTrimQuantum == 0 && rq.c0 % kd::kTrimQuantum == 0) << seed;
      EXPECT_TRUE((rq.r1 == bq || rq.r1 % kd::kTrimQuantum == 0) &&
                  (rq.c1 == bk || rq.c1 % kd::kTrimQuantum == 0))
          << seed;
      EXPECT_TRUE(rq.r0 <= rc.r0 && rq.r1 >= rc.r1 && rq.c0 <= rc.c0 && rq.c1 >= rc.c1) << seed;
    }
    // Pure band masks on contiguous tiles: the trim is the visible bounding box exactly.
    if (qc && kc && !m.docs && !m.block_mask && (m.causal || m.window > 0) && any) {
      EXPECT_EQ(rc.r0, vr0) << seed;
      EXPECT_EQ(rc.r1, vr1) << seed;
      EXPECT_EQ(rc.c0, vc0) << seed;
      EXPECT_EQ(rc.c1, vc1) << seed;
      ++checked_tight;
    }
    // The per-element mask equals the predicate, contiguous fast path and general path alike.
    for (const kcpu::KernelTable* t : runnable_tables())
      for (int64_t i = 0; i < bq; ++i) {
        std::vector<float> row(bk, 1.0f);
        t->mask_row(m, q.pos[i], q.doc[i], k.pos.data(), k.doc.data(), kc ? k.pos[0] : -1,
                    row.data(), bk);
        for (int64_t j = 0; j < bk; ++j)
          ASSERT_EQ(row[j] == 1.0f, visible(m, q.tokens(), i, k.tokens(), j))
              << longseq::core::isa_name(t->isa) << " seed " << seed << " pair (" << i << ", " << j
              << ")";
      }
  }
  // The random cases must actually reach every branch.
  EXPECT_GT(checked_empty, 100);
  EXPECT_GT(checked_full, 100);
  EXPECT_GT(checked_tight, 100);
}

TEST(CpuTiles, Exp2IsAccurateAndExactAtTheEnds) {
  for (const kcpu::KernelTable* t : runnable_tables()) {
    SCOPED_TRACE(longseq::core::isa_name(t->isa));
    // Row kernel over every tail length, against std::exp2 in double.
    for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 33, 100}) {
      std::vector<float> x(n);
      for (int64_t j = 0; j < n; ++j) x[j] = -40.0f * static_cast<float>(j) / n - 0.37f;
      x[0] = -std::numeric_limits<float>::infinity();
      std::vector<float> y = x;
      const float sum = t->exp2_row_inplace(y.data(), n, 0.0f);
      double want_sum = 0;
      EXPECT_EQ(y[0], 0.0f);
      for (int64_t j = 1; j < n; ++j) {
        const double want = std::exp2(static_cast<double>(x[j]));
        EXPECT_NEAR(y[j], want, 3e-7 * want) << "n=" << n << " j=" << j;
        want_sum += want;
      }
      EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
    }
    std::vector<float> ends = {-200.0f, 0.0f};
    t->exp2_row_inplace(ends.data(), 2, 0.0f);
    EXPECT_EQ(ends[0], 0.0f);
    EXPECT_EQ(ends[1], 1.0f);
    // The vector paths have no clamp: below -126 (and -inf, NaN inside) they must still give
    // exactly 0, at every position of a chunk and of a tail; just above, the true (tiny) value.
    for (int64_t n : {5, 8, 13, 16, 21}) {
      std::vector<float> x(n);
      for (int64_t j = 0; j < n; ++j) {
        const float below[] = {-126.5f, -127.0f, -1000.0f, -1e30f,
                               -std::numeric_limits<float>::infinity()};
        x[j] = j % 2 ? below[j / 2 % 5] : -125.5f;
      }
      const float sum = t->exp2_row_inplace(x.data(), n, 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        if (j % 2)
          EXPECT_EQ(x[j], 0.0f) << "n=" << n << " j=" << j;
        else
          EXPECT_NEAR(x[j], std::exp2(-125.5), 3e-7 * std::exp2(-125.5)) << "n=" << n << " j=" << j;
      }
      EXPECT_TRUE(std::isfinite(sum));
    }
    // Up to 64 above the running maximum (the bf16 forward's lazy rescaling) stays exact in range.
    std::vector<float> hi = {63.7f, 10.2f, 64.0f};
    t->exp2_row_inplace(hi.data(), 3, 0.0f);
    const double w0 = std::exp2(static_cast<double>(63.7f)),
                 w1 = std::exp2(static_cast<double>(10.2f));
    EXPECT_NEAR(hi[0], w0, 3e-7 * w0);
    EXPECT_NEAR(hi[1], w1, 3e-7 * w1);
    EXPECT_EQ(hi[2], std::exp2(64.0f));
  }
}

TEST(CpuTiles, Bf16RoundingMatchesTheScalarRuleInEveryVariant) {
  // Nearest-even ties, the carry into the exponent, overflow to inf, infinities, NaN (quiet, sign
  // kept), signed zeros and random values, at every tail length. avx512_bf16 rounds in hardware,
  // which treats denormal inputs as zero: denormals are checked against that rule there.
  std::vector<float> x = {1.0f,
                          1.00390625f,
                          1.01171875f,
                          1.0f + 3.0f / 512,
                          -2.5f,
                          0.0f,
                          -0.0f,
                          3.3895313e38f,
                          -3.3895313e38f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          1e-40f,
                          -3e-39f};
  for (uint64_t i = 0; i < 200; ++i)
    x.push_back(static_cast<float>((longseq::core::uniform01(99, i) - 0.5) *
                                   std::exp2(longseq::core::uniform01(98, i) * 200 - 100)));
  for (const kcpu::KernelTable* t : runnable_tables())
    for (int64_t n : {1, 7, 8, 9, 16, 17, static_cast<int>(x.size())}) {
      std::vector<longseq::core::bf16> got(n);
      t->to_bf16_row(x.data(), got.data(), n);
      for (int64_t j = 0; j < n; ++j) {
        const bool denormal = std::fpclassify(x[j]) == FP_SUBNORMAL;
        const float want_in = denormal && t->isa == Isa::avx512_bf16 ? 0.0f * x[j] : x[j];
        const uint16_t want = longseq::core::to_bf16(want_in).bits;
        EXPECT_EQ(got[j].bits, want)
            << longseq::core::isa_name(t->isa) << " n=" << n << " x=" << x[j];
      }
    }
}

}  // namespace
