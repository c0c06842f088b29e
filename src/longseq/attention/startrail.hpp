#pragma once
// StarTrail / WallFacer attention: concentric multi-rings (WallFacer §4.2-4.5, StarTrail §3).
//
// Legend: P ranks, C team size (the replication factor), T = P/C teams, G = P/C^2 teams per team
// group (= sub-ring length), C team groups, C^2 sub-rings. L = layout.local_len() tokens per rank.
// A *team shard* is the C*L tokens the C members of one team hold together (member order); team t's
// shard is shard t. A rank has coordinates (g, j, a): team group g, team j within the group
// (global team t = g*G + j), member a within the team (intra-team rank).
//
// Forward. (1) Q, K, V are all-gathered inside the team. (2) The initial transfer (WallFacer
// Algorithm 2): member a of team t sends team shard t's K,V to team group a, team t / C, member
// t % C; so rank (g, j, a) receives shard j*C + a. (3) Sub-ring (g, a) = the members a of the G
// teams of group g circulates those G shards for G - 1 steps (Algorithm 3: next team in the group);
// every rank computes its team's C*L queries against 1/C of the keys. (4) The C partial (O, LSE) of
// each team are combined with LSE weights and scattered: every member keeps its own L rows.
// Invariants (tested exhaustively up to P = 64): every team group sees every shard exactly once
// (the C sub-rings of a group partition the T shards), and no two teams of a sub-ring hold the same
// shard at any step.
//
// Backward (StarTrail §3.2 "Backward Propagation"): K,V are placed as in the forward (all-gather +
// initial transfer) and stay put, as do their gradients; Q, dO, D, LSE and the dQ partial circulate
// on the sub-rings (BurstAttention style); a final hop brings each team's dQ partial home. Then dQ
// is reduce-scattered in the team, and dK,dV go back along the reversed initial transfer and are
// reduce-scattered in the source team.
//
// Placement (WallFacer §4.4): `teams` puts a team on consecutive ranks (rank = t*C + a: the
// all-gather and reduce-scatter stay inside a node); `rings` puts a sub-ring on consecutive ranks
// (rank = (g*C + a)*G + j: the ring P2P stays inside a node). C = 1 is exactly the flat ring.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "longseq/attention/distributed.hpp"

namespace longseq::attention {

/// The communication configuration generator (WallFacer §4.3), as pure functions of
/// (world, C, placement). Value type; every query is O(1) except team_ranks / ring_ranks.
class StarTrailConfig {
 public:
  struct Coord {
    int group = 0;   ///< team group g in [0, C)
    int slot = 0;    ///< team j within the group, in [0, G); also the sub-ring position
    int member = 0;  ///< intra-team rank a in [0, C); also which sub-ring of the group
    bool operator==(const Coord&) const = default;
  };

  /// Throws core::Error naming the values unless C >= 1, C divides P and C^2 divides P.
  StarTrailConfig(int world, int c, TeamPlacement placement = TeamPlacement::teams);

  int world() const { return world_; }
  int c() const { return c_; }
  TeamPlacement placement() const { return placement_; }
  int teams() const { return world_ / c_; }  ///< T
  int ring_len() const {
    return world_ / (c_ * c_);
  }  ///< G: teams per team group, ranks per sub-ring

  Coord coord(int rank) const;
  int rank_of(const Coord& x) const;
  int team_of(int rank) const;  ///< global team t = g*G + j
  int member_of(int rank) const { return coord(rank).member; }
  /// Rank of member a of global team t.
  int team_member_rank(int team, int member) const;
  /// The C ranks of team t in member order (the all-gather / reduce-scatter group).
  std::vector<int> team_ranks(int team) const;
  /// The G ranks of the sub-ring through `rank`, in ring order (slot 0 first).
  std::vector<int> ring_ranks(int rank) const;

  /// Initial transfer (WallFacer Algorithm 2): where this rank sends its team's K,V shard, and
  /// from whom it receives the shard it starts the ring with. May be the rank itself (no transfer).
  int init_send_target(int rank) const;
  int init_recv_source(int rank) const;
  /// Team shard this rank holds after the initial transfer: slot*C + member.
  int initial_shard(int rank) const;
  /// Sub-ring neighbours (WallFacer Algorithm 3): K,V go to next and come from prev.
  int ring_next(int rank) const;
  int ring_prev(int rank) const;
  /// Team shard held at ring step s (0 <= s < G): the initial shard of ring position slot - s.
  int shard_at_step(int rank, int step) const;

 private:
  int world_, c_;
  TeamPlacement placement_;
};

/// Options of `--algo startrail:C[:teams|:rings]`.
struct StarTrailOptions {
  int c = 1;
  TeamPlacement placement = TeamPlacement::teams;
};

/// Forward on every rank of `group` (size P = layout.world()). Shapes as in distributed.hpp.
/// Blocking. Throws core::Error naming the values when C does not suit P.
AttentionSaved startrail_forward(core::View<const float> q, core::View<const float> k,
                                 core::View<const float> v, const AttentionSpec& spec,
                                 const Layout& layout, comm::Group& group, AttentionStats* stats,
                                 const StarTrailOptions& opt);

/// Backward: dq [L, Hq, D], dk and dv [L, Hkv, D] of this rank's tokens. Re-places K,V (team
/// all-gather + initial transfer) as the paper does rather than keeping 2*C*L*Hkv*D per layer.
AttentionGrads startrail_backward(core::View<const float> dout, const AttentionSaved& saved,
                                  const AttentionSpec& spec, const Layout& layout,
                                  comm::Group& group, AttentionStats* stats,
                                  const StarTrailOptions& opt);

/// Elements (not bytes) one rank sends in each pass, by the schedule above; the docs state the
/// formulas and the tests compare them with the byte counters. Self-transfers count zero.
struct StarTrailVolume {
  int64_t collective = 0;  ///< all-gathers and reduce-scatters inside the team
  int64_t p2p = 0;         ///< initial transfer, sub-ring steps, final hops
};
StarTrailVolume startrail_forward_volume(const StarTrailConfig& cfg, int rank, int64_t l,
                                         int64_t hq, int64_t hkv, int64_t d);
StarTrailVolume startrail_backward_volume(const StarTrailConfig& cfg, int rank, int64_t l,
                                          int64_t hq, int64_t hkv, int64_t d);

}  // namespace longseq::attention
