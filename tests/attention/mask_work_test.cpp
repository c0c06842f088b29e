// Mask work and pair tables linear in what the mask lets through (issue 31):
//
// 1. count_visible (attention_work, the MFU formula's pair count) equals a brute-force count of
//    kernels::visible over every (q, k) (the O(N^2) loop attention_work used to run) for every
//    mask kind and combination: full, causal, window, document ids (runs, and ids that come back
//    after other documents), block masks (odd block sizes, random patterns), on odd lengths.
// 2. PairTable equals classify(chunk_info(q), chunk_info(k)) over every chunk pair (the dense
//    table it used to hold), and needs() its "some pair not empty", for every layout and mask on
//    odd lengths and odd world sizes; chunk_info equals a walk over the chunk's positions.
// 2b. row_near and column_near (searches from a hint, the planner's schedules use them) equal
//    row() from any hint.
// 3. Past 2^31 tokens: a block mask of 2049 blocks at N = 2^31 + 12345 is counted exactly (per
//    block in the test, independently) in milliseconds, where the per-pair loop would take
//    2^61 steps; its block-striped pair table holds only the visible blocks' pairs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "longseq/attention/harness.hpp"
#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/kernels/mask.hpp"

namespace {

namespace at = longseq::attention;

// The old attention_work loop: every (q, k) through the kernels' predicate.
uint64_t brute_count(const at::MaskSpec& m, int64_t n) {
  const longseq::kernels::Mask km = m.kernel_mask();
  uint64_t pairs = 0;
  for (int64_t q = 0; q < n; ++q)
    for (int64_t k = 0; k < n; ++k) {
      const int32_t qd = m.doc_ids.empty() ? 0 : m.doc_ids[q];
      const int32_t kd = m.doc_ids.empty() ? 0 : m.doc_ids[k];
      pairs += longseq::kernels::visible(km, q, k, qd, kd) ? 1 : 0;
    }
  return pairs;
}

// The old chunk_info: a walk over every position.
at::ChunkInfo walked_info(const at::Chunk& c, int64_t n, const at::MaskSpec& m) {
  at::ChunkInfo info;
  for (int64_t i = 0; i < c.len; ++i) {
    const int64_t p = c.pos_begin + i * c.pos_stride;
    if (p >= n) {
      info.has_padding = true;
      continue;
    }
    const int32_t d = m.doc_ids.empty() ? 0 : m.doc_ids[p];
    if (!info.any_valid) {
      info.pmin = info.pmax = p;
      info.dmin = info.dmax = d;
      info.any_valid = true;
    }
    info.pmin = std::min(info.pmin, p);
    info.pmax = std::max(info.pmax, p);
    info.dmin = std::min(info.dmin, d);
    info.dmax = std::max(info.dmax, d);
  }
  return info;
}

struct Rng {
  uint64_t s;
  uint64_t next() { return s = longseq::core::derive_seed(s, 7); }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
};

// Document ids in runs of random length; `repeat`: ids drawn from a few values, so a document
// comes back after others (the predicate compares ids, not runs).
std::vector<int32_t> doc_ids(int64_t n, bool repeat, Rng& rng) {
  std::vector<int32_t> d(static_cast<size_t>(n));
  int32_t id = 0;
  for (int64_t i = 0; i < n;) {
    const int64_t len = 1 + rng.below(9);
    const int32_t v = repeat ? static_cast<int32_t>(rng.below(3)) : id++;
    for (int64_t j = 0; j < len && i < n; ++j) d[i++] = v;
  }
  return d;
}

void set_blocks(at::MaskSpec& m, int64_t n, int64_t block, Rng& rng) {
  m.block_size = block;
  m.num_blocks = (n + block - 1) / block;
  m.block_mask.resize(static_cast<size_t>(m.num_blocks * m.num_blocks));
  for (auto& b : m.block_mask) b = rng.below(3) != 0 ? 1 : 0;
}

// Every combination of causal, window, documents (runs / repeated ids) and a block mask.
std::vector<at::MaskSpec> masks(int64_t n, int64_t block, Rng& rng) {
  std::vector<at::MaskSpec> out;
  for (int causal = 0; causal < 2; ++causal)
    for (int64_t window : {int64_t{0}, int64_t{1}, int64_t{5}, n + 3})
      for (int docs = 0; docs < 3; ++docs)
        for (int blocks = 0; blocks < 2; ++blocks) {
          at::MaskSpec m;
          m.causal = causal != 0;
          m.window = window;
          if (docs > 0) m.doc_ids = doc_ids(n, docs == 2, rng);
          if (blocks > 0) set_blocks(m, n, block, rng);
          out.push_back(std::move(m));
        }
  return out;
}

TEST(MaskWork, CountEqualsThePerPairLoop) {
  Rng rng{31};
  for (int64_t n : {1, 2, 7, 33, 61, 100})
    for (int64_t block : {1, 3, 8})
      for (const at::MaskSpec& m : masks(n, block, rng)) {
        const uint64_t want = brute_count(m, n);
        EXPECT_EQ(at::count_visible(m, n), want) << m.describe() << " n " << n << " b " << block;
        EXPECT_EQ(at::attention_work(m, n, 3, 5).visible_pairs, want) << m.describe();
      }
}

TEST(MaskWork, PairTableEqualsEveryPairClassified) {
  Rng rng{32};
  for (int64_t n : {23, 61})
    for (int world : {1, 3, 4})
      for (const char* balance : {"contiguous", "zigzag", "striped", "block-striped"}) {
        const int64_t block = world * (balance[0] == 'b' ? 2 : 1) + (world == 1 ? 4 : 0);
        for (const at::MaskSpec& m : masks(n, block, rng)) {
          const at::Balance b = at::parse_balance(balance);
          if (b == at::Balance::block_striped && m.block_mask.empty()) continue;
          const at::Layout layout(b, n, world, m.block_size);
          const at::PairTable table(layout, m);
          const int chunks = table.chunks_per_rank();
          size_t nonempty = 0;
          for (int qr = 0; qr < world; ++qr)
            for (int kr = 0; kr < world; ++kr) {
              bool any = false;
              for (int qc = 0; qc < chunks; ++qc) {
                std::vector<at::PairTable::Entry> row;
                for (int kc = 0; kc < chunks; ++kc) {
                  const at::Chunk& q = layout.chunks(qr)[qc];
                  const at::Chunk& k = layout.chunks(kr)[kc];
                  const at::ChunkInfo qi = walked_info(q, n, m), ki = walked_info(k, n, m);
                  const at::ChunkInfo ci = at::chunk_info(q, n, m);
                  ASSERT_EQ(ci.any_valid, qi.any_valid);
                  ASSERT_EQ(ci.has_padding, qi.has_padding);
                  if (qi.any_valid) {
                    ASSERT_EQ(ci.pmin, qi.pmin);
                    ASSERT_EQ(ci.pmax, qi.pmax);
                    ASSERT_EQ(ci.dmin, qi.dmin);
                    ASSERT_EQ(ci.dmax, qi.dmax);
                  }
                  const at::PairKind want = at::classify(m, qi, ki);
                  ASSERT_EQ(table.kind(qr, qc, kr, kc), want)
                      << balance << " P " << world << " n " << n << " " << m.describe() << " q "
                      << qr << "/" << qc << " k " << kr << "/" << kc;
                  if (want != at::PairKind::empty) row.push_back({kr, kc, want});
                }
                const auto got = table.row(qr, qc, kr);
                ASSERT_EQ(got.size(), row.size());
                for (size_t i = 0; i < row.size(); ++i) {
                  EXPECT_EQ(got[i].kc, row[i].kc);
                  EXPECT_EQ(got[i].kind, row[i].kind);
                }
                nonempty += row.size();
                any = any || !row.empty();
              }
              EXPECT_EQ(table.needs(qr, kr), any) << balance << " " << m.describe();
            }
          EXPECT_EQ(table.size(), nonempty) << balance << " " << m.describe();
        }
      }
}

// A banded block mask far past 2^31 tokens: block b sees blocks b-2..b and block 0.

// row_near and column_near give row()'s pairs in row()'s order from any hint (stale, past the end,
// the previous answer), walking the key ranks up and down and the query ranks up and down.
TEST(MaskWork, RowNearAndColumnNearEqualRowFromAnyHint) {
  Rng rng{33};
  for (int64_t n : {23, 61, 200})
    for (int world : {1, 3, 4, 7})
      for (const char* balance : {"contiguous", "zigzag", "striped"}) {
        for (const at::MaskSpec& m : masks(n, world, rng)) {
          if (!m.block_mask.empty()) continue;
          const at::Layout layout(at::parse_balance(balance), n, world, m.block_size);
          const at::PairTable table(layout, m);
          const int chunks = table.chunks_per_rank();
          std::vector<int> order(world);
          for (int r = 0; r < world; ++r) order[r] = r;
          for (int pass = 0; pass < 3; ++pass) {
            if (pass == 1) std::reverse(order.begin(), order.end());
            if (pass == 2)
              for (int r = world - 1; r > 0; --r) std::swap(order[r], order[rng.next() % (r + 1)]);
            for (int qc = 0; qc < chunks; ++qc)
              for (int fixed = 0; fixed < world; ++fixed) {
                size_t row_hint = pass == 2 ? rng.next() % 1000 : 0;
                size_t col_hint = pass == 1 ? ~size_t{0} : 0;
                for (int moving : order) {
                  const auto want = table.row(fixed, qc, moving);  // key rank moves
                  const auto got = table.row_near(fixed, qc, moving, row_hint);
                  ASSERT_EQ(got.size(), want.size()) << balance << " " << m.describe();
                  for (size_t i = 0; i < want.size(); ++i) {
                    EXPECT_EQ(got[i].k_rank, want[i].k_rank);
                    EXPECT_EQ(got[i].kc, want[i].kc);
                    EXPECT_EQ(got[i].kind, want[i].kind);
                  }
                  const auto want_col = table.row(moving, qc, fixed);  // query rank moves
                  const auto got_col = table.column_near(fixed, moving, qc, col_hint);
                  ASSERT_EQ(got_col.size(), want_col.size()) << balance << " " << m.describe();
                  for (size_t i = 0; i < want_col.size(); ++i) {
                    EXPECT_EQ(got_col[i].q_rank, moving);
                    EXPECT_EQ(got_col[i].qc, qc);
                    EXPECT_EQ(got_col[i].kc, want_col[i].kc);
                    EXPECT_EQ(got_col[i].kind, want_col[i].kind);
                  }
                }
              }
          }
        }
      }
}

TEST(MaskWork, BlockMaskPastTwoToThe31CountsPerVisibleBlock) {
  constexpr int64_t kBlock = int64_t{1} << 20;
  constexpr int64_t n = (int64_t{1} << 31) + 12345;
  at::MaskSpec m;
  m.causal = true;
  m.block_size = kBlock;
  m.num_blocks = (n + kBlock - 1) / kBlock;
  const int64_t nb = m.num_blocks;
  ASSERT_EQ(nb, 2049);
  m.block_mask.assign(static_cast<size_t>(nb * nb), 0);
  for (int64_t qb = 0; qb < nb; ++qb) {
    m.block_mask[qb * nb] = 1;
    for (int64_t kb = std::max<int64_t>(0, qb - 2); kb <= qb; ++kb) m.block_mask[qb * nb + kb] = 1;
  }
  // Causal: a block below the diagonal is every pair, the diagonal block its lower triangle.
  auto len = [&](int64_t b) { return std::min(n, (b + 1) * kBlock) - b * kBlock; };
  uint64_t want = 0;
  for (int64_t qb = 0; qb < nb; ++qb)
    for (int64_t kb = 0; kb <= qb; ++kb) {
      if (!m.block_mask[qb * nb + kb]) continue;
      const uint64_t lq = static_cast<uint64_t>(len(qb)), lk = static_cast<uint64_t>(len(kb));
      want += kb < qb ? lq * lk : lq * (lq + 1) / 2;
    }
  EXPECT_GT(want, uint64_t{1} << 43);
  EXPECT_EQ(at::count_visible(m, n), want);
  const at::AttentionWork work = at::attention_work(m, n, 4, 32);
  EXPECT_EQ(work.visible_pairs, want);
  EXPECT_DOUBLE_EQ(work.forward_flops, 4.0 * 4 * 32 * static_cast<double>(want));

  // A window shorter than a block reaches into block qb - 1 only, visible here: every row sees
  // what a plain window shows it.
  at::MaskSpec wm = m;
  wm.window = kBlock / 2 + 7;
  const uint64_t w = static_cast<uint64_t>(wm.window);
  EXPECT_EQ(at::count_visible(wm, n), w * static_cast<uint64_t>(n) - w * (w - 1) / 2);

  // Block-striped over 4 ranks: every chunk pair of a visible block (in the causal band) is
  // held, no other.
  const at::Layout layout(at::Balance::block_striped, n, 4, kBlock);
  const at::PairTable table(layout, m);
  // Run r of block b holds valid tokens unless it starts past n (the last block's ranks 1-3).
  const int64_t run = kBlock / 4;
  auto valid = [&](int r, int64_t b) { return b * kBlock + r * run < n; };
  size_t want_pairs = 0;
  for (int64_t qb = 0; qb < nb; ++qb)
    for (int64_t kb = 0; kb <= qb; ++kb) {
      if (!m.block_mask[qb * nb + kb]) continue;
      for (int qr = 0; qr < 4; ++qr)
        for (int kr = 0; kr < 4; ++kr)
          want_pairs += valid(qr, qb) && valid(kr, kb) && (kb < qb || kr <= qr) ? 1 : 0;
    }
  EXPECT_EQ(table.size(), want_pairs);
  EXPECT_EQ(table.kind(2, 100, 1, 99), at::PairKind::full);
  EXPECT_EQ(table.kind(2, 100, 1, 97), at::PairKind::empty);
  EXPECT_EQ(table.kind(2, 100, 3, 100), at::PairKind::empty);
  EXPECT_EQ(table.kind(2, 100, 2, 100), at::PairKind::partial);
}

}  // namespace
