#pragma once
// Schedules: pure functions from (rank, world, topology, layout, mask, algorithm, pass) to the
// plan the one executor (distributed.cpp) runs, for every algorithm (design.md §5). No
// communication, no compute: tests check them for every world up to 64 and beyond, and the
// planner replays them.
//
// A schedule has three phases. (1) `pre`: collective steps over sub-groups (all-gather of a
// StarTrail team, Ulysses' all-to-all into head slices) that turn the rank's home tensors (its L
// tokens, all heads) into its *sides*: the query side holds the shards of the ranks
// q_pieces[member] (L rows each, in that order), the key side those of kv_pieces[member], both
// for this rank's head slice (StarTrail's key side arrives during the ring, see below). The ring
// family has no collectives and its sides are its home tensors. (2) The ring: the members of `ring`
// (world ranks; a sub-ring for StarTrail and USP) pass bundles, described below. (3) `post`:
// collectives that bring the sides' outputs home (Ulysses' all-to-all back, StarTrail's
// reduce-scatter).
//
// StarTrail's initial transfer of the team's K,V (Algorithm 2), and in the backward the return of
// their gradients, are not collective steps but ring transfers of Part::side: row blocks of the
// key side (`side_blocks`), posted at step 0 and each waited where the first chunk pair that reads
// it is computed. The ring's first step is cut into one step per block (`Work::unit`), so the
// compute on the blocks that have landed overlaps the transfer of the rest; a block's gradients go
// back once the last chunk pair that writes them is done (design: issue 31, item 4), at a step
// both ends compute alike (after the block's part of the cut last step), so that sender and
// receiver post the transfer at the same step (the pair-order rule, comm/group.hpp).
//
// The ring. Every member owns one *bundle*: the side that circulates (K,V in the forward and in
// ring's backward; Q, dO, D, LSE in burst's backward). A bundle spreads from its origin along a
// route tree: the flat ring is a path m, m+1, ..., m+n-1; the double ring is an outer path across
// nodes (same local rank) with an inner path inside every node. Member r *visits* bundle j at step
// t(r, j) and computes the non-empty chunk pairs it owes for it. Branches whose subtree needs
// nothing are pruned, so a step whose chunk pairs are all empty posts no transfer.
// Backward passes also carry a gradient part (dK,dV for ring; dQ for burst). Gradients are summed
// along *chains* (the computing members of one inner path, in visit order); each chain's last
// member sends its partial sum home, where the origin adds it to its own gradient. A member
// computes its contribution into a fresh slot, and only at the next step adds the partial that
// arrived meanwhile and forwards the sum: the one-step warm-up of BurstEngine Figure 5, so
// gradient transfers overlap the next compute instead of stalling it.
//
// Timing is logical. At step s a rank (1) waits for the requests whose wait_step is s, (2) adds
// received gradient partials, (3) posts all transfers whose post_step is s in one grouped call,
// (4) computes the work of step s. Every request is posted at a step strictly before the step at
// which either side waits for it, so by induction over steps no schedule can deadlock. (The
// executor packs its own bundle into own_slot after the waits of step 0; a staged StarTrail
// forward, whose own K,V bundle lands block by block, at the step of its first send instead.)
//
// Posting order: for every pair of ranks, the sends one posts to the other (step by step, in
// `xfers` order within a step) are, message for message and in step, tag and bytes, the receives
// the other posts from it, so a tagless transport (NCCL) matches them by order alone
// (tests/attention/pair_order_test.cpp).
//
// Ulysses head groups (issue 31, item 4). Where the caller names the heads (HeadCounts) and the
// side's kv heads split into G = head_groups groups of whole kv heads (each with its query
// heads), the all-to-alls of Ulysses and USP are not blocking `pre` / `post` steps but Part::heads
// transfers, and the ring runs once per head group, on the group's heads, while the next group's
// blocks travel. With K = group_stride (the ring's members: the flat ring computes at steps < K)
// and S the steps of the longest ring schedule (K, or K + 2 in a backward whose gradient partials
// go home two steps after the last compute; 1 for a one-member ring):
//  * step 0 posts group 0's to_heads blocks (home rows of the peer's head slice -> our side);
//  * group g's ring is the unsplit ring's schedule shifted by 1 + g K steps, with its own data and
//    grad slots (g x the unsplit counts onward) and tags; its works compute the unsplit works'
//    chunk pairs on the group's heads, and its accumulates add into the group's gradient;
//  * group g + 1's to_heads blocks are posted at group g's first step (1 + g K) and waited at
//    its own (1 + (g + 1) K);
//  * group g's from_heads blocks are posted at 1 + g K + S, when its outputs are final, and every
//    send and every from_heads receive is waited at the final step 1 + (G - 1) K + S + 1, after
//    which the executor writes the outputs home.
// So only group 0's to_heads blocks and the last group's from_heads blocks are outside compute: a
// 1/G share of each all-to-all. With a one-member ring (Ulysses over the whole world) K = S = 1,
// no bundle travels and group g computes on its sides at step 1 + g. Every block is one field of
// one (group, peer) pair, so the messages are those of the all-to-all cut by group, and the ring's
// are the unsplit ring's cut by group (G times the messages, the same bytes). The sums are those
// of the unsplit work, head by head (the kernels' dq chunking is sized for the side's kv heads,
// not the group's), so outputs are bit-identical.
//
// Tags belong to the schedule: ring transfers take tags [0, 2n) (origin * 2 + part, n ring
// members; head group g's ring [2ng, 2n(g + 1))), side transfers the 4U tags after the ring's
// (2nG + field * U + block; StarTrail, whose G is 1), head transfers the 2 G kFieldCount after
// those (2nG + 4U + (direction * G + group) * kFieldCount + field); the
// executor adds a per-pass base. Collectives run on cached sub-groups (comm::Group::split_cached)
// whose messages never meet user tags. So no two transfers between one pair of ranks share a tag,
// at any world size.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "longseq/attention/algorithm.hpp"
#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/comm/topology.hpp"

