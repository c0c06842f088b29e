// The pair-order rule (comm/group.hpp, docs/comm.md "The pair-order rule"): a tagless transport
// (NCCL) matches the messages between two ranks by posting order alone, so for every ordered pair
// (a -> b) the sends a posts to b must equal, message for message, in step, tag and bytes, the
// receives b posts from a, in the order each rank posts them. Then tags carry no information and
// the NCCL backend matches every message as MPI's tag matching would.
//
// Posting order is the executor's (attention/distributed.cpp): ring step s posts the transfers
// whose post_step is s in rs.xfers order, one isend/irecv each; collective steps (rs.pre before
// the ring, rs.post after it) post one collective per field in list order on the sub-group named
// by their partition. The byte counts are the executor's: data_layout().bytes for a bundle,
// grad_elems() * 4 for a gradient part, rows x width x element bytes for a side block.
//
// Legend: P world, a -> b an ordered pair of world ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "longseq/attention/schedule.hpp"
#include "longseq/comm/topology.hpp"
#include "longseq/core/error.hpp"

using namespace longseq::attention;

namespace {

/// One point-to-point message as one side posts it.
struct Message {
  int step = 0;
  int tag = 0;
  int64_t bytes = 0;
  bool operator==(const Message&) const = default;
};

int64_t xfer_bytes(const RankSchedule& rs, const Xfer& x, const Algorithm& algo, Pass pass,
                   const Dims& dm) {
  if (x.part == Part::data) return static_cast<int64_t>(data_layout(rs, algo, pass, dm).bytes);
  if (x.part == Part::grad) return grad_elems(rs, algo, pass, dm) * 4;
  if (x.part == Part::heads)
    return head_block_bytes(rs, rs.head_blocks[static_cast<size_t>(x.slot)], dm);
  const SideBlock& b = rs.side_blocks[static_cast<size_t>(x.slot)];
  return b.rows * field_width(b.field, side_hq(rs, dm), side_hkv(rs, dm), dm.d) *
         field_bytes(b.field, dm);
}

/// By (a, b): a's sends to b and b's receives from a, each in its poster's order. `swap` (for the
/// test that the check can fail) exchanges, on rank swap_rank only, the posting order of the two
/// first transfers of one step that go to one peer in one direction.
struct PairStreams {
  std::map<std::pair<int, int>, std::vector<Message>> sent, received;
  bool swapped = false;  ///< swap_rank had two such transfers and they were swapped
};

PairStreams posting_order(const std::vector<RankSchedule>& all, const Algorithm& algo, Pass pass,
                          const Dims& dm, int swap_rank = -1) {
  PairStreams out;
  for (const RankSchedule& rs : all) {
    // The executor's loop: for s in steps, for x in rs.xfers with x.post_step == s.
    std::vector<const Xfer*> order;
    for (int s = 0; s < rs.num_steps; ++s)
      for (const Xfer& x : rs.xfers)
        if (x.post_step == s) order.push_back(&x);
    EXPECT_EQ(order.size(), rs.xfers.size()) << "rank " << rs.rank << ": a transfer never posted";
    if (rs.rank == swap_rank) {
      for (size_t i = 0; i + 1 < order.size(); ++i) {
        auto j = std::find_if(order.begin() + static_cast<std::ptrdiff_t>(i) + 1, order.end(),
                              [&](const Xfer* y) {
                                return y->send == order[i]->send && y->peer == order[i]->peer &&
                                       y->post_step == order[i]->post_step;
                              });
        if (j != order.end()) {
          std::swap(order[i], *j);
          out.swapped = true;
          break;
        }
      }
    }
    for (const Xfer* x : order) {
      const Message m{x->post_step, x->tag, xfer_bytes(rs, *x, algo, pass, dm)};
      if (x->send)
        out.sent[{rs.rank, x->peer}].push_back(m);
      else
        out.received[{x->peer, rs.rank}].push_back(m);
    }
  }
  return out;
}

/// The rule for point-to-point transfers; returns the pairs that break it (empty: holds).
std::vector<std::string> broken_pairs(const PairStreams& p) {
  std::vector<std::string> bad;
  auto describe = [](const std::vector<Message>& v) {
    std::string s;
    for (const Message& m : v)
      s += "(s" + std::to_string(m.step) + " t" + std::to_string(m.tag) + " " +
           std::to_string(m.bytes) + "B)";
    return s;
  };
  std::map<std::pair<int, int>, int> pairs;
  for (const auto& [k, v] : p.sent) pairs[k] = 0;
  for (const auto& [k, v] : p.received) pairs[k] = 0;
  static const std::vector<Message> kNone;
  for (const auto& [k, unused] : pairs) {
    const auto s = p.sent.find(k), r = p.received.find(k);
    const auto& sv = s == p.sent.end() ? kNone : s->second;
    const auto& rv = r == p.received.end() ? kNone : r->second;
    if (sv != rv)
      bad.push_back(std::to_string(k.first) + "->" + std::to_string(k.second) + " sends " +
                    describe(sv) + " receives " + describe(rv));
  }
  return bad;
}

/// One collective call as a member posts it: the sub-group (partition and members), the
/// operation, the field and its element count per member block. NCCL matches collectives on a
/// communicator by call order, and one stream runs the calls on every communicator in the order
/// they were made, so two ranks must make the calls of every sub-group they share in one order.
struct CollectiveCall {
  std::string partition;
  std::vector<int> members;
  Collective::Op op;
  Field field;
  int64_t count;
  bool operator==(const CollectiveCall&) const = default;
};

std::vector<CollectiveCall> collective_order(const RankSchedule& rs, const Dims& dm) {
  std::vector<CollectiveCall> out;
  const int64_t hq_s = side_hq(rs, dm), hkv_s = side_hkv(rs, dm);
  for (const auto* list : {&rs.pre, &rs.post})
    for (const Collective& c : *list) {
      if (c.op == Collective::Op::merge) {  // o, then lse (run_collectives)
        out.push_back({c.partition, c.members, c.op, Field::o, dm.l * dm.hq * dm.d});
        out.push_back({c.partition, c.members, c.op, Field::lse, dm.l * dm.hq});
        continue;
      }
      for (Field f : c.fields) {
        const bool heads = c.op == Collective::Op::to_heads || c.op == Collective::Op::from_heads;
        const int64_t w =
            heads ? field_width(f, hq_s, hkv_s, dm.d) : field_width(f, dm.hq, dm.hkv, dm.d);
        out.push_back({c.partition, c.members, c.op, f, dm.l * w});
      }
    }
  return out;
}

/// The collectives' rule: for every two ranks a, b, the calls a makes on sub-groups holding b
/// equal the calls b makes on sub-groups holding a, in order.
std::vector<std::string> broken_collectives(const std::vector<RankSchedule>& all, const Dims& dm) {
  std::vector<std::vector<CollectiveCall>> calls;
  for (const RankSchedule& rs : all) calls.push_back(collective_order(rs, dm));
  std::vector<std::string> bad;
  const int p = static_cast<int>(all.size());
  auto shared = [](const std::vector<CollectiveCall>& cs, int other) {
    std::vector<CollectiveCall> out;
    for (const CollectiveCall& c : cs)
      if (std::find(c.members.begin(), c.members.end(), other) != c.members.end()) out.push_back(c);
    return out;
  };
  for (int a = 0; a < p; ++a)
    for (int b = a + 1; b < p; ++b)
      if (shared(calls[a], b) != shared(calls[b], a))
        bad.push_back("ranks " + std::to_string(a) + " and " + std::to_string(b));
  return bad;
}

// Every algorithm with this world's valid parameters, as schedule_test.cpp's list, plus the
// double ring's variants on declared nodes.
std::vector<std::string> algorithms_for(int world) {
  std::vector<std::string> out = {"ring", "burst", "ulysses", "double-ring", "double-ring:ring"};
  if (world % 2 == 0 && world > 2) out.push_back("double-ring:2");
  for (int c = 2; c * c <= world; ++c)
    if (world % (c * c) == 0) {
      out.push_back("startrail:" + std::to_string(c));
      out.push_back("startrail:" + std::to_string(c) + ":rings");
    }
  for (int u = 2; u < world; ++u)
    if (world % u == 0) {
      out.push_back("usp:" + std::to_string(u));
      out.push_back("usp:" + std::to_string(u) + ":ring");
    }
  return out;
}

MaskSpec make_mask(const std::string& kind, int64_t n, int world) {
  MaskSpec m;
  if (kind == "causal") m.causal = true;
  if (kind == "window") m.window = std::max<int64_t>(1, n / 8);
  if (kind == "blocks") {
    m.block_size = 2 * world;
    m.num_blocks = (n + m.block_size - 1) / m.block_size;
    m.block_mask.resize(static_cast<size_t>(m.num_blocks * m.num_blocks));
    for (int64_t i = 0; i < m.num_blocks; ++i)
      for (int64_t j = 0; j < m.num_blocks; ++j)
        m.block_mask[static_cast<size_t>(i * m.num_blocks + j)] =
            (i == j || j == 0 || (i + j) % 3 == 0) ? 1 : 0;
  }
  return m;
}

}  // namespace

