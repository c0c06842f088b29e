#pragma once
// The one name of every distributed-attention algorithm: the `--algo` vocabulary of `train`,
// `attention`, `schedule`, `plan` and the benches. One parser and one printer, so a name one
// command prints means the same to every other (Algorithm::parse(a.name()) == a).
//
//   ring                           flat ring; K,V,dK,dV circulate in the backward (RingAttention)
//   burst                          flat ring; Q,dQ,dO,D,LSE circulate in the backward, K,V stay
//                                  home (BurstAttention, BurstEngine Algorithm 2)
//   double-ring[:I][:burst|:ring]  inner rings of I consecutive ranks (default: the ranks of one
//                                  node of the group's topology) and an outer ring across them;
//                                  burst (default) or ring backward (BurstEngine §3.2)
//   startrail:C[:teams|:rings]     StarTrail/WallFacer with team size C, C*C | P; the placement
//                                  says which transfers stay inside a node (default teams)
//   ulysses                        DeepSpeed-Ulysses all-to-all over the whole group
//   usp:U[:burst|:ring]            Ulysses in groups of U ranks, burst (default) or ring across
//
// The printer leaves defaults out ("usp:2", not "usp:2:burst"). Old spellings still accepted:
// "double-ring-kv:I" (= double-ring:I:ring).
#include <cstdint>
#include <string>
#include <string_view>

namespace longseq::attention {

/// Route shape of the ring family. flat: one ring over all ranks; double_ring: inner rings and an
/// outer ring across them, with separate intra and inter buffers.
enum class Route : uint8_t { flat, double_ring };
/// Backward variant. kv: K,V,dK,dV circulate (RingAttention). q: Q,dQ,dO,D,LSE circulate and
/// K,V,dK,dV stay home (BurstAttention, BurstEngine Algorithm 2).
enum class Backward : uint8_t { kv, q };
/// StarTrail placement (startrail.hpp): which of the two communications stays inside a node.
enum class TeamPlacement : uint8_t { teams, rings };
/// "teams" | "rings".
std::string_view team_placement_name(TeamPlacement p);

struct Algorithm {
  /// ring: ring, burst and the double ring (schedule.hpp); the others: startrail.hpp, ulysses.hpp.
  enum class Family : uint8_t { ring, startrail, ulysses, usp };

  Route route = Route::flat;        ///< ring family
  Backward backward = Backward::q;  ///< ring family; usp: across its groups
  Family family = Family::ring;
  int inner = 0;  ///< double ring: ranks per inner ring; 0: the ranks of one node
  int team = 0;   ///< startrail: team size C
  TeamPlacement placement = TeamPlacement::teams;  ///< startrail
  /// usp: Ulysses degree U. ulysses: 0 (the whole group), or the group size where a caller has
  /// resolved it (the planner); name() prints neither.
  int degree = 0;

  /// Throws core::Error naming `s` and the grammar when it is no algorithm or malformed
  /// ("startrail:x", "usp:0", "double-ring:2:foo").
  static Algorithm parse(std::string_view s);
  /// The canonical name; parse(name()) == *this.
  std::string name() const;
  /// Throws core::Error naming the values when the algorithm cannot run on a group of `world`
  /// ranks with these heads ("--algo startrail:3 needs C to divide world 8", an inner ring size
  /// that does not divide the world, a Ulysses degree the heads do not split into).
  void validate(int world, int64_t hq, int64_t hkv) const;
  /// validate() in two halves, for callers that know the group before the tensors: whether the
  /// algorithm fits a group of `world` ranks at all, and whether its Ulysses degree (none for
  /// the ring family and StarTrail) splits these heads.
  void validate_world(int world) const;
  void validate_heads(int world, int64_t hq, int64_t hkv) const;
  bool ring_family() const { return family == Family::ring; }
  bool operator==(const Algorithm& o) const = default;
};

}  // namespace longseq::attention