namespace longseq::attention {

enum class Pass : uint8_t { forward, backward };

/// The topology a ring-family schedule runs on: the group's own, except for a double ring with
/// an explicit inner ring size I (double-ring:I), whose inner rings are blocks of I consecutive
/// ranks whatever the nodes are. Throws core::Error naming the values when I does not divide the
/// group size.
comm::Topology schedule_topology(const Algorithm& algo, const comm::Topology& group);

/// StarTrail / WallFacer placement (WallFacer §4.2-4.5, StarTrail §3). P ranks, C team size,
/// T = P/C teams, G = P/C^2 teams per team group (= sub-ring length). A rank is (g, j, a): team
/// group g, team j in the group (global team t = g*G + j), member a of the team. `teams` puts a
/// team on consecutive ranks (rank = t*C + a), `rings` a sub-ring (rank = (g*C + a)*G + j).
/// Initial transfer (Algorithm 2): member a of team t sends its team's K,V to team group a, team
/// t / C, member t % C, so rank (g, j, a) starts with team shard j*C + a; sub-ring (g, a) then
/// circulates the G shards of its group (Algorithm 3). C = 1 is the flat ring.
class StarTrailConfig {
 public:
  struct Coord {
    int group = 0, slot = 0, member = 0;
    bool operator==(const Coord&) const = default;
  };
  /// Throws core::Error naming the values unless C >= 1 and C*C divides P.
  StarTrailConfig(int world, int c, TeamPlacement placement = TeamPlacement::teams);
  int world() const { return world_; }
  int c() const { return c_; }
  int teams() const { return world_ / c_; }          ///< T
  int ring_len() const { return world_ / c_ / c_; }  ///< G
  Coord coord(int rank) const;
  int rank_of(const Coord& x) const;
  int team_of(int rank) const { return coord(rank).group * ring_len() + coord(rank).slot; }
  int member_of(int rank) const { return coord(rank).member; }
  int team_member_rank(int team, int member) const {
    return rank_of({team / ring_len(), team % ring_len(), member});
  }
  std::vector<int> team_ranks(int team) const;  ///< member order
  std::vector<int> ring_ranks(int rank) const;  ///< sub-ring through rank, slot order
  int init_send_target(int rank) const;
  int init_recv_source(int rank) const;
  int initial_shard(int rank) const { return coord(rank).slot * c_ + coord(rank).member; }
  int ring_next(int rank) const { return ring_step(rank, 1); }
  int ring_prev(int rank) const { return ring_step(rank, ring_len() - 1); }
  /// Team shard held at ring step s: the initial shard of ring position slot - s.
  int shard_at_step(int rank, int step) const;

