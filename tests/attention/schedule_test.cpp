// Schedules without communication or compute (design.md §5): for every world up to 64, every
// non-empty chunk pair is computed exactly once, every send has its receive, slots are never
// overwritten while in use, and every gradient contribution reaches home exactly once.
#include "longseq/attention/schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "longseq/comm/group.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"

using namespace longseq::attention;

namespace {

struct Case {
  Balance balance;
  const char* mask;  // full | causal | window | docs | blocks
  int world, nodes;
  int64_t n;
};

MaskSpec make_mask(const std::string& kind, int64_t n, int world) {
  MaskSpec m;
  if (kind == "causal") m.causal = true;
  if (kind == "window") m.window = std::max<int64_t>(1, n / 8);
  if (kind == "docs") {
    m.causal = true;
    m.doc_ids.resize(n);
    int32_t doc = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0 && longseq::core::uniform01(7, i) < 3.0 / n) ++doc;  // uneven documents
      m.doc_ids[i] = doc;
    }
  }
  if (kind == "blocks") {
    m.block_size = 2 * world;
    m.num_blocks = (n + m.block_size - 1) / m.block_size;
    m.block_mask.resize(m.num_blocks * m.num_blocks);
    for (int64_t i = 0; i < m.num_blocks; ++i)
      for (int64_t j = 0; j < m.num_blocks; ++j)  // local + global pattern
        m.block_mask[i * m.num_blocks + j] = (i == j || j == 0 || (i + j) % 3 == 0) ? 1 : 0;
  }
  return m;
}

// Replays all ranks' schedules in lockstep with content tracking. Receives write at post time,
// sends read at wait time (the two ends of the window in which a real transfer touches memory),
// so any schedule that passes is safe under every timing the executor can see.
void replay(const std::vector<RankSchedule>& s, const PairTable& pairs, Algorithm algo, Pass pass) {
  const int world = static_cast<int>(s.size());
  const bool bq = bundle_is_query(algo, pass);
  const bool backward = pass == Pass::backward;
  using Grad = std::multiset<int>;  // contributing ranks
  std::vector<std::vector<int>> data(world);
  std::vector<std::vector<Grad>> grad(world);
  std::vector<std::vector<std::pair<int, Grad>>> grad_meta(world);  // (bundle, grad) per slot
  std::vector<std::map<int, Grad>> home(world);                     // rank -> bundle j's home grad
  std::set<std::tuple<int, int, int, int>> computed;
  // (sender, receiver, origin, part) -> (post, wait) of the send, matched against the receive.
  std::map<std::tuple<int, int, int, int>, std::pair<int, int>> sends;
  for (int r = 0; r < world; ++r) {
    data[r].assign(s[r].data_slots, -1);
    grad_meta[r].assign(s[r].grad_slots, {-1, {}});
    for (const Xfer& x : s[r].xfers)
      if (x.send) {
        auto key = std::make_tuple(r, x.peer, x.origin, static_cast<int>(x.part));
        ASSERT_FALSE(sends.count(key)) << "duplicate send";
        sends[key] = {x.post_step, x.wait_step};
        ASSERT_LT(x.post_step, x.wait_step);
      }
  }
  size_t matched = 0;
  for (int r = 0; r < world; ++r)
    for (const Xfer& x : s[r].xfers)
      if (!x.send) {
        auto key = std::make_tuple(x.peer, r, x.origin, static_cast<int>(x.part));
        auto it = sends.find(key);
        ASSERT_NE(it, sends.end()) << "receive without send: rank " << r << " from " << x.peer;
        EXPECT_EQ(it->second, std::make_pair(x.post_step, x.wait_step));
        ++matched;
      }
  EXPECT_EQ(matched, sends.size()) << "send without receive";

  // Values in flight: posted sends read at wait; receives are written at post from the sender's
  // slot as it will be at the sender's wait (same step by the match above).
  int steps = 0;
  for (const auto& rs : s) steps = std::max(steps, rs.num_steps);
  for (int r = 0; r < world; ++r)
    if (s[r].own_slot >= 0) data[r][s[r].own_slot] = r;
  // In lockstep, a receive posted at p gets what the sender's slot holds at p (writes at post
  // and reads at wait coincide only if the slot is untouched in between: checked below).
  std::map<std::tuple<int, int, int, int>, std::pair<int, Grad>> in_flight;
  std::map<std::tuple<int, int, int, int>, std::pair<int, Grad>> posted_content;
  for (int step = 0; step < steps; ++step) {
    // 1. waits: sends must still read what they had at post.
    for (int r = 0; r < world; ++r)
      for (const Xfer& x : s[r].xfers)
        if (x.send && x.wait_step == step) {
          auto key = std::make_tuple(r, x.peer, x.origin, static_cast<int>(x.part));
          auto now =
              x.part == Part::data ? std::make_pair(data[r][x.slot], Grad{}) : grad_meta[r][x.slot];
          EXPECT_EQ(now.first, posted_content[key].first)
              << "rank " << r << " slot " << x.slot << " overwritten before its send completed";
          EXPECT_EQ(now.second, posted_content[key].second);
        }
    // 2. accumulates.
    for (int r = 0; r < world; ++r)
      for (const Accumulate& a : s[r].accumulates)
        if (a.step == step) {
          auto& from = grad_meta[r][a.from];
          ASSERT_GE(from.first, 0);
          if (a.into < 0) {
            ASSERT_EQ(from.first, r) << "home accumulate of a foreign bundle";
            home[r][r].insert(from.second.begin(), from.second.end());
          } else {
            auto& into = grad_meta[r][a.into];
            ASSERT_EQ(into.first, from.first);
            into.second.insert(from.second.begin(), from.second.end());
          }
        }
    // 3. posts (all sends first so receives in the same step see them).
    for (int r = 0; r < world; ++r)
      for (const Xfer& x : s[r].xfers)
        if (x.send && x.post_step == step) {
          auto key = std::make_tuple(r, x.peer, x.origin, static_cast<int>(x.part));
          posted_content[key] =
              x.part == Part::data ? std::make_pair(data[r][x.slot], Grad{}) : grad_meta[r][x.slot];
          if (x.part == Part::data) {
            EXPECT_EQ(data[r][x.slot], x.origin);
          }
        }
    for (int r = 0; r < world; ++r)
      for (const Xfer& x : s[r].xfers)
        if (!x.send && x.post_step == step) {
          auto key = std::make_tuple(x.peer, r, x.origin, static_cast<int>(x.part));
          const auto& c = posted_content[key];
          if (x.part == Part::data)
            data[r][x.slot] = c.first;
          else
            grad_meta[r][x.slot] = c;
        }
    // 4. compute.
    for (int r = 0; r < world; ++r)
      for (const Work& w : s[r].work)
        if (w.step == step) {
          ASSERT_EQ(data[r][w.slot], w.origin)
              << "rank " << r << " step " << step << " computes on the wrong bundle";
          const int qr = bq ? w.origin : r, kr = bq ? r : w.origin;
          for (const SubPair& p : w.pairs) {
            EXPECT_TRUE(computed.insert({qr, p.qc, kr, p.kc}).second) << "pair computed twice";
            EXPECT_EQ(p.kind, pairs.kind(qr, p.qc, kr, p.kc));
          }
          if (backward) {
            if (w.origin == r) {
              EXPECT_EQ(w.grad_slot, -1);
              home[r][r].insert(r);
            } else {
              ASSERT_GE(w.grad_slot, 0);
              grad_meta[r][w.grad_slot] = {w.origin, Grad{r}};
            }
          }
        }
  }
  // Every non-empty pair computed.
  const int c = pairs.chunks_per_rank();
  size_t nonempty = 0;
  for (int qr = 0; qr < world; ++qr)
    for (int qc = 0; qc < c; ++qc)
      for (int kr = 0; kr < world; ++kr)
        for (int kc = 0; kc < c; ++kc)
          if (pairs.kind(qr, qc, kr, kc) != PairKind::empty) ++nonempty;
  EXPECT_EQ(computed.size(), nonempty);
  if (backward) {
    for (int j = 0; j < world; ++j) {
      Grad want;
      for (int r = 0; r < world; ++r)
        if (bq ? pairs.needs(j, r) : pairs.needs(r, j)) want.insert(r);
      EXPECT_EQ(home[j][j], want) << "bundle " << j << " gradient contributions";
    }
  }
}

}  // namespace

