// Distributed attention equals kernels/ref (the fp64 spec) for every algorithm x layout x mask x
// world, forward and backward, on seeded global inputs; and moves exactly the bytes of the
// formulas in docs/attention.md.
#include "longseq/attention/distributed.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "attention_case.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"

using namespace longseq;
using namespace longseq::attention;
using longseq::testing::AttnCase;

namespace {

struct Param {
  const char* algo;
  Balance balance;
  const char* mask;
  int world, nodes;
};

std::string name_of(const Param& p) {
  std::string s = std::string(p.algo) + "_" + std::string(balance_name(p.balance)) + "_" + p.mask +
                  "_w" + std::to_string(p.world) + "n" + std::to_string(p.nodes);
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

std::vector<Param> all_params() {
  std::vector<Param> out;
  for (const char* algo : {"ring", "burst", "double-ring", "double-ring:ring"})
    for (Balance b :
         {Balance::contiguous, Balance::zigzag, Balance::striped, Balance::block_striped})
      for (const char* mask : {"full", "causal", "window", "document", "blocks", "blocks+causal"})
        for (int world : {1, 2, 3, 4, 8})
          for (int nodes : {1, 2}) {
            const bool block_mask = std::string(mask).rfind("blocks", 0) == 0;
            if ((b == Balance::block_striped) && !block_mask) continue;
            if (world % nodes) continue;
            const bool dr = std::string(algo).rfind("double-ring", 0) == 0;
            if (dr && !(nodes > 1 && nodes < world)) continue;
            out.push_back({algo, b, mask, world, nodes});
          }
  return out;
}

class DistributedAttention : public ::testing::TestWithParam<Param> {};

TEST_P(DistributedAttention, EqualsReference) {
  const Param& p = GetParam();
  // Odd lengths (not multiples of 2P), GQA g = 2, D not a power of two.
  AttnCase c(/*n=*/p.world * 13 + 5, /*hq=*/4, /*hkv=*/2, /*d=*/12, p.mask, p.world,
             /*seed=*/p.world * 7 + 1);
  c.run_reference();
  AttentionSpec spec;
  spec.algo = Algorithm::parse(p.algo);
  spec.mask = c.mask;
  const Layout layout(p.balance, c.n, p.world, c.mask->block_size);
  c.run_distributed(spec, layout, p.nodes);
  c.expect_close("o", c.o, c.ref_o, 2e-5, 1e-4);
  c.expect_close("lse", c.lse, c.ref_lse, 2e-5, 1e-4);
  c.expect_close("dq", c.dq, c.ref_dq, 5e-5, 5e-4);
  c.expect_close("dk", c.dk, c.ref_dk, 5e-5, 5e-4);
  c.expect_close("dv", c.dv, c.ref_dv, 5e-5, 5e-4);
}

INSTANTIATE_TEST_SUITE_P(Matrix, DistributedAttention, ::testing::ValuesIn(all_params()),
                         [](const auto& info) { return name_of(info.param); });

TEST(DistributedAttentionBytes, MatchFormulas) {
  // Full mask (nothing pruned): per rank and pass, in elements of 4 bytes,
  //   forward             (P-1) * 2*L*Hkv*D
  //   ring backward       (P-1) * 4*L*Hkv*D           = 4*N*Hkv*D * (P-1)/P
  //   burst backward      (P-1) * (3*L*Hq*D + 2*L*Hq) = (3*N*Hq*D + 2*N*Hq) * (P-1)/P
  // and for the double ring the same totals, of which (M-1)/(P-1) cross nodes.
  for (const char* algo : {"ring", "burst", "double-ring", "double-ring:ring"})
    for (int world : {2, 4, 8}) {
      const int nodes = std::string(algo).rfind("double", 0) == 0 ? 2 : 1;
      if (nodes == 2 && world == 2) continue;
      AttnCase c(world * 16, 8, 2, 8, "full", world, 3);
      AttentionSpec spec;
      spec.algo = Algorithm::parse(algo);
      spec.mask = c.mask;
      const Layout layout(Balance::zigzag, c.n, world, 0);
      c.run_distributed(spec, layout, nodes);
      const int64_t l = layout.local_len(), hq = 8, hkv = 2, d = 8, p = world;
      const int64_t fwd = (p - 1) * 2 * l * hkv * d * 4;
      const int64_t bwd = spec.algo.backward == Backward::kv
                              ? (p - 1) * 4 * l * hkv * d * 4
                              : (p - 1) * (3 * l * hq * d + 2 * l * hq) * 4;
      for (int r = 0; r < world; ++r) {
        SCOPED_TRACE(std::string(algo) + " world " + std::to_string(world) + " rank " +
                     std::to_string(r));
        const auto& f = c.fwd_bytes[r];
        const auto& b = c.bwd_bytes[r];
        EXPECT_EQ(f.intra + f.inter, fwd);
        EXPECT_EQ(b.intra + b.inter, bwd);
        if (nodes == 2) {
          EXPECT_EQ(f.inter, fwd / (p - 1));  // M - 1 = 1 of the P - 1 sends leaves the node
          EXPECT_EQ(b.inter, bwd / (p - 1));
        } else {
          EXPECT_EQ(f.inter + b.inter, 0);
        }
      }
    }
}

TEST(DistributedAttentionBytes, BurstVersusRingByGqa) {
  // MHA: burst's backward moves (3D+2)/(4D) of ring's; GQA g = 4: ring moves less.
  auto bwd_bytes = [](const char* algo, int64_t hq, int64_t hkv) {
    AttnCase c(64, hq, hkv, 16, "causal", 4, 5);
    AttentionSpec spec;
    spec.algo = Algorithm::parse(algo);
    spec.mask = c.mask;
    c.run_distributed(spec, Layout(Balance::zigzag, c.n, 4, 0), 1);
    return c.bwd_bytes[0].intra;
  };
  EXPECT_LT(bwd_bytes("burst", 4, 4), bwd_bytes("ring", 4, 4));
  EXPECT_GT(bwd_bytes("burst", 8, 2), bwd_bytes("ring", 8, 2));
  EXPECT_EQ(bwd_bytes("burst", 4, 4) * 4 * 16, bwd_bytes("ring", 4, 4) * (3 * 16 + 2));
}

TEST(DistributedAttention, RefusesImpossibleCombinations) {
  AttnCase c(40, 4, 3, 8, "full", 2, 1);
  AttentionSpec spec;
  spec.algo = Algorithm::parse("burst");
  spec.mask = c.mask;
  // 4 query heads are not a multiple of 3 kv heads.
  EXPECT_THROW(validate(spec, Layout(Balance::zigzag, 40, 2),
                        longseq::comm::Topology::declared(2, 1), 4, 3, 8),
               core::Error);
  spec.algo = Algorithm::parse("double-ring");
  EXPECT_THROW(validate(spec, Layout(Balance::zigzag, 40, 4),
                        longseq::comm::Topology::declared(4, 1), 4, 2, 8),
               core::Error);
  EXPECT_THROW(validate(spec, Layout(Balance::zigzag, 40, 2),
                        longseq::comm::Topology::declared(4, 2), 4, 2, 8),
               core::Error);
}

// AttentionSpec::query_rows: the forward of each rank's local rows [0, R) only (sequence-level
// selective checkpointing's recomputation). Rows before R equal the fp64 reference; the ring
// family leaves rows from R on at o = 0, lse = -inf and computes no more chunk pairs than the
// full forward (causal: the skipped rows are each rank's latest, the expensive ones).
TEST(DistributedAttention, QueryRowsComputesOnlyTheEarliestLocalRows) {
  for (const char* algo : {"ring", "burst"})
    for (Balance bal : {Balance::contiguous, Balance::zigzag, Balance::striped})
      for (int world : {2, 3})
        for (const char* mk : {"causal", "document"}) {
          AttnCase c(16 * world + 3, 4, 2, 8, mk, world, 41);
          c.run_reference();
          const Layout layout(bal, c.n, world);
          AttentionSpec spec;
          spec.algo = Algorithm::parse(algo);
          spec.mask = c.mask;
          c.run_distributed(spec, layout, 1, false);
          int full_pairs = 0;
          for (const auto& st : c.fwd_stats) full_pairs += st.pairs;
          const int64_t rows = (3 * layout.local_len() + 9) / 10;
          spec.query_rows = rows;
          c.run_distributed(spec, layout, 1, false);
          int pairs = 0;
          for (const auto& st : c.fwd_stats) pairs += st.pairs;
          const std::string what = std::string(algo) + " " + std::string(balance_name(bal)) +
                                   " world " + std::to_string(world) + " " + mk;
          // Chunk pairs whose query rows all lie past R are skipped (zigzag: the second chunk);
          // under one-chunk layouts the pairs stay and only their rows shrink.
          if (bal == Balance::zigzag) {
            EXPECT_LT(pairs, full_pairs) << what;
          }
          EXPECT_LE(pairs, full_pairs) << what;
          for (int r = 0; r < world; ++r) {
            const std::vector<int64_t> pos = layout.positions(r);
            for (int64_t i = 0; i < layout.local_len(); ++i) {
              if (pos[i] < 0) continue;
              for (int64_t h = 0; h < c.hq; ++h) {
                const float lse = c.lse[pos[i] * c.hq + h];
                const double ref = c.ref_lse[pos[i] * c.hq + h];
                if (i < rows) {
                  ASSERT_TRUE(std::isinf(ref) ? lse == ref : std::fabs(lse - ref) < 1e-5)
                      << what << " rank " << r << " row " << i << ": lse " << lse << " vs " << ref;
                  for (int64_t e = 0; e < c.d; ++e) {
                    const size_t j = static_cast<size_t>((pos[i] * c.hq + h) * c.d + e);
                    ASSERT_NEAR(c.o[j], c.ref_o[j], 1e-5) << what << " rank " << r << " row " << i;
                  }
                } else {
                  ASSERT_EQ(lse, -std::numeric_limits<float>::infinity()) << what << " row " << i;
                  for (int64_t e = 0; e < c.d; ++e)
                    ASSERT_EQ(c.o[static_cast<size_t>((pos[i] * c.hq + h) * c.d + e)], 0.0f)
                        << what;
                }
              }
            }
          }
        }
}

}  // namespace