 private:
  int ring_step(int rank, int k) const;
  int world_, c_;
  TeamPlacement placement_;
};

/// How a Ulysses group of U ranks shares Hq query and Hkv kv heads: query heads split evenly;
/// kv heads split when Hkv % U == 0, else (U % Hkv == 0) each kv head goes to the U/Hkv members
/// whose query heads use it (their dK, dV partials are summed on the way back).
struct HeadSplit {
  /// Throws core::Error naming the values unless Hq % U == 0 and (Hkv % U == 0 or U % Hkv == 0).
  HeadSplit(int64_t hq, int64_t hkv, int u);
  int64_t hq = 0, hkv = 0;
  int u = 1;
  int64_t hq_per = 0;  ///< query heads per member: Hq / U
  int64_t kv_per = 0;  ///< kv heads per member: Hkv / U, or 1 when replicated
  bool replicated = false;
  int64_t q_begin(int i) const { return i * hq_per; }
  /// First kv head of member i (its query heads use kv heads kv_begin(i) .. + kv_per).
  int64_t kv_begin(int i) const { return replicated ? q_begin(i) / (hq / hkv) : i * kv_per; }
};

/// data, grad: a bundle's parts. side: a row block of the key side or of its gradient
/// (RankSchedule::side_blocks), StarTrail's initial transfer and its return.
/// heads: one field of one head group for one peer, a Ulysses all-to-all block
/// (RankSchedule::head_blocks).
enum class Part : uint8_t { data, grad, side, heads };

/// One point-to-point transfer of the ring as seen from one side.
struct Xfer {
  bool send = false;
  int peer = -1;    ///< world rank
  int origin = -1;  ///< bundle origin (ring member); Part::side: -1
  Part part = Part::data;
  int slot = -1;  ///< data or grad slot (by part) read from / written into; side: block index
  int post_step = 0;
  int wait_step = 0;
  int tag = 0;  ///< origin * 2 + part; Part::side: side_tag()
};

/// A chunk pair to compute: chunk qc of query piece qp (index into the query member's q_pieces)
/// against chunk kc of key piece kp.
struct SubPair {
  int qc = 0, kc = 0;
  PairKind kind = PairKind::partial;
  int qp = 0, kp = 0;
};

/// A work's chunk pairs: a read-only array whose storage copies share. USP's head groups copy every
/// work of the ring once per group (schedule.hpp), and the planner holds every rank's schedules:
/// G private copies of each list were a third of its memory at 1024 GPUs.
class PairList {
 public:
  PairList() = default;
  PairList(std::initializer_list<SubPair> pairs) { assign(pairs.begin(), pairs.end()); }
  template <class It>
  void assign(It first, It last) {
    size_ = static_cast<size_t>(std::distance(first, last));
    data_ = size_ ? std::make_shared<SubPair[]>(size_) : nullptr;
    std::copy(first, last, data_.get());
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const SubPair& operator[](size_t i) const { return data_[i]; }
  const SubPair* begin() const { return data_.get(); }
  const SubPair* end() const { return data_.get() + size_; }

 private:
  std::shared_ptr<SubPair[]> data_;
  size_t size_ = 0;
};

/// The compute of one step: this rank with bundle `origin` (held in data slot `slot`).
/// Forward and ring-backward: queries come from this rank's query side, keys from the bundle.
/// Burst backward: queries come from the bundle, keys from the key side. grad_slot: where a
/// backward step writes its contribution to the bundle's gradient (-1: our own bundle, home).
/// unit >= 0: the pairs are those of one row block of the key side (StarTrail's staged first and
/// last steps, RankSchedule::side_blocks / side_units); clear_grad: whether this work starts the
/// bundle's gradient contribution (false for the later blocks of one bundle, which add to it).
struct Work {
  int step = 0;
  int origin = -1;
  int slot = -1;
  int grad_slot = -1;
  PairList pairs;
  int unit = -1;
  bool clear_grad = true;
  /// >= 0: only the heads of this head group (RankSchedule::head_groups); -1: all side heads.
  int head_group = -1;
};

/// At `step` (after waits), add grad slot `from` into grad slot `into` (-1: into our own gradient,
/// of head group `head_group` when >= 0).
struct Accumulate {
  int step = 0;
  int from = -1;
  int into = -1;
  int head_group = -1;
};

/// The tensors collective steps move. q, k, v, dout are in the compute type (bf16 under precision
/// bf16); dvec (= rowsum(dO * O)), lse, o and the gradients are fp32.
enum class Field : uint8_t { q, k, v, dout, dvec, lse, o, dq, dk, dv };
inline constexpr int kFieldCount = 10;

/// One collective step over a sub-group of ranks (`members`, world ranks in group order; the
/// sub-group is the split named `partition`).
struct Collective {
  enum class Op : uint8_t {
    all_gather,      ///< home rows of every member -> side [n*L rows], member order
    reduce_scatter,  ///< side [n*L rows] summed over the members -> this member's home rows
    to_heads,        ///< all-to-all: home [L, H] -> side [n*L, H/n]: member j gets slice j
    from_heads,      ///< all-to-all back, side -> home; replicated kv heads summed
    merge,           ///< all-to-all of side (o, lse) row blocks, LSE-weighted merge into home
  };
  Op op = Op::all_gather;
  std::vector<Field> fields;
  std::vector<int> members;
  std::string partition;
};

/// By ring member, the world ranks whose shards that member's query side (or key side) holds: a
/// list of lists, stored flat (offsets and ranks) and shared between copies. Every rank's schedule
/// carries the lists of all members of its ring, so as a vector of vectors they cost P
/// allocations per rank (P^2 for the planner's cluster-sized sets of schedules); flat and shared,
/// the members of one ring hold one copy.
class Pieces {
 public:
  Pieces() = default;
  /// From the lists, by member.
  Pieces(std::initializer_list<std::vector<int>> lists);
  /// Appends member size()'s list (before the Pieces is copied: copies share their storage).
  void push_back(std::span<const int> list);
  void push_back(std::initializer_list<int> list) { push_back(std::span<const int>(list)); }
  size_t size() const { return data_ ? data_->offsets.size() - 1 : 0; }
  bool empty() const { return size() == 0; }
  std::span<const int> operator[](size_t member) const {
    return {data_->ranks.data() + data_->offsets[member],
            data_->ranks.data() + data_->offsets[member + 1]};
  }
  /// Same lists (copies of one Pieces compare without reading them).
  bool operator==(const Pieces& o) const;
  /// Identifies the storage: copies of one Pieces (the members of one ring) give the same value.
  const void* storage() const { return data_.get(); }

