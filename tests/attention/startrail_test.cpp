// StarTrail / WallFacer: the communication configuration generator (pure, exhaustive up to
// P = 64, both placements, the papers' 8-GPU C = 2 example), then forward and backward on local
// ranks against the fp64 reference for every layout x mask, with exact per-rank byte counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "attention/attention_case.hpp"
#include "longseq/attention/schedule.hpp"
#include "longseq/core/error.hpp"

using namespace longseq::attention;

namespace {

// The papers' example (WallFacer Figure 5 / Algorithms 2-3): 8 GPUs, C = 2, teams on consecutive
// ranks: teams {0,1} {2,3} {4,5} {6,7}; team groups {team 0, team 1} and {team 2, team 3}; 4
// sub-rings of 2 ranks. Worked by hand from Algorithm 2: rank 1 (team 0, member 1) sends team
// 0's K,V to team group 1, team 2 + 0/2 = 2, member 0 % 2 = 0: rank 4.
TEST(StarTrailConfig, PaperExampleEightRanksC2) {
  const StarTrailConfig cfg(8, 2, TeamPlacement::teams);
  EXPECT_EQ(cfg.teams(), 4);
  EXPECT_EQ(cfg.ring_len(), 2);
  const std::vector<int> send = {0, 4, 1, 5, 2, 6, 3, 7};
  const std::vector<int> recv = {0, 2, 4, 6, 1, 3, 5, 7};
  const std::vector<int> shard = {0, 1, 2, 3, 0, 1, 2, 3};
  const std::vector<int> next = {2, 3, 0, 1, 6, 7, 4, 5};
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(cfg.init_send_target(r), send[r]) << "rank " << r;
    EXPECT_EQ(cfg.init_recv_source(r), recv[r]) << "rank " << r;
    EXPECT_EQ(cfg.initial_shard(r), shard[r]) << "rank " << r;
    EXPECT_EQ(cfg.ring_next(r), next[r]) << "rank " << r;
    EXPECT_EQ(cfg.ring_prev(r), next[r]) << "rank " << r;  // rings of 2
  }
  EXPECT_EQ(cfg.team_ranks(2), (std::vector<int>{4, 5}));
  EXPECT_EQ(cfg.ring_ranks(5), (std::vector<int>{5, 7}));
  // Sub-ring {0, 2} (group 0, member 0) holds shards {0, 2}, sub-ring {1, 3} holds {1, 3}: team
  // group 0 sees all four team shards once; team group 1 = ranks 4..7 likewise.
  EXPECT_EQ(cfg.shard_at_step(0, 1), 2);
  EXPECT_EQ(cfg.shard_at_step(2, 1), 0);

