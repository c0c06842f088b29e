#include "longseq/attention/startrail.hpp"

#include "longseq/core/error.hpp"

namespace longseq::attention {

std::string_view team_placement_name(TeamPlacement p) {
  return p == TeamPlacement::teams ? "teams" : "rings";
}

// ---------------------------------------------------------------------------------------------
// Configuration generator

StarTrailConfig::StarTrailConfig(int world, int c, TeamPlacement placement)
    : world_(world), c_(c), placement_(placement) {
  core::require(world >= 1, "attention", "startrail needs a world of at least 1 rank, got ", world);
  core::require(c >= 1, "attention", "--algo startrail:", c, " needs C >= 1");
  core::require(world % c == 0, "attention", "--algo startrail:", c, " needs C to divide world ",
                world);
  core::require(world % (c * c) == 0, "attention", "--algo startrail:", c,
                " needs C*C = ", c * c, " to divide world ", world);
}

StarTrailConfig::Coord StarTrailConfig::coord(int rank) const {
  LONGSEQ_CHECK_MSG(rank >= 0 && rank < world_, "rank ", rank, " of ", world_);
  const int g_len = ring_len();
  Coord x;
  if (placement_ == TeamPlacement::teams) {  // rank = (g*G + j)*C + a
    const int t = rank / c_;
    x.member = rank % c_;
    x.group = t / g_len;
    x.slot = t % g_len;
  } else {  // rank = (g*C + a)*G + j
    const int ring = rank / g_len;
    x.slot = rank % g_len;
    x.group = ring / c_;
    x.member = ring % c_;
  }
  return x;
}

int StarTrailConfig::rank_of(const Coord& x) const {
  const int g_len = ring_len();
  LONGSEQ_CHECK(x.group >= 0 && x.group < c_ && x.slot >= 0 && x.slot < g_len && x.member >= 0 &&
                x.member < c_);
  if (placement_ == TeamPlacement::teams) return (x.group * g_len + x.slot) * c_ + x.member;
  return (x.group * c_ + x.member) * g_len + x.slot;
}

int StarTrailConfig::team_of(int rank) const {
  const Coord x = coord(rank);
  return x.group * ring_len() + x.slot;
}

int StarTrailConfig::team_member_rank(int team, int member) const {
  LONGSEQ_CHECK(team >= 0 && team < teams());
  return rank_of({team / ring_len(), team % ring_len(), member});
}

std::vector<int> StarTrailConfig::team_ranks(int team) const {
  std::vector<int> r(c_);
  for (int a = 0; a < c_; ++a) r[a] = team_member_rank(team, a);
  return r;
}

std::vector<int> StarTrailConfig::ring_ranks(int rank) const {
  Coord x = coord(rank);
  std::vector<int> r(ring_len());
  for (int j = 0; j < ring_len(); ++j) {
    x.slot = j;
    r[j] = rank_of(x);
  }
  return r;
}

// Algorithm 2: the target team group is the sender's intra-team rank (every member of a team
// holds the same gathered shard, so member a serves team group a), the target team within that
// group is t / C and the target member t % C. A group's G teams times C members then hold the
// T = G*C shards exactly once each.
int StarTrailConfig::init_send_target(int rank) const {
  const int t = team_of(rank);
  return rank_of({member_of(rank), t / c_, t % c_});
}

int StarTrailConfig::init_recv_source(int rank) const {
  const Coord x = coord(rank);
  return team_member_rank(initial_shard(rank), x.group);
}

int StarTrailConfig::initial_shard(int rank) const {
  const Coord x = coord(rank);
  return x.slot * c_ + x.member;
}

// Algorithm 3: the next and previous team of the same team group, same intra-team rank.
int StarTrailConfig::ring_next(int rank) const {
  Coord x = coord(rank);
  x.slot = (x.slot + 1) % ring_len();
  return rank_of(x);
}

int StarTrailConfig::ring_prev(int rank) const {
  Coord x = coord(rank);
  x.slot = (x.slot + ring_len() - 1) % ring_len();
  return rank_of(x);
}

int StarTrailConfig::shard_at_step(int rank, int step) const {
  LONGSEQ_CHECK(step >= 0 && step < ring_len());
  Coord x = coord(rank);
  x.slot = ((x.slot - step) % ring_len() + ring_len()) % ring_len();
  return initial_shard(rank_of(x));
}

}  // namespace longseq::attention