  class iterator {
   public:
    iterator(const Pieces* p, size_t i) : p_(p), i_(i) {}
    std::span<const int> operator*() const { return (*p_)[i_]; }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const iterator& o) const { return i_ == o.i_; }

   private:
    const Pieces* p_;
    size_t i_;
  };
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, size()}; }

 private:
  struct Data {
    std::vector<size_t> offsets{0};
    std::vector<int> ranks;
  };
  std::shared_ptr<Data> data_;
};

/// A row block of one field of the key side (k, v) or of its gradient (dk, dv): rows
/// [piece * L + row_begin, piece * L + row_begin + rows) of the side, `unit` = piece * split +
/// block. Part::side transfers move one each.
struct SideBlock {
  Field field = Field::k;
  int piece = 0;
  int unit = 0;
  int64_t row_begin = 0, rows = 0;
};

/// Row blocks per key-side piece in StarTrail's staged steps (fewer when the layout has fewer
/// chunks per rank; blocks end at chunk boundaries, so every chunk pair reads one block).
inline constexpr int kSideSplit = 2;

/// One Part::heads transfer's block: field `field` of head group `group`, exchanged with member
/// `member` of the Ulysses group (the peer). to_heads (a query or key field): the sender's home
/// rows for the member's head slice, group g; the receiver's side rows [member * L, + L) of group
/// g. from_heads (an output): the sender's side rows [member * L, + L) of group g; the receiver's
/// home rows for the member's head slice, group g.
struct HeadBlock {
  Collective::Op op = Collective::Op::to_heads;
  Field field = Field::q;
  int group = 0;
  int member = 0;
};