  // Same example with sub-rings on consecutive ranks: rings {0,1} {2,3} {4,5} {6,7}.
  const StarTrailConfig rc(8, 2, TeamPlacement::rings);
  EXPECT_EQ(rc.ring_ranks(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(rc.team_ranks(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(rc.team_ranks(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(rc.team_ranks(2), (std::vector<int>{4, 6}));
}

TEST(StarTrailConfig, COneIsTheFlatRing) {
  for (int p = 1; p <= 16; ++p)
    for (TeamPlacement pl : {TeamPlacement::teams, TeamPlacement::rings}) {
      const StarTrailConfig cfg(p, 1, pl);
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(cfg.init_send_target(r), r);
        EXPECT_EQ(cfg.init_recv_source(r), r);
        EXPECT_EQ(cfg.initial_shard(r), r);
        EXPECT_EQ(cfg.ring_next(r), (r + 1) % p);
        EXPECT_EQ(cfg.ring_prev(r), (r + p - 1) % p);
        for (int s = 0; s < p; ++s) EXPECT_EQ(cfg.shard_at_step(r, s), (r - s + p) % p);
      }
    }
}

TEST(StarTrailConfig, RefusesBadC) {
  auto msg = [](int p, int c) {
    try {
      StarTrailConfig cfg(p, c);
    } catch (const longseq::core::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg(8, 3).find("startrail:3"), std::string::npos);
  EXPECT_NE(msg(8, 3).find("world 8"), std::string::npos);
  EXPECT_NE(msg(8, 4).find("C*C = 16 to divide world 8"),
            std::string::npos);     // C | P, C^2 does not
  EXPECT_TRUE(msg(12, 2).empty());  // 4 | 12
  EXPECT_FALSE(msg(8, 0).empty());
  EXPECT_TRUE(msg(16, 4).empty());
}

// Every (P <= 64, C with C^2 | P, placement): the generator's invariants.
TEST(StarTrailConfig, ExhaustiveUpTo64) {
  int configs = 0;
  for (int p = 1; p <= 64; ++p)
    for (int c = 1; c * c <= p; ++c) {
      if (p % (c * c) != 0) continue;
      for (TeamPlacement pl : {TeamPlacement::teams, TeamPlacement::rings}) {
        SCOPED_TRACE("P " + std::to_string(p) + " C " + std::to_string(c) + " " +
                     std::string(team_placement_name(pl)));
        ++configs;
        const StarTrailConfig cfg(p, c, pl);
        const int t_count = cfg.teams(), g_len = cfg.ring_len();
        ASSERT_EQ(t_count, g_len * c);
        // Coordinates are a bijection.
        std::set<int> seen;
        for (int r = 0; r < p; ++r) {
          const auto x = cfg.coord(r);
          ASSERT_EQ(cfg.rank_of(x), r);
          seen.insert(r);
          ASSERT_EQ(cfg.team_member_rank(cfg.team_of(r), cfg.member_of(r)), r);
        }
        // The initial transfer is a permutation; what a rank receives is its source's team shard.
        std::vector<int> in_deg(p, 0);
        for (int r = 0; r < p; ++r) {
          const int dst = cfg.init_send_target(r);
          ++in_deg[dst];
          ASSERT_EQ(cfg.init_recv_source(dst), r);
          ASSERT_EQ(cfg.initial_shard(dst), cfg.team_of(r));
        }
        for (int r = 0; r < p; ++r) ASSERT_EQ(in_deg[r], 1);
        // Sub-rings: next/prev are inverse, stay in the same group and member, and close after G.
        for (int r = 0; r < p; ++r) {
          ASSERT_EQ(cfg.ring_prev(cfg.ring_next(r)), r);
          const auto x = cfg.coord(r), y = cfg.coord(cfg.ring_next(r));
          ASSERT_EQ(x.group, y.group);
          ASSERT_EQ(x.member, y.member);
          int z = r;
          for (int i = 0; i < g_len; ++i) z = cfg.ring_next(z);
          ASSERT_EQ(z, r);
          // Circulation: what r holds at step s is what its successor holds at step s + 1.
          for (int s = 0; s + 1 < g_len; ++s)
            ASSERT_EQ(cfg.shard_at_step(cfg.ring_next(r), s + 1), cfg.shard_at_step(r, s));
        }
        // Every team group sees every shard exactly once (at every step), and no two teams of a
        // sub-ring hold the same shard at any step.
        for (int g = 0; g < c; ++g)
          for (int s = 0; s < g_len; ++s) {
            std::vector<int> count(t_count, 0);
            for (int a = 0; a < c; ++a) {
              std::set<int> ring_shards;
              for (int j = 0; j < g_len; ++j) {
                const int sh = cfg.shard_at_step(cfg.rank_of({g, j, a}), s);
                ++count[sh];
                ASSERT_TRUE(ring_shards.insert(sh).second)
                    << "two teams of a ring hold shard " << sh;
              }
            }
            for (int sh = 0; sh < t_count; ++sh)
              ASSERT_EQ(count[sh], 1) << "group " << g << " shard " << sh;
          }
        // Over the whole ring phase every team (its C members together) meets every shard once:
        // its queries see every key exactly once.
        for (int t = 0; t < t_count; ++t) {
          std::vector<int> count(t_count, 0);
          for (int r : cfg.team_ranks(t))
            for (int s = 0; s < g_len; ++s) ++count[cfg.shard_at_step(r, s)];
          for (int sh = 0; sh < t_count; ++sh)
            ASSERT_EQ(count[sh], 1) << "team " << t << " shard " << sh;
        }
        // Placement: teams on consecutive ranks, or sub-rings on consecutive ranks. With nodes of
        // that size, the collectives (resp. the ring P2P) never leave a node.
        const int block = pl == TeamPlacement::teams ? c : g_len;
        const longseq::comm::Topology topo = longseq::comm::Topology::declared(p, p / block);
        for (int r = 0; r < p; ++r) {
          if (pl == TeamPlacement::teams) {
            for (int m : cfg.team_ranks(cfg.team_of(r))) ASSERT_TRUE(topo.same_node(r, m));
          } else {
            ASSERT_TRUE(topo.same_node(r, cfg.ring_next(r)));
          }
        }
      }
    }
  EXPECT_GT(configs, 150);
}

using longseq::testing::AttnCase;

const std::vector<std::string> kBalances = {"contiguous", "zigzag", "striped", "block-striped"};
const std::vector<std::string> kMasks = {"full",     "causal", "window",
                                         "document", "blocks", "blocks+causal"};

// The volume formulas (elements per rank and pass, docs/attention-startrail.md): team
// all-gathers and reduce-scatters (collective), initial transfer and sub-ring steps (p2p).
PassBytes startrail_formula(const StarTrailConfig& cfg, Pass pass, int rank, int64_t l, int64_t hq,
                            int64_t hkv, int64_t d) {
  const int64_t c = cfg.c(), g = cfg.ring_len(), kv = 2 * c * l * hkv * d;
  const bool moves = cfg.init_send_target(rank) != rank;
  if (pass == Pass::forward)
    return {4 * ((c - 1) * l * (hq + 2 * hkv) * d + (c - 1) * l * hq * (d + 1)),
            4 * ((moves ? kv : 0) + (g - 1) * kv)};
  // Gathers: Q, dO, D, LSE, K, V. Reduce-scatters: dQ, dK, dV.
  return {
      4 * ((c - 1) * l * (2 * hq * d + 2 * hq + 2 * hkv * d) + (c - 1) * l * (hq + 2 * hkv) * d),
      4 * ((moves ? 2 * kv : 0) + (g - 1) * c * l * (hq * (2 * d + 2) + hq * d))};
}

// Counters equal the schedule's bytes, which equal the formulas when nothing is pruned (no mask)
// and never exceed them; split by link class when the nodes are the teams: the team
// collectives are then exactly the intra-node bytes.
void check_bytes(const AttnCase& c, const StarTrailConfig& cfg, const Algorithm& a,
                 const Layout& layout, bool teams_are_nodes) {
  const int nodes = teams_are_nodes ? cfg.teams() : 1;
  longseq::testing::expect_schedule_bytes(c, a, layout, nodes);
  const bool full = c.mask->describe() == "full";
  for (Pass pass : {Pass::forward, Pass::backward}) {
    const auto s = longseq::testing::schedule_bytes_of(c, a, layout, nodes, pass);
    for (int r = 0; r < c.world; ++r) {
      const PassBytes f = startrail_formula(cfg, pass, r, layout.local_len(), c.hq, c.hkv, c.d);
      EXPECT_EQ(s[r].collective, f.collective) << "rank " << r;
      if (full) {
        EXPECT_EQ(s[r].p2p, f.p2p) << "rank " << r;
      }
      EXPECT_LE(s[r].p2p, f.p2p) << "rank " << r;
      if (teams_are_nodes) {
        const auto& got = pass == Pass::forward ? c.fwd_bytes[r] : c.bwd_bytes[r];
        EXPECT_EQ(got.intra, s[r].collective) << "rank " << r;
        EXPECT_EQ(got.inter, s[r].p2p) << "rank " << r;
      }
    }
  }
}

// startrail:C with the given placement.
Algorithm startrail_algo(int c, TeamPlacement placement) {
  Algorithm a;
  a.family = Algorithm::Family::startrail;
  a.team = c;
  a.placement = placement;
  return a;
}

struct StarRun {
  int world, c;
  TeamPlacement placement;
  int64_t hq, hkv;
};

TEST(StarTrail, MatchesReferenceEveryLayoutAndMask) {
  const std::vector<StarRun> runs = {
      {4, 1, TeamPlacement::teams, 4, 2},  // the flat ring
      {4, 2, TeamPlacement::teams, 4, 2},  // G = 1: collectives only
      {8, 2, TeamPlacement::teams, 4, 2},  // the papers' example: 4 sub-rings of 2
      {8, 2, TeamPlacement::rings, 4, 4},
  };
  uint64_t seed = 100;
  for (const StarRun& run : runs)
    for (const std::string& mask : kMasks) {
      AttnCase c(37, run.hq, run.hkv, 16, mask, run.world, ++seed);
      c.run_reference();
      const Algorithm a = startrail_algo(run.c, run.placement);
      const StarTrailConfig cfg(run.world, run.c, run.placement);
      for (const std::string& bal : kBalances) {
        SCOPED_TRACE(a.name() + " P " + std::to_string(run.world) + " " + bal + " " + mask);
        const Layout layout = longseq::testing::make_layout(bal, c);
        const bool teams_are_nodes = run.placement == TeamPlacement::teams;
        c.run(a, layout, teams_are_nodes ? cfg.teams() : 1);
        longseq::testing::expect_matches_reference(c);
        check_bytes(c, cfg, a, layout, teams_are_nodes);
        if (HasFailure()) return;
      }
    }
}

// Larger worlds, one mask each: 16 ranks with 4 sub-rings of 4 (C = 2) and with C = 4 (G = 1),
// and 9 ranks with C = 3 (a world that is not a power of two).
TEST(StarTrail, LargerWorlds) {
  const std::vector<StarRun> runs = {{16, 2, TeamPlacement::rings, 4, 2},
                                     {16, 4, TeamPlacement::teams, 4, 4},
                                     {9, 3, TeamPlacement::teams, 3, 1}};
  for (const StarRun& run : runs) {
    AttnCase c(70, run.hq, run.hkv, 8, "causal", run.world, 7 + run.world);
    c.run_reference();
    const Algorithm a = startrail_algo(run.c, run.placement);
    SCOPED_TRACE(a.name() + " P " + std::to_string(run.world));
    const Layout layout(Balance::zigzag, c.n, c.world);
    c.run(a, layout, 1);
    longseq::testing::expect_matches_reference(c);
    check_bytes(c, StarTrailConfig(run.world, run.c, run.placement), a, layout, false);
  }
}

// C = 1 moves exactly the flat ring's forward bytes (P - 1 hops of K,V) and the burst backward's
// (P - 1 hops of Q, dO, D, LSE and of dQ), and nothing else.
TEST(StarTrail, COneMovesRingBytes) {
  AttnCase c(40, 4, 2, 8, "causal", 4, 3);
  c.run_reference();
  const Algorithm a = startrail_algo(1, TeamPlacement::teams);
  const Layout layout(Balance::zigzag, c.n, c.world);
  c.run(a, layout, 1);
  longseq::testing::expect_matches_reference(c);
  const int64_t l = layout.local_len();
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(c.fwd_bytes[r].intra, 4 * 3 * 2 * l * c.hkv * c.d);
    EXPECT_EQ(c.bwd_bytes[r].intra, 4 * 3 * (3 * l * c.hq * c.d + 2 * l * c.hq));
  }
}

// WallFacer eq. (6)-(7) directly, MHA (H = h*D, B = 1, N = P*L): per rank, the collective bytes are
// 4*N*H*(C-1)/P (+ the LSE rows of the merge, (C-1)*L*h) and the P2P bytes 2*N*H/C for every rank
// whose initial transfer leaves it (G - 1 for the others). One team per node, so collectives are
// exactly the intra-node bytes and P2P exactly the inter-node bytes.
TEST(StarTrail, BytesMatchWallFacerEquations) {
  const int p = 8, c = 2;
  const int64_t n = 64, h = 4, d = 16, hh = h * d, l = n / p;
  AttnCase cs(n, h, h, d, "causal", p, 21);
  cs.run_reference();
  const Algorithm a = startrail_algo(c, TeamPlacement::teams);
  const StarTrailConfig cfg(p, c);
  const Layout layout(Balance::zigzag, n, p);
  cs.run(a, layout, cfg.teams());
  longseq::testing::expect_matches_reference(cs);
  int moving = 0;
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(cs.fwd_bytes[r].intra, 4 * (4 * n * hh * (c - 1) / p + (c - 1) * l * h))
        << "rank " << r;
    const bool moves = cfg.init_send_target(r) != r;
    moving += moves;
    const int64_t rounds = p / (c * c) - (moves ? 0 : 1);
    EXPECT_EQ(cs.fwd_bytes[r].inter, 4 * rounds * 2 * c * hh * n / p) << "rank " << r;
    if (moves) {
      EXPECT_EQ(cs.fwd_bytes[r].inter, 4 * 2 * n * hh / c) << "rank " << r;
    }
  }
  EXPECT_EQ(moving, 6);  // ranks 0 and 7 keep their shard (the 8-rank table above)
}

}  // namespace
