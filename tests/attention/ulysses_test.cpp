// Ulysses and USP: head splits (pure), then forward and backward on local ranks against the fp64
// reference for every layout x mask, with exact per-rank byte counts.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "attention/attention_case.hpp"
#include "longseq/attention/schedule.hpp"
#include "longseq/core/error.hpp"

using namespace longseq::attention;
using longseq::testing::AttnCase;

namespace {

const std::vector<std::string> kBalances = {"contiguous", "zigzag", "striped", "block-striped"};
const std::vector<std::string> kMasks = {"full",     "causal", "window",
                                         "document", "blocks", "blocks+causal"};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const longseq::core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(HeadSplit, SplitsKvHeadsWhenDivisible) {
  const HeadSplit hs(8, 4, 4);  // g = 2
  EXPECT_FALSE(hs.replicated);
  EXPECT_EQ(hs.hq_per, 2);
  EXPECT_EQ(hs.kv_per, 1);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(hs.kv_begin(i), i);
    // Query heads of member i map to exactly its kv heads under the GQA map h -> h / g.
    for (int64_t h = hs.q_begin(i); h < hs.q_begin(i) + hs.hq_per; ++h)
      EXPECT_EQ(h / 2, hs.kv_begin(i));
  }
}

TEST(HeadSplit, ReplicatesKvHeadsOnlyAsFarAsNeeded) {
  // Hq 8, Hkv 2 (g 4) over 4 ranks: 2 query heads each; kv head 0 on ranks 0-1, kv head 1 on 2-3.
  const HeadSplit hs(8, 2, 4);
  EXPECT_TRUE(hs.replicated);
  EXPECT_EQ(hs.kv_per, 1);
  const std::vector<int64_t> want = {0, 0, 1, 1};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(hs.kv_begin(i), want[i]);
  const HeadSplit mqa(8, 1, 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(mqa.kv_begin(i), 0);
}

TEST(HeadSplit, RefusesWithTheNumbers) {
  const std::string a = error_of([] { HeadSplit(4, 4, 8); });
  EXPECT_NE(a.find("query heads 4"), std::string::npos) << a;
  EXPECT_NE(a.find("8"), std::string::npos) << a;
  const std::string b =
      error_of([] { HeadSplit(12, 4, 6); });  // 4 neither divisible by 6 nor divides 6
  EXPECT_NE(b.find("kv heads 4"), std::string::npos) << b;
  const std::string c = error_of([] { Algorithm::parse("usp:3").validate(8, 12, 12); });
  EXPECT_NE(c.find("usp:3 needs U to divide world 8"), std::string::npos) << c;
}

struct UspRun {
  std::string algo;
  int world;
  int64_t hq, hkv;
};

// The volume formulas (elements per rank and pass, docs/attention-ulysses.md): the all-to-alls
// inside the Ulysses group (q, k, v in, o and lse out; backward q, dO, D, LSE, k, v in, dq, dk,
// dv out) and the ring across the R = P/U groups.
PassBytes usp_formula(const Algorithm& a, Pass pass, int world, int64_t l, int64_t hq, int64_t hkv,
                      int64_t d) {
  const int u = a.family == Algorithm::Family::ulysses ? world : a.degree;
  const HeadSplit hs(hq, hkv, u);
  const int64_t hops = world / u - 1, tg = u * l, qh = hs.hq_per, kh = hs.kv_per;
  if (pass == Pass::forward)
    return {4 * (u - 1) * l * ((qh + 2 * kh) * d + qh * (d + 1)), 4 * hops * 2 * tg * kh * d};
  const int64_t a2a = (u - 1) * l * ((2 * qh * d + 2 * qh + 2 * kh * d) + (qh + 2 * kh) * d);
  const int64_t ring = a.backward == Backward::q ? hops * (tg * qh * (2 * d + 2) + tg * qh * d)
                                                 : hops * 4 * tg * kh * d;
  return {4 * a2a, 4 * ring};
}

// Counters equal the schedule's bytes; without a mask nothing is pruned and the schedule's bytes
// equal the formulas (with one, pruning only ever removes ring transfers).
void check_bytes(const AttnCase& c, const Algorithm& a, const Layout& layout) {
  longseq::testing::expect_schedule_bytes(c, a, layout, 1);
  for (Pass pass : {Pass::forward, Pass::backward}) {
    const PassBytes f = usp_formula(a, pass, c.world, layout.local_len(), c.hq, c.hkv, c.d);
    for (const PassBytes& s : longseq::testing::schedule_bytes_of(c, a, layout, 1, pass)) {
      EXPECT_EQ(s.collective, f.collective);
      if (c.mask->describe() == "full") {
        EXPECT_EQ(s.p2p, f.p2p);
      }
      EXPECT_LE(s.p2p, f.p2p);
    }
  }
}

// Every layout x mask for ulysses (GQA split and replicated, MQA) and usp (burst and ring).
TEST(Ulysses, MatchesReferenceEveryLayoutAndMask) {
  const std::vector<UspRun> runs = {
      {"ulysses", 2, 4, 2},    // kv heads split
      {"ulysses", 4, 4, 2},    // kv heads replicated 2x
      {"ulysses", 4, 8, 1},    // MQA
      {"ulysses", 8, 8, 8},    // MHA, 8 ranks
      {"ulysses", 2, 8, 4},    // 2 kv heads per member: 2 head groups
      {"ulysses", 2, 12, 6},   // 3 head groups
      {"ulysses", 4, 16, 16},  // 4 head groups
      {"usp:2", 4, 4, 2},     {"usp:2:ring", 4, 4, 2}, {"usp:2", 8, 4, 4}, {"usp:4:ring", 8, 8, 2},
  };
  uint64_t seed = 11;
  for (const UspRun& run : runs)
    for (const std::string& mask : kMasks) {
      AttnCase c(37, run.hq, run.hkv, 16, mask, run.world, ++seed);
      c.run_reference();
      const Algorithm a = Algorithm::parse(run.algo);
      for (const std::string& bal : kBalances) {
        SCOPED_TRACE(run.algo + " P " + std::to_string(run.world) + " Hq " +
                     std::to_string(run.hq) + " Hkv " + std::to_string(run.hkv) + " " + bal + " " +
                     mask);
        const Layout layout = longseq::testing::make_layout(bal, c);
        c.run(a, layout, 1);
        longseq::testing::expect_matches_reference(c);
        check_bytes(c, a, layout);
        if (HasFailure()) return;
      }
    }
}

// Head groups (schedule.hpp): the all-to-alls cut by head group and run beside the compute (USP:
// beside the ring of the previous group) give the bits of the blocking all-to-alls, and the same
// bytes on every rank, in f32 and bf16 under every mask, whatever the number of groups, for
// Ulysses and for USP with either backward (the kernels' dq chunking follows the side's kv heads,
// not the group's: with it sized per group, dq would round differently).
TEST(Ulysses, HeadGroupsAreBitIdenticalToBlockingAllToAlls) {
  struct Run {
    int world;
    int64_t hq, hkv;
    int groups;
    int64_t n = 45;
    const char* balance = "zigzag";
    const char* algo = "ulysses";
  };
  // The contiguous 1100-token runs give chunks of 550 keys: more than one backward key tile
  // (cpu::kBackwardTileK), so dq is summed over several chunks and the chunking shows in its bits.
  const std::vector<Run> runs = {
      {2, 8, 4, 2},
      {2, 12, 6, 3},
      {4, 16, 16, 4},
      {2, 16, 8, 4},
      {4, 16, 8, 2},
      {4, 16, 4, 1},
      {2, 8, 4, 2, 1100, "contiguous"},
      {2, 16, 8, 4, 1100, "contiguous"},
      // USP: a ring of 2 or 3 Ulysses groups, burst and ring backward, odd N.
      {4, 8, 4, 2, 45, "zigzag", "usp:2"},
      {4, 16, 8, 4, 45, "zigzag", "usp:2:ring"},
      {6, 12, 6, 3, 53, "zigzag", "usp:2"},
      {6, 12, 6, 3, 53, "striped", "usp:2:ring"},
      {8, 16, 8, 2, 61, "contiguous", "usp:4"},
      {6, 12, 6, 2, 47, "zigzag", "usp:3:ring"},
  };
  uint64_t seed = 101;
  for (const Run& run : runs)
    for (const std::string& mask : kMasks)
      for (const longseq::core::DType precision :
           {longseq::core::DType::f32, longseq::core::DType::bf16}) {
        SCOPED_TRACE(std::string(run.algo) + " " + run.balance + " N " + std::to_string(run.n) +
                     " P " + std::to_string(run.world) + " Hq " + std::to_string(run.hq) + " Hkv " +
                     std::to_string(run.hkv) + " " + mask + " " +
                     std::string(longseq::core::dtype_name(precision)));
        AttnCase c(run.n, run.hq, run.hkv, 16, mask, run.world, ++seed);
        const Layout layout = longseq::testing::make_layout(run.balance, c);
        const RankSchedule rs =
            make_schedule(0, longseq::comm::Topology(c.world), layout, PairTable(layout, *c.mask),
                          Algorithm::parse(run.algo), Pass::backward, {run.hq, run.hkv});
        ASSERT_EQ(rs.head_groups, run.groups);
        AttentionSpec spec;
        spec.algo = Algorithm::parse(run.algo);
        spec.mask = c.mask;
        spec.precision = precision;
        spec.head_groups = false;
        c.run_distributed(spec, layout, 1);
        const std::vector<std::vector<float>> blocking = {c.o, c.lse, c.dq, c.dk, c.dv};
        const auto fwd_bytes = c.fwd_bytes, bwd_bytes = c.bwd_bytes;
        spec.head_groups = true;
        c.run_distributed(spec, layout, 1);
        const std::vector<std::vector<float>> grouped = {c.o, c.lse, c.dq, c.dk, c.dv};
        const char* names[] = {"o", "lse", "dq", "dk", "dv"};
        for (size_t i = 0; i < grouped.size(); ++i) {
          ASSERT_EQ(grouped[i].size(), blocking[i].size());
          EXPECT_EQ(
              std::memcmp(grouped[i].data(), blocking[i].data(), grouped[i].size() * sizeof(float)),
              0)
              << names[i] << " differs from the blocking all-to-alls";
        }
        for (int r = 0; r < c.world; ++r) {
          EXPECT_EQ(c.fwd_bytes[r].intra, fwd_bytes[r].intra);
          EXPECT_EQ(c.fwd_bytes[r].inter, fwd_bytes[r].inter);
          EXPECT_EQ(c.bwd_bytes[r].intra, bwd_bytes[r].intra);
          EXPECT_EQ(c.bwd_bytes[r].inter, bwd_bytes[r].inter);
        }
        if (HasFailure()) return;
      }
}

// Ulysses on 8 ranks in 2 nodes: the all-to-all crosses nodes for half of its peers; usp:4 keeps
// the all-to-all inside a node and only the ring crosses.
TEST(Usp, AllToAllStaysInsideNodes) {
  AttnCase c(64, 8, 4, 16, "causal", 8, 5);
  c.run_reference();
  const Layout layout(Balance::zigzag, c.n, c.world);
  const Algorithm a = Algorithm::parse("usp:4");
  c.run(a, layout, 2);
  longseq::testing::expect_matches_reference(c);
  const PassBytes f = usp_formula(a, Pass::forward, 8, layout.local_len(), 8, 4, 16);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(c.fwd_bytes[r].intra, f.collective);
    EXPECT_EQ(c.fwd_bytes[r].inter, f.p2p);
  }
}

}  // namespace