/// Head groups at most (more groups: more, smaller messages; 4 already leaves only a quarter of
/// the to_heads transfer, and of the from_heads one, outside compute).
inline constexpr int kMaxHeadGroups = 4;

/// Heads of the attention: the schedule splits Ulysses' all-to-alls by head group when it knows
/// them (q = kv = 0: unknown, no head groups).
struct HeadCounts {
  int64_t q = 0, kv = 0;
};

/// Head groups of a Ulysses side with `side_kv` kv heads (not replicated): the largest divisor
/// of side_kv that is at most kMaxHeadGroups (1: the all-to-alls stay blocking steps).
int head_groups_for(int64_t side_kv);

/// Everything one rank does in one pass.
struct RankSchedule {
  int rank = 0;
  int num_steps = 0;       ///< ring steps 0 .. num_steps-1 (the last ones may have only waits)
  int data_slots = 0;      ///< buffers of one bundle's data part
  int grad_slots = 0;      ///< buffers of one bundle's gradient part (backward only)
  int own_slot = -1;       ///< data slot the executor packs this rank's own bundle into at step 0
  std::vector<Work> work;  ///< by step, at most one per step
  std::vector<Xfer> xfers;
  std::vector<Accumulate> accumulates;
  std::vector<int> ring;  ///< world rank of every ring member
  int member = 0;         ///< this rank's index in `ring`
  /// By member: the world ranks whose shards its query side / key side hold.
  Pieces q_pieces, kv_pieces;
  int head_slices = 1;  ///< Ulysses degree: the sides hold 1/head_slices of the heads
  int head_slice = 0;   ///< which slice (the rank's index in its Ulysses group)
  std::vector<Collective> pre, post;
  /// Part::side transfers' blocks (Xfer::slot indexes them); empty without a side transfer.
  std::vector<SideBlock> side_blocks;
  int side_units = 0;  ///< key-side blocks the staged steps use (pieces x split); 0: no staging
  /// Ulysses head groups (see above); > 1: the all-to-alls are the Part::heads transfers, whose
  /// Xfer::slot indexes head_blocks, and pre / post are empty. Data and grad slots are group by
  /// group (group g: [g * data_slots / G, (g + 1) * data_slots / G), own slot of group g
  /// own_slot + g * data_slots / G), and so are the bundles' heads (data_layout, grad_elems).
  int head_groups = 1;
  int group_stride = 0;  ///< K: steps between the starts of two head groups' rings
  std::vector<HeadBlock> head_blocks;
};