TEST(Schedule, AllPairsOnceEverySendMatchedNoSlotHazard) {
  int cases = 0;
  for (int world : {1, 2, 3, 4, 5, 8, 12, 16, 64})
    for (Balance b :
         {Balance::contiguous, Balance::zigzag, Balance::striped, Balance::block_striped})
      for (const char* mk : {"full", "causal", "window", "docs", "blocks"}) {
        if ((b == Balance::block_striped) != (std::string(mk) == "blocks")) continue;
        if (world == 64 && std::string(mk) == "docs") continue;  // keep the test quick
        const int64_t n = world * 2 * 5 + 3;                     // not a multiple of 2P
        MaskSpec m = make_mask(mk, n, world);
        Layout layout(b, n, world, m.block_size);
        PairTable pairs(layout, m);
        for (int nodes : {1, 2, 4}) {
          if (world % nodes) continue;
          longseq::comm::Topology topo = longseq::comm::Topology::declared(world, nodes);
          for (const char* a : {"ring", "burst", "double-ring", "double-ring:ring"}) {
            Algorithm algo = Algorithm::parse(a);
            if (algo.route == Route::double_ring && nodes == 1 && world > 1) continue;
            for (Pass pass : {Pass::forward, Pass::backward}) {
              std::vector<RankSchedule> all;
              for (int r = 0; r < world; ++r)
                all.push_back(make_schedule(r, topo, layout, pairs, algo, pass));
              SCOPED_TRACE(std::string(a) + " " + std::string(balance_name(b)) + " " + mk +
                           " world " + std::to_string(world) + " nodes " + std::to_string(nodes) +
                           (pass == Pass::forward ? " fwd" : " bwd"));
              replay(all, pairs, algo, pass);
              ++cases;
              if (::testing::Test::HasFailure()) return;
            }
          }
        }
      }
  EXPECT_GT(cases, 300);
}

TEST(Schedule, UsedDataSlotsAreWhatTheExecutorTouches) {
  // World 1: the own K,V bundle is never sent and its steps read the key side, so neither the
  // forward nor the ring backward holds a data slot; the burst backward packs its query bundle.
  const int64_t n = 37;
  MaskSpec m;
  m.causal = true;
  const Layout one(Balance::zigzag, n, 1);
  const PairTable pairs1(one, m);
  const longseq::comm::Topology topo1 = longseq::comm::Topology::declared(1, 1);
  for (const char* a : {"ring", "burst"})
    for (Pass pass : {Pass::forward, Pass::backward}) {
      const Algorithm algo = Algorithm::parse(a);
      const RankSchedule s = make_schedule(0, topo1, one, pairs1, algo, pass);
      const bool bq = bundle_is_query(algo, pass);
      SCOPED_TRACE(std::string(a) + (pass == Pass::forward ? " fwd" : " bwd"));
      EXPECT_GE(s.data_slots, 1);
      EXPECT_EQ(used_data_slot_count(s, bq), bq ? 1 : 0);
    }
  // Several ranks: every slot a transfer or a step names is used, and with a full mask every
  // slot of the ring is (the own bundle leaves at step 0).
  const Layout four(Balance::zigzag, 4 * n, 4);
  MaskSpec full;
  const PairTable pairs4(four, full);
  const longseq::comm::Topology topo4 = longseq::comm::Topology::declared(4, 1);
  for (const char* a : {"ring", "burst", "startrail:2", "usp:2"})
    for (Pass pass : {Pass::forward, Pass::backward})
      for (int r = 0; r < 4; ++r) {
        const Algorithm algo = Algorithm::parse(a);
        const RankSchedule s = make_schedule(r, topo4, four, pairs4, algo, pass);
        const std::vector<bool> used = used_data_slots(s, bundle_is_query(algo, pass));
        ASSERT_EQ(used.size(), static_cast<size_t>(s.data_slots));
        for (const Xfer& x : s.xfers) {
          if (x.part == Part::data) {
            EXPECT_TRUE(used[static_cast<size_t>(x.slot)]) << a << r;
          }
        }
        for (const Work& w : s.work) {
          if (w.slot >= 0 && w.origin != s.member) {
            EXPECT_TRUE(used[static_cast<size_t>(w.slot)]) << a << r;
          }
        }
        if (std::string(a) == "ring") {
          EXPECT_EQ(used_data_slot_count(s, bundle_is_query(algo, pass)), s.data_slots);
        }
      }
}