// Every algorithm family, worlds up to 36 (odd ones included), four layouts, four masks, declared
// nodes, both passes, two head shapes (GQA and MHA, so bundle and gradient sizes differ between
// parts): the executor's posting order satisfies the pair-order rule for every point-to-point
// pair, and every two ranks make their shared sub-groups' collective calls in one order.
TEST(PairOrder, EveryScheduleNeedsNoTags) {
  int cases = 0, messages = 0;
  for (int world : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 18, 27, 36})
    for (Balance b :
         {Balance::contiguous, Balance::zigzag, Balance::striped, Balance::block_striped})
      for (const char* mk : {"full", "causal", "window", "blocks"}) {
        if ((b == Balance::block_striped) != (std::string(mk) == "blocks")) continue;
        if (world > 9 && b != Balance::zigzag) continue;  // keep the test quick
        const int64_t n = world * 2 * 5 + 3;
        const MaskSpec m = make_mask(mk, n, world);
        const Layout layout(b, n, world, m.block_size);
        const PairTable pairs(layout, m);
        for (int nodes : {1, 2, 3}) {
          if (world % nodes != 0 || (nodes > 1 && world > 16)) continue;
          std::vector<int> node_of(static_cast<size_t>(world));
          for (int r = 0; r < world; ++r) node_of[static_cast<size_t>(r)] = r / (world / nodes);
          const longseq::comm::Topology group(node_of);
          for (const std::string& a : algorithms_for(world)) {
            const Algorithm algo = Algorithm::parse(a);
            // heads: (Hq, Hkv) that every Ulysses degree here divides.
            for (const auto& [hq, hkv] : {std::pair<int64_t, int64_t>{72, 36}, {72, 72}}) {
              try {
                algo.validate(world, hq, hkv);
              } catch (const longseq::core::Error&) {
                continue;  // not runnable here (heads, inner ring size): no schedule to check
              }
              const auto topo = schedule_topology(algo, group);
              const Dims dm{layout.local_len(), hq, hkv, 3, 2};
              // Without the head counts and with them: Ulysses' all-to-alls as collective
              // steps, and as the head groups' point-to-point blocks (schedule.hpp).
              for (const bool named : {false, true})
                for (Pass pass : {Pass::forward, Pass::backward}) {
                  const HeadCounts heads = named ? HeadCounts{hq, hkv} : HeadCounts{};
                  const auto all = make_schedules(topo, layout, pairs, algo, pass, heads);
                  const std::string what =
                      a + (named ? " heads named " : " ") + std::string(balance_name(b)) + " " +
                      mk + " world " + std::to_string(world) + " nodes " + std::to_string(nodes) +
                      " H " + std::to_string(hq) + "/" + std::to_string(hkv) +
                      (pass == Pass::forward ? " fwd" : " bwd");
                  const PairStreams ps = posting_order(all, algo, pass, dm);
                  const auto bad = broken_pairs(ps);
                  ASSERT_TRUE(bad.empty()) << what << ": " << bad.front();
                  const auto bad_c = broken_collectives(all, dm);
                  ASSERT_TRUE(bad_c.empty()) << what << ": collectives of " << bad_c.front();
                  for (const auto& [k, v] : ps.sent) messages += static_cast<int>(v.size());
                  ++cases;
                }
            }
          }
        }
      }
  EXPECT_GT(cases, 1000);
  EXPECT_GT(messages, 100000);
}