/// Whether the sides of `rs` are its home tensors (no collective steps, no head groups).
inline bool sides_are_home(const RankSchedule& rs) {
  return rs.pre.empty() && rs.head_groups == 1;
}

/// The plan of `rank`. Pure: the same arguments give the same schedule on every rank.
RankSchedule make_schedule(int rank, const comm::Topology& topo, const Layout& layout,
                           const PairTable& pairs, Algorithm algo, Pass pass,
                           HeadCounts heads = {});

/// The plans of every rank of `topo`: element r equals make_schedule(r, ...). One ring's route
/// trees are built once for all its members, so the whole world costs about one rank's
/// make_schedule plus the plans' own size (P calls would cost P times that: the planner replays
/// all ranks).
std::vector<RankSchedule> make_schedules(const comm::Topology& topo, const Layout& layout,
                                         const PairTable& pairs, Algorithm algo, Pass pass,
                                         HeadCounts heads = {});

/// Which side of a (q, kv) pair the bundle is, for `algo` and `pass` (StarTrail's backward is
/// always burst-style).
inline bool bundle_is_query(Algorithm algo, Pass pass) {
  return pass == Pass::backward &&
         (algo.backward == Backward::q || algo.family == Algorithm::Family::startrail);
}

/// Which of rs's data slots hold memory when the executor runs it (`bq`: bundle_is_query of the
/// pass): those a transfer lands in or leaves from, a query bundle's own slots (packed at their
/// first step), and those a step computes from. The own K,V bundle of a rank that never sends it
/// (world 1) has a slot and no memory: its origin's steps read the key side. The executor
/// allocates these; the planner's memory model counts them.
std::vector<bool> used_data_slots(const RankSchedule& rs, bool bq);
/// How many of them.
int used_data_slot_count(const RankSchedule& rs, bool bq);

/// Per-rank shape of a pass: L tokens, heads, head dim, bytes of the compute type.
struct Dims {
  int64_t l = 0, hq = 1, hkv = 1, d = 1;
  int64_t elem = 4;
};

/// Elements per token of field `f` for `hq` query and `hkv` kv heads.
int64_t field_width(Field f, int64_t hq, int64_t hkv, int64_t d);
/// Bytes per element of field `f` (dims.elem for q, k, v, dout; 4 otherwise).
int64_t field_bytes(Field f, const Dims& dims);

/// A bundle as bytes: the first T part at 0, the second at `second`, then for burst two fp32
/// parts D | LSE at the 4-byte aligned offsets dvec and lse.
struct BundleLayout {
  size_t second = 0, dvec = 0, lse = 0, bytes = 0;
};
/// The data part of `rs`'s bundles, and the gradient part's fp32 elements (of one head group's
/// heads where rs.head_groups > 1).
BundleLayout data_layout(const RankSchedule& rs, const Algorithm& algo, Pass pass, const Dims& dm);
int64_t grad_elems(const RankSchedule& rs, const Algorithm& algo, Pass pass, const Dims& dm);
/// Query/key side head counts of `rs` (home counts unless Ulysses slices them).
int64_t side_hq(const RankSchedule& rs, const Dims& dm);
int64_t side_hkv(const RankSchedule& rs, const Dims& dm);

/// Bytes of a Part::heads block (L rows of the group's heads of its field).
int64_t head_block_bytes(const RankSchedule& rs, const HeadBlock& b, const Dims& dm);

/// Bytes one rank sends in one pass by its schedule (what comm's counters see; self-transfers
/// count zero): sub-group collectives (Part::heads transfers included: they are the all-to-alls,
/// cut by head group), and point-to-point (ring and side transfers).
struct PassBytes {
  int64_t collective = 0, p2p = 0;
  int64_t total() const { return collective + p2p; }
};
PassBytes schedule_bytes(const RankSchedule& rs, const Algorithm& algo, Pass pass, const Dims& dm);

}  // namespace longseq::attention