TEST(Schedule, EmptyStepsPostNoTransfer) {
  // Sliding window over a contiguous layout: a rank needs only the previous rank's keys, so the
  // forward posts exactly one data send per rank (except the last) and nothing else.
  const int world = 8;
  MaskSpec m;
  m.window = 10;
  Layout layout(Balance::contiguous, 8 * 64, world);
  PairTable pairs(layout, m);
  longseq::comm::Topology topo = longseq::comm::Topology::declared(world, 1);
  for (int r = 0; r < world; ++r) {
    RankSchedule s =
        make_schedule(r, topo, layout, pairs, Algorithm::parse("burst"), Pass::forward);
    int sends = 0;
    for (const Xfer& x : s.xfers) sends += x.send;
    EXPECT_EQ(sends, r == world - 1 ? 0 : 1) << "rank " << r;
    EXPECT_EQ(s.work.size(), r == 0 ? 1u : 2u);
  }
}

TEST(Schedule, DoubleRingSendsInterOnlyAcrossNodes) {
  const int world = 8, nodes = 2;
  MaskSpec m;
  Layout layout(Balance::zigzag, 100, world);
  PairTable pairs(layout, m);
  longseq::comm::Topology topo = longseq::comm::Topology::declared(world, nodes);
  for (int r = 0; r < world; ++r) {
    RankSchedule s =
        make_schedule(r, topo, layout, pairs, Algorithm::parse("double-ring"), Pass::forward);
    int intra = 0, inter = 0;
    for (const Xfer& x : s.xfers)
      if (x.send) (topo.same_node(r, x.peer) ? intra : inter) += 1;
    // Per rank: (L-1) intra sends per outer round over M rounds, M-1 inter sends.
    EXPECT_EQ(intra, nodes * (world / nodes - 1));
    EXPECT_EQ(inter, nodes - 1);
    // Three kinds of buffer at once: compute, intra receive, inter receive (+ the one being sent).
    EXPECT_LE(s.data_slots, 4);
  }
}

TEST(Schedule, RefusesBadInput) {
  EXPECT_THROW(Algorithm::parse("startrail"), longseq::core::Error);
  EXPECT_THROW(longseq::comm::Topology::declared(6, 4), longseq::core::Error);
  EXPECT_THROW(Layout(Balance::block_striped, 100, 3, 16), longseq::core::Error);
  EXPECT_THROW(parse_balance("diagonal"), longseq::core::Error);
}

namespace {

// Every algorithm with this world's valid parameters (double ring: on 2 or more nodes).
std::vector<std::string> algorithms_for(int world) {
  std::vector<std::string> out = {"ring", "burst", "ulysses"};
  if (world % 2 == 0 && world > 2) out.push_back("double-ring:2");
  for (int c = 2; c * c <= world; ++c)
    if (world % (c * c) == 0) {
      out.push_back("startrail:" + std::to_string(c));
      out.push_back("startrail:" + std::to_string(c) + ":rings");
    }
  for (int u = 2; u < world; ++u)
    if (world % u == 0 && (u == 2 || u * u == world || u == world / 2)) {
      out.push_back("usp:" + std::to_string(u));
      out.push_back("usp:" + std::to_string(u) + ":ring");
    }
  return out;
}

// All ranks' schedules of one pass: point-to-point messages match one to one by (sender,
// receiver, tag) and stay in the pass's half of comm's tag space; collective steps agree on
// their sub-groups.
void check_all_ranks(const std::vector<RankSchedule>& all, const std::string& what) {
  std::map<std::tuple<int, int, int>, int> sends, recvs;  // (from, to, tag) -> count
  auto count = [&](int from, int to, int tag, bool send) {
    ASSERT_GE(tag, 0) << what;
    ASSERT_LT(tag, longseq::comm::kMaxTag / 2) << what;
    ++(send ? sends : recvs)[{from, to, tag}];
  };
  for (const RankSchedule& rs : all) {
    const int r = rs.rank;
    // Each head group's ring has its own 2n tags (schedule.hpp).
    const int ring_tags = 2 * static_cast<int>(rs.ring.size()) * rs.head_groups;
    for (const Xfer& x : rs.xfers) {
      ASSERT_NE(x.peer, r) << what;
      if (x.part == Part::side) {  // after the ring's tags: 4 fields x the staged blocks
        ASSERT_GE(x.tag, ring_tags) << what;
        ASSERT_LT(x.tag, ring_tags + 4 * rs.side_units) << what;
      } else if (x.part == Part::heads) {  // after those: 2 directions x groups x fields
        ASSERT_GE(x.tag, ring_tags + 4 * rs.side_units) << what;
        ASSERT_LT(x.tag, ring_tags + 4 * rs.side_units + 2 * rs.head_groups * kFieldCount) << what;
      } else {
        ASSERT_LT(x.tag, ring_tags) << what;
      }
      count(x.send ? r : x.peer, x.send ? x.peer : r, x.tag, x.send);
    }
    for (const auto* list : {&rs.pre, &rs.post})
      for (const Collective& c : *list) {
        // Every member names the same sub-group under the same partition at the same step.
        ASSERT_NE(std::find(c.members.begin(), c.members.end(), r), c.members.end()) << what;
        for (int m : c.members) {
          const auto& other = list == &rs.pre ? all[m].pre : all[m].post;
          const auto it = std::find_if(other.begin(), other.end(), [&](const Collective& o) {
            return o.op == c.op && o.partition == c.partition;
          });
          ASSERT_NE(it, other.end()) << what;
          ASSERT_EQ(it->members, c.members) << what;
        }
      }
  }
  EXPECT_EQ(sends, recvs) << what;
  for (const auto& [k, n] : sends) ASSERT_EQ(n, 1) << what << ": tag used twice";
}

}  // namespace