// The check can fail: posting two transfers of one step to one peer in the other order on one
// rank (what an executor iterating a hash set, or a schedule emitting one side's list in another
// order, would do) breaks the rule for that pair, though tags would still match every message.
TEST(PairOrder, SwappingTwoTransfersOnOneSideIsCaught) {
  const int world = 4;
  const int64_t n = world * 2 * 5 + 3;
  const MaskSpec m = make_mask("causal", n, world);
  const Layout layout(Balance::zigzag, n, world);
  const PairTable pairs(layout, m);
  int swapped = 0;
  for (const char* a : {"ring", "burst", "double-ring:2", "startrail:2", "usp:2"}) {
    const Algorithm algo = Algorithm::parse(a);
    const auto topo = schedule_topology(algo, longseq::comm::Topology(world));
    for (Pass pass : {Pass::forward, Pass::backward}) {
      const auto all = make_schedules(topo, layout, pairs, algo, pass);
      const Dims dm{layout.local_len(), 4, 2, 3, 2};
      ASSERT_TRUE(broken_pairs(posting_order(all, algo, pass, dm)).empty()) << a;
      const PairStreams ps = posting_order(all, algo, pass, dm, /*swap_rank=*/1);
      if (!ps.swapped) continue;  // no step with two transfers to one peer on rank 1
      ++swapped;
      EXPECT_FALSE(broken_pairs(ps).empty()) << a << (pass == Pass::forward ? " fwd" : " bwd")
                                             << ": a swapped posting order went unnoticed";
    }
  }
  EXPECT_GE(swapped, 2);  // the backward passes (bundle and gradient) and StarTrail's side blocks
}