// Schedules of every algorithm at worlds up to 128: tags belong to the executor (no collision,
// every message matched), collectives agree, and every non-empty chunk pair is computed once per
// head slice.
TEST(Schedule, EveryAlgorithmTagsMatchAtLargeWorlds) {
  int cases = 0;
  for (int world : {1, 2, 3, 4, 6, 8, 9, 12, 16, 18, 27, 36, 64, 128}) {
    const int64_t n = world * 3 + 1;
    for (const char* mk : {"full", "causal"}) {
      if (world > 16 && std::string(mk) == "full") continue;  // keep the test quick
      MaskSpec m = make_mask(mk, n, world);
      Layout layout(Balance::zigzag, n, world);
      PairTable pairs(layout, m);
      for (const std::string& a : algorithms_for(world)) {
        const Algorithm algo = Algorithm::parse(a);
        const auto topo = schedule_topology(algo, longseq::comm::Topology(world));
        for (Pass pass : {Pass::forward, Pass::backward}) {
          std::vector<RankSchedule> all;
          for (int r = 0; r < world; ++r)
            all.push_back(make_schedule(r, topo, layout, pairs, algo, pass));
          const std::string what = a + " " + mk + " world " + std::to_string(world) +
                                   (pass == Pass::forward ? " fwd" : " bwd");
          check_all_ranks(all, what);
          // Coverage: (q rank, qc, k rank, kc) per head slice, exactly once when not empty.
          const bool bq = bundle_is_query(algo, pass);
          std::map<std::tuple<int, int, int, int, int>, int> computed;
          for (const RankSchedule& rs : all)
            for (const Work& w : rs.work)
              for (const SubPair& p : w.pairs) {
                const int qm = bq ? w.origin : rs.member, km = bq ? rs.member : w.origin;
                ++computed[{rs.q_pieces[qm][p.qp], p.qc, rs.kv_pieces[km][p.kp], p.kc,
                            rs.head_slice}];
              }
          const int slices = all[0].head_slices;
          size_t want = 0;
          for (int qr = 0; qr < world; ++qr)
            for (int kr = 0; kr < world; ++kr)
              for (int qc = 0; qc < pairs.chunks_per_rank(); ++qc)
                for (int kc = 0; kc < pairs.chunks_per_rank(); ++kc)
                  if (pairs.kind(qr, qc, kr, kc) != PairKind::empty) want += slices;
          EXPECT_EQ(computed.size(), want) << what;
          for (const auto& [k, c] : computed) ASSERT_EQ(c, 1) << what;
          ++cases;
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
  EXPECT_GT(cases, 120);
}

namespace {

// StarTrail's staged side transfers (schedule.hpp) of one pass, all ranks: every block sent is
// received with the same field, rows and unit; the blocks a rank receives cover its key side (and
// in the backward the gradients of its team's shards) once; a chunk pair is computed only after
// the block holding its keys has been waited for, and a block's gradients leave only after the
// last pair that writes them; the own K,V bundle leaves only once complete; the staged works keep
// the unstaged order of every output row's chunk pairs (so sums and merges round alike).
void check_staged(const std::vector<RankSchedule>& all, const Layout& layout,
                  const PairTable& pairs, Algorithm algo, Pass pass, const std::string& what) {
  const bool backward = pass == Pass::backward;
  const int64_t l = layout.local_len();
  const int cpr = pairs.chunks_per_rank();
  const int split = std::min(cpr, kSideSplit);
  std::map<std::tuple<int, int, int>, const SideBlock*> sent;  // (from, to, tag)
  std::map<std::tuple<int, int, int>, const Xfer*> sides[2];   // [send] (from, to, tag)
  for (const RankSchedule& rs : all)
    for (const Xfer& x : rs.xfers) {
      if (x.part == Part::side && x.send) sent[{rs.rank, x.peer, x.tag}] = &rs.side_blocks[x.slot];
      sides[x.send][x.send ? std::make_tuple(rs.rank, x.peer, x.tag)
                           : std::make_tuple(x.peer, rs.rank, x.tag)] = &x;
    }
  // Across ranks, every transfer (ring or side) is posted by both sides before either waits: the
  // executor's deadlock freedom and the replay's order (schedule.hpp "Timing is logical").
  for (const auto& [key, s] : sides[1]) {
    const auto it = sides[0].find(key);
    ASSERT_NE(it, sides[0].end()) << what;
    const Xfer& r = *it->second;
    EXPECT_LT(s->post_step, r.wait_step) << what << " transfer " << std::get<0>(key) << " -> "
                                         << std::get<1>(key) << " tag " << std::get<2>(key);
    EXPECT_LT(r.post_step, s->wait_step) << what << " transfer " << std::get<0>(key) << " -> "
                                         << std::get<1>(key) << " tag " << std::get<2>(key);
  }
  for (const RankSchedule& rs : all) {
    SCOPED_TRACE(what + " rank " + std::to_string(rs.rank));
    ASSERT_EQ(rs.side_units, algo.team * split);
    const int units = rs.side_units;
    auto unit_of = [&](int kp, int kc) { return kp * split + kc * split / cpr; };
    // Rows received per field, and the step each unit of k and v is waited at.
    std::map<Field, std::vector<int>> rows;
    std::vector<int> ready(units, 0);  // wait step of unit u's k and v (0: the side was ours)
    std::vector<int> leaves(units, std::numeric_limits<int>::max());  // first dK,dV send post
    bool received = false;
    for (const Xfer& x : rs.xfers) {
      ASSERT_LT(x.post_step, x.wait_step);
      ASSERT_LT(x.wait_step, rs.num_steps);
      if (x.part != Part::side) continue;
      const SideBlock& b = rs.side_blocks[x.slot];
      ASSERT_GE(b.unit, 0);
      ASSERT_LT(b.unit, units);
      EXPECT_EQ(b.piece, b.unit / split);
      if (x.send) {
        if (b.field == Field::dk || b.field == Field::dv)
          leaves[b.unit] = std::min(leaves[b.unit], x.post_step);
        continue;
      }
      const auto it = sent.find({x.peer, rs.rank, x.tag});
      ASSERT_NE(it, sent.end()) << "side block received, not sent";
      EXPECT_EQ(it->second->field, b.field);
      EXPECT_EQ(it->second->unit, b.unit);
      EXPECT_EQ(it->second->rows, b.rows);
      EXPECT_EQ(it->second->row_begin, b.row_begin);
      auto& cover = rows[b.field];
      cover.resize(static_cast<size_t>(algo.team * l), 0);
      for (int64_t i = 0; i < b.rows; ++i) ++cover[b.piece * l + b.row_begin + i];
      if (b.field == Field::k || b.field == Field::v) {
        received = true;
        ready[b.unit] = std::max(ready[b.unit], x.wait_step);
      }
    }
    for (const auto& [f, cover] : rows)
      for (size_t i = 0; i < cover.size(); ++i) ASSERT_EQ(cover[i], 1) << "field " << int(f);
    if (received) {
      EXPECT_EQ(rows.size(), backward ? 4u : 2u);
    }
    // Works: one per step; a staged work holds its unit's pairs only and runs after its keys
    // landed; the last step writing a unit's gradients comes before they leave.
    std::set<int> steps;
    std::map<std::pair<int, int>, std::pair<int, int>> last;  // (qp, qc) -> last (kp, kc)
    for (const Work& w : rs.work) {
      ASSERT_TRUE(steps.insert(w.step).second) << "two works at step " << w.step;
      const bool own_keys = backward || w.origin == rs.member;  // pairs read our key side
      for (const SubPair& p : w.pairs) {
        const int u = unit_of(p.kp, p.kc);
        if (w.unit >= 0) {
          EXPECT_EQ(u, w.unit);
        }
        if (!own_keys) continue;
        EXPECT_GE(w.step, ready[u]) << "pair read before its keys landed";
        if (backward) {
          EXPECT_LT(w.step, leaves[u]) << "gradient block sent before it was done";
        }
        // Per output row chunk, the own bundle's pairs come in (kp, kc) order across steps.
        if (w.origin == rs.member) {
          const std::pair<int, int> now{p.kp, p.kc};
          const auto [it, fresh] = last.try_emplace({p.qp, p.qc}, now);
          if (!fresh) {
            EXPECT_LT(it->second, now) << "pair order changed";
          }
          it->second = now;
        }
      }
    }
    // Forward: the own K,V bundle is sent only once every block has landed.
    if (!backward) {
      for (const Xfer& x : rs.xfers) {
        if (x.part != Part::data || !x.send || x.origin != rs.member) continue;
        for (int u = 0; u < units; ++u) {
          EXPECT_GE(x.post_step, ready[u]);  // a step's waits come before its posts
        }
      }
    }
  }
}

}  // namespace

// Every StarTrail configuration up to world 64, every layout and mask, both passes and
// placements.
TEST(Schedule, StarTrailStagesItsSideTransfers) {
  int cases = 0, received = 0;
  for (int world : {4, 8, 9, 16, 18, 27, 32, 36, 64})
    for (int c = 2; c * c <= world; ++c) {
      if (world % (c * c)) continue;
      for (Balance b :
           {Balance::contiguous, Balance::zigzag, Balance::striped, Balance::block_striped})
        for (const char* mk : {"full", "causal", "window", "docs", "blocks"}) {
          if ((b == Balance::block_striped) != (std::string(mk) == "blocks")) continue;
          if (world > 16 && (std::string(mk) == "docs" || std::string(mk) == "full")) continue;
          const int64_t n = world * 2 * 5 + 3;
          MaskSpec m = make_mask(mk, n, world);
          Layout layout(b, n, world, m.block_size);
          PairTable pairs(layout, m);
          for (const char* placement : {"", ":rings"}) {
            const std::string name = "startrail:" + std::to_string(c) + placement;
            const Algorithm algo = Algorithm::parse(name);
            const auto topo = schedule_topology(algo, longseq::comm::Topology(world));
            for (Pass pass : {Pass::forward, Pass::backward}) {
              const auto all = make_schedules(topo, layout, pairs, algo, pass);
              const std::string what = name + " " + std::string(balance_name(b)) + " " + mk +
                                       " world " + std::to_string(world) +
                                       (pass == Pass::forward ? " fwd" : " bwd");
              check_all_ranks(all, what);
              check_staged(all, layout, pairs, algo, pass, what);
              for (const RankSchedule& rs : all) received += !rs.side_blocks.empty();
              ++cases;
              if (::testing::Test::HasFailure()) return;
            }
          }
        }
    }
  EXPECT_GT(cases, 100);
  EXPECT_GT(received, 0);
}

namespace {

// Ulysses head groups (schedule.hpp) of one pass, all ranks, against the unsplit schedules
// `plain`: every head group computes exactly the unsplit work's pairs; every (direction, field,
// group) block goes to and comes from every other member once, send and receive posted at the
// same step with the same tag and bytes; a group's input blocks are posted before, and waited at
// or before, the step of the work that reads them; a group's output blocks are posted only after
// the step of the last work that writes them; every wait comes after its post; the bytes are the
// all-to-alls'.
void check_head_groups(const std::vector<RankSchedule>& all, const std::vector<RankSchedule>& plain,
                       HeadCounts heads, const std::string& what) {
  const int world = static_cast<int>(all.size());
  const HeadSplit hs(heads.q, heads.kv, world);
  const int want_groups = hs.replicated ? 1 : head_groups_for(hs.kv_per);
  const Dims dm{7, heads.q, heads.kv, 4, 2};
  // (from, to, tag) -> (post, bytes, op, field, group) of the send.
  std::map<std::tuple<int, int, int>, std::tuple<int, int64_t, int, int, int>> sends;
  for (int r = 0; r < world; ++r) {
    const RankSchedule& rs = all[r];
    const RankSchedule& un = plain[r];
    ASSERT_EQ(rs.head_groups, want_groups) << what << " rank " << r;
    const PassBytes b = schedule_bytes(rs, Algorithm::parse("ulysses"), Pass::forward, dm);
    const PassBytes ub = schedule_bytes(un, Algorithm::parse("ulysses"), Pass::forward, dm);
    EXPECT_EQ(b.collective, ub.collective) << what;
    EXPECT_EQ(b.p2p, 0) << what;
    if (want_groups == 1) {
      EXPECT_TRUE(rs.head_blocks.empty()) << what;
      EXPECT_EQ(rs.pre.size(), un.pre.size()) << what;
      continue;
    }
    ASSERT_TRUE(rs.pre.empty() && rs.post.empty()) << what;
    ASSERT_EQ(un.pre.size(), 1u) << what;
    ASSERT_EQ(un.post.size(), 1u) << what;
    const int g_count = rs.head_groups;
    // Works: one per group, the unsplit pairs in the unsplit order.
    std::vector<int> work_step(g_count, -1);
    ASSERT_EQ(rs.work.size(), un.work.size() * g_count) << what;
    for (const Work& w : rs.work) {
      ASSERT_GE(w.head_group, 0) << what;
      ASSERT_LT(w.head_group, g_count) << what;
      ASSERT_EQ(work_step[w.head_group], -1) << what << ": two works for one group";
      work_step[w.head_group] = w.step;
      ASSERT_EQ(w.pairs.size(), un.work.at(0).pairs.size()) << what;
      for (size_t i = 0; i < w.pairs.size(); ++i) {
        const SubPair &a = w.pairs[i], &c = un.work[0].pairs[i];
        ASSERT_TRUE(a.qc == c.qc && a.kc == c.kc && a.qp == c.qp && a.kp == c.kp &&
                    a.kind == c.kind)
            << what;
      }
    }
    // Blocks: (op, field, group) x every other member, once per direction.
    std::map<std::tuple<int, int, int>, std::set<int>> peers[2];  // [send]
    for (const Xfer& x : rs.xfers) {
      ASSERT_EQ(x.part, Part::heads) << what;
      ASSERT_LT(x.post_step, x.wait_step) << what;
      ASSERT_LT(x.wait_step, rs.num_steps) << what;
      const HeadBlock& hb = rs.head_blocks.at(x.slot);
      ASSERT_EQ(un.pre[0].members.at(hb.member), x.peer) << what;
      const bool in = hb.op == Collective::Op::to_heads;
      const std::vector<Field>& fields = (in ? un.pre : un.post)[0].fields;
      ASSERT_NE(std::find(fields.begin(), fields.end(), hb.field), fields.end()) << what;
      const auto key =
          std::make_tuple(static_cast<int>(hb.op), static_cast<int>(hb.field), hb.group);
      ASSERT_TRUE(peers[x.send][key].insert(hb.member).second) << what << ": block twice";
      const int step = work_step[hb.group];
      if (in && !x.send && step >= 0) {  // read by the group's work
        EXPECT_LT(x.post_step, step) << what;
        EXPECT_LE(x.wait_step, step) << what;
      }
      if (!in && x.send && step >= 0) {  // written by the group's work
        EXPECT_GT(x.post_step, step) << what;
      }
      if (x.send)
        sends[{r, x.peer, x.tag}] = {x.post_step, head_block_bytes(rs, hb, dm),
                                     static_cast<int>(hb.op), static_cast<int>(hb.field), hb.group};
    }
    EXPECT_EQ(peers[0].size(), (un.pre[0].fields.size() + un.post[0].fields.size()) * g_count)
        << what;
    for (const Collective* c : {&un.pre[0], &un.post[0]})
      for (Field f : c->fields)
        for (int g = 0; g < g_count; ++g)
          for (int send = 0; send < 2; ++send) {
            const auto key = std::make_tuple(static_cast<int>(c->op), static_cast<int>(f), g);
            EXPECT_EQ(peers[send][key].size(), static_cast<size_t>(world - 1)) << what;
          }
  }
  // Every receive against its send: same step, bytes and block.
  size_t matched = 0;
  for (int r = 0; r < world; ++r)
    for (const Xfer& x : all[r].xfers) {
      if (x.send) continue;
      const auto it = sends.find({x.peer, r, x.tag});
      ASSERT_NE(it, sends.end()) << what << ": receive without send";
      const HeadBlock& hb = all[r].head_blocks[x.slot];
      EXPECT_EQ(it->second,
                std::make_tuple(x.post_step, head_block_bytes(all[r], hb, dm),
                                static_cast<int>(hb.op), static_cast<int>(hb.field), hb.group))
          << what;
      ++matched;
    }
  EXPECT_EQ(matched, sends.size()) << what;
}

}  // namespace

TEST(Schedule, UlyssesHeadGroupsPostBeforeReadSendAfterWrite) {
  int grouped = 0;
  for (int world : {2, 3, 4, 6, 8})
    for (int64_t per : {1, 2, 3, 4, 6, 8})  // kv heads per member (1: also replicated ones)
      for (int64_t g : {1, 2})              // query heads per kv head
        for (const char* mk : {"full", "causal", "docs"})
          for (Pass pass : {Pass::forward, Pass::backward}) {
            const int64_t n = world * 4 + 3;
            MaskSpec m = make_mask(mk, n, world);
            Layout layout(Balance::zigzag, n, world);
            PairTable pairs(layout, m);
            const Algorithm algo = Algorithm::parse("ulysses");
            const longseq::comm::Topology topo(world);
            for (const HeadCounts heads :
                 {HeadCounts{per * world * g, per * world}, HeadCounts{world * g, 1}}) {
              if (heads.kv == 1 && per > 1) continue;
              std::vector<RankSchedule> all, plain;
              for (int r = 0; r < world; ++r) {
                all.push_back(make_schedule(r, topo, layout, pairs, algo, pass, heads));
                plain.push_back(make_schedule(r, topo, layout, pairs, algo, pass));
              }
              const std::string what = std::string(mk) + " world " + std::to_string(world) +
                                       " Hq " + std::to_string(heads.q) + " Hkv " +
                                       std::to_string(heads.kv) +
                                       (pass == Pass::forward ? " fwd" : " bwd");
              check_head_groups(all, plain, heads, what);
              check_all_ranks(all, what);
              // make_schedules gives every rank's make_schedule.
              const auto batch = make_schedules(topo, layout, pairs, algo, pass, heads);
              for (int r = 0; r < world; ++r) {
                ASSERT_EQ(batch[r].xfers.size(), all[r].xfers.size()) << what;
                for (size_t i = 0; i < batch[r].xfers.size(); ++i) {
                  const Xfer &a = batch[r].xfers[i], &b = all[r].xfers[i];
                  ASSERT_TRUE(a.send == b.send && a.peer == b.peer && a.slot == b.slot &&
                              a.post_step == b.post_step && a.wait_step == b.wait_step &&
                              a.tag == b.tag && a.part == b.part)
                      << what;
                }
                ASSERT_EQ(batch[r].head_groups, all[r].head_groups) << what;
                ASSERT_EQ(batch[r].work.size(), all[r].work.size()) << what;
              }
              grouped += all[0].head_groups > 1;
              if (::testing::Test::HasFailure()) return;
            }
          }
  EXPECT_GT(grouped, 100);
  // StarTrail keeps its blocking collective steps.
  const Layout layout(Balance::zigzag, 64, 8);
  const PairTable pairs(layout, make_mask("causal", 64, 8));
  const RankSchedule rs = make_schedule(0, longseq::comm::Topology(8), layout, pairs,
                                        Algorithm::parse("startrail:2"), Pass::forward, {64, 32});
  EXPECT_EQ(rs.head_groups, 1);
  EXPECT_TRUE(rs.head_blocks.empty());
}

namespace {

using RingKey = std::tuple<bool, int, int, int, int, int, int, int>;
RingKey ring_key(const Xfer& x) {
  return {x.send, x.peer,      x.origin,    static_cast<int>(x.part),
          x.slot, x.post_step, x.wait_step, x.tag};
}

// USP head groups (schedule.hpp) of one rank against its unsplit schedule `un`: group g's ring is
// the unsplit ring shifted by 1 + g K steps (K = ring members), with slots and tags of its own;
// its to_heads blocks are posted before and waited at or before its first work; its from_heads
// blocks are posted after everything of its ring (works, accumulates, waits: its outputs are
// final); every block goes to and comes from every other member of the Ulysses group once; the
// bytes are the unsplit schedule's.
void check_usp_groups(const RankSchedule& rs, const RankSchedule& un, int want_groups,
                      HeadCounts heads, const Algorithm& algo, Pass pass, const std::string& what) {
  const int g_count = want_groups, n = static_cast<int>(un.ring.size());
  ASSERT_EQ(rs.head_groups, g_count) << what;
  if (g_count == 1) {
    EXPECT_TRUE(rs.head_blocks.empty()) << what;
    EXPECT_EQ(rs.pre.size(), un.pre.size()) << what;
    return;
  }
  ASSERT_TRUE(rs.pre.empty() && rs.post.empty()) << what;
  ASSERT_EQ(rs.group_stride, n) << what;
  EXPECT_EQ(rs.data_slots, g_count * un.data_slots) << what;
  EXPECT_EQ(rs.grad_slots, g_count * un.grad_slots) << what;
  EXPECT_EQ(rs.own_slot, un.own_slot) << what;
  const Dims dm{7, heads.q, heads.kv, 4, 2};
  // The bytes: the all-to-alls' and the ring's, cut by group.
  const PassBytes b = schedule_bytes(rs, algo, pass, dm), ub = schedule_bytes(un, algo, pass, dm);
  EXPECT_EQ(b.collective, ub.collective) << what;
  EXPECT_EQ(b.p2p, ub.p2p) << what;
  // Per group: works, accumulates and ring transfers are the unsplit ones shifted.
  std::vector<int> first(g_count, std::numeric_limits<int>::max()), last(g_count, -1);
  for (int g = 0; g < g_count; ++g) {
    const int by = 1 + g * n;
    std::vector<const Work*> ws;
    for (const Work& w : rs.work)
      if (w.head_group == g) ws.push_back(&w);
    ASSERT_EQ(ws.size(), un.work.size()) << what << " group " << g;
    for (size_t i = 0; i < ws.size(); ++i) {
      const Work &w = *ws[i], &u = un.work[i];
      EXPECT_EQ(w.step, u.step + by) << what;
      EXPECT_EQ(w.origin, u.origin) << what;
      EXPECT_EQ(w.slot, u.slot + g * un.data_slots) << what;
      EXPECT_EQ(w.grad_slot, u.grad_slot < 0 ? -1 : u.grad_slot + g * un.grad_slots) << what;
      ASSERT_EQ(w.pairs.size(), u.pairs.size()) << what;
      for (size_t k = 0; k < w.pairs.size(); ++k)
        ASSERT_TRUE(w.pairs[k].qc == u.pairs[k].qc && w.pairs[k].kc == u.pairs[k].kc &&
                    w.pairs[k].qp == u.pairs[k].qp && w.pairs[k].kp == u.pairs[k].kp)
            << what;
      first[g] = std::min(first[g], w.step);
      last[g] = std::max(last[g], w.step);
    }
    std::vector<Accumulate> as;
    for (const Accumulate& a : rs.accumulates)
      if (a.head_group == g) as.push_back(a);
    ASSERT_EQ(as.size(), un.accumulates.size()) << what;
    for (size_t i = 0; i < as.size(); ++i) {
      const Accumulate& u = un.accumulates[i];
      EXPECT_EQ(as[i].step, u.step + by) << what;
      EXPECT_EQ(as[i].from, u.from + g * un.grad_slots) << what;
      EXPECT_EQ(as[i].into, u.into < 0 ? -1 : u.into + g * un.grad_slots) << what;
      last[g] = std::max(last[g], as[i].step);
    }
    std::multiset<RingKey> want, got;
    for (const Xfer& x : un.xfers) {
      Xfer y = x;
      y.post_step += by;
      y.wait_step += by;
      y.slot += g * (x.part == Part::data ? un.data_slots : un.grad_slots);
      y.tag += g * 2 * n;
      want.insert(ring_key(y));
    }
    for (const Xfer& x : rs.xfers)
      if (x.part != Part::heads && x.tag / (2 * n) == g) {
        got.insert(ring_key(x));
        last[g] = std::max(last[g], x.wait_step);
      }
    EXPECT_EQ(got, want) << what << " group " << g;
  }
  // Head blocks.
  const Collective &in = un.pre.at(0), &out = un.post.at(0);
  std::map<std::tuple<int, int, int>, std::set<int>> peers[2];  // [send]
  for (const Xfer& x : rs.xfers) {
    ASSERT_LT(x.post_step, x.wait_step) << what;
    ASSERT_LT(x.wait_step, rs.num_steps) << what;
    if (x.part != Part::heads) continue;
    const HeadBlock& hb = rs.head_blocks.at(x.slot);
    ASSERT_EQ(in.members.at(hb.member), x.peer) << what;
    const bool to = hb.op == Collective::Op::to_heads;
    const auto& fields = (to ? in : out).fields;
    ASSERT_NE(std::find(fields.begin(), fields.end(), hb.field), fields.end()) << what;
    const auto key = std::make_tuple(static_cast<int>(hb.op), static_cast<int>(hb.field), hb.group);
    ASSERT_TRUE(peers[x.send][key].insert(hb.member).second) << what << ": block twice";
    if (to && !x.send && last[hb.group] >= 0) {  // read by the group's first work
      EXPECT_LT(x.post_step, first[hb.group]) << what;
      EXPECT_LE(x.wait_step, first[hb.group]) << what;
    }
    if (!to && x.send) {
      EXPECT_GT(x.post_step, last[hb.group]) << what;
    }
  }
  for (const Collective* c : {&in, &out})
    for (Field f : c->fields)
      for (int g = 0; g < g_count; ++g)
        for (int send = 0; send < 2; ++send)
          EXPECT_EQ(
              peers[send][std::make_tuple(static_cast<int>(c->op), static_cast<int>(f), g)].size(),
              c->members.size() - 1)
              << what;
}

}  // namespace

// USP: the ring runs once per head group while the next group's all-to-all blocks travel, for
// every Ulysses degree with a ring of 2 or more, both backwards, odd lengths and several masks.
TEST(Schedule, UspHeadGroupsRunTheRingOncePerGroup) {
  int grouped = 0;
  for (int world : {4, 6, 8, 12})
    for (int u = 2; u < world; ++u) {
      if (world % u) continue;
      for (const char* suffix : {"", ":ring"})
        for (int64_t per : {1, 2, 3, 4})  // kv heads per Ulysses member
          for (const char* mk : {"full", "causal", "docs", "window"})
            for (Pass pass : {Pass::forward, Pass::backward}) {
              const std::string a = "usp:" + std::to_string(u) + suffix;
              const Algorithm algo = Algorithm::parse(a);
              const int64_t n = world * 4 + 3;
              const MaskSpec m = make_mask(mk, n, world);
              const Layout layout(Balance::zigzag, n, world);
              const PairTable pairs(layout, m);
              const longseq::comm::Topology topo(world);
              const HeadCounts heads{2 * per * u, per * u};
              const auto all = make_schedules(topo, layout, pairs, algo, pass, heads);
              const auto plain = make_schedules(topo, layout, pairs, algo, pass);
              const std::string what = a + " " + mk + " world " + std::to_string(world) + " Hkv " +
                                       std::to_string(heads.kv) +
                                       (pass == Pass::forward ? " fwd" : " bwd");
              for (int r = 0; r < world; ++r) {
                check_usp_groups(all[r], plain[r], head_groups_for(per), heads, algo, pass, what);
                const RankSchedule one = make_schedule(r, topo, layout, pairs, algo, pass, heads);
                ASSERT_EQ(one.xfers.size(), all[r].xfers.size()) << what;
                for (size_t i = 0; i < one.xfers.size(); ++i)
                  ASSERT_EQ(ring_key(one.xfers[i]), ring_key(all[r].xfers[i])) << what;
              }
              check_all_ranks(all, what);
              grouped += all[0].head_groups > 1;
              if (::testing::Test::HasFailure()) return;
            }
    }
  EXPECT_GT(grouped, 200);
}
