// The planner at cluster scale (issue 31 item 2) computes what it computed before: the batched
// schedules equal the per-rank ones, and the rankings and predicted numbers equal, bit for bit, the
// ones the per-rank schedules and the step-scanning replay gave (tests/plan/data/
// planner_golden.json, written by scripts/plan_golden.py from the planner before the change).
//
// The fast path of the second round (event replay, rank-pair FLOP counts, forwards shared between
// algorithms) against the replay before it (plan/reference_replay.hpp, kept verbatim), bit for
// bit, on odd worlds (6, 12, 24 with 3 or 4 ranks per node): replay timelines of every family's
// schedules under full, causal, window and document masks; every PassCost field of
// cost_attention; plan()'s shared forwards against each algorithm's own; and plan() against the
// planner before the change (planner_golden_odd.json, written by that binary).
#include <gtest/gtest.h>

#include <bit>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "longseq/attention/schedule.hpp"
#include "longseq/plan/planner.hpp"
#include "plan/reference_replay.hpp"

namespace longseq::plan {
namespace {

using attention::Algorithm;
using attention::Layout;
using attention::MaskSpec;
using attention::PairTable;
using attention::Pass;
using attention::RankSchedule;

// Every field of two schedules, with the rank and field named on a mismatch.
void expect_same(const RankSchedule& a, const RankSchedule& b, const std::string& what) {
  SCOPED_TRACE(what + " rank " + std::to_string(b.rank));
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.num_steps, b.num_steps);
  EXPECT_EQ(a.data_slots, b.data_slots);
  EXPECT_EQ(a.grad_slots, b.grad_slots);
  EXPECT_EQ(a.own_slot, b.own_slot);
  EXPECT_EQ(a.ring, b.ring);
  EXPECT_EQ(a.member, b.member);
  EXPECT_EQ(a.q_pieces, b.q_pieces);
  EXPECT_EQ(a.kv_pieces, b.kv_pieces);
  EXPECT_EQ(a.head_slices, b.head_slices);
  EXPECT_EQ(a.head_slice, b.head_slice);
  ASSERT_EQ(a.work.size(), b.work.size());
  for (size_t i = 0; i < a.work.size(); ++i) {
    const auto &x = a.work[i], &y = b.work[i];
    EXPECT_TRUE(x.step == y.step && x.origin == y.origin && x.slot == y.slot &&
                x.grad_slot == y.grad_slot && x.unit == y.unit && x.clear_grad == y.clear_grad &&
                x.pairs.size() == y.pairs.size())
        << "work " << i;
    for (size_t k = 0; k < std::min(x.pairs.size(), y.pairs.size()); ++k)
      EXPECT_TRUE(x.pairs[k].qc == y.pairs[k].qc && x.pairs[k].kc == y.pairs[k].kc &&
                  x.pairs[k].kind == y.pairs[k].kind && x.pairs[k].qp == y.pairs[k].qp &&
                  x.pairs[k].kp == y.pairs[k].kp)
          << "work " << i << " pair " << k;
  }
  ASSERT_EQ(a.xfers.size(), b.xfers.size());
  for (size_t i = 0; i < a.xfers.size(); ++i) {
    const auto &x = a.xfers[i], &y = b.xfers[i];
    EXPECT_TRUE(x.send == y.send && x.peer == y.peer && x.origin == y.origin && x.part == y.part &&
                x.slot == y.slot && x.post_step == y.post_step && x.wait_step == y.wait_step &&
                x.tag == y.tag)
        << "xfer " << i;
  }
  EXPECT_EQ(a.side_units, b.side_units);
  ASSERT_EQ(a.side_blocks.size(), b.side_blocks.size());
  for (size_t i = 0; i < a.side_blocks.size(); ++i) {
    const auto &x = a.side_blocks[i], &y = b.side_blocks[i];
    EXPECT_TRUE(x.field == y.field && x.piece == y.piece && x.unit == y.unit &&
                x.row_begin == y.row_begin && x.rows == y.rows)
        << "side block " << i;
  }
  ASSERT_EQ(a.accumulates.size(), b.accumulates.size());
  for (size_t i = 0; i < a.accumulates.size(); ++i)
    EXPECT_TRUE(a.accumulates[i].step == b.accumulates[i].step &&
                a.accumulates[i].from == b.accumulates[i].from &&
                a.accumulates[i].into == b.accumulates[i].into)
        << "accumulate " << i;
  for (const auto* pair : {&a.pre, &a.post}) {
    const auto& other = pair == &a.pre ? b.pre : b.post;
    ASSERT_EQ(pair->size(), other.size());
    for (size_t i = 0; i < pair->size(); ++i)
      EXPECT_TRUE((*pair)[i].op == other[i].op && (*pair)[i].fields == other[i].fields &&
                  (*pair)[i].members == other[i].members &&
                  (*pair)[i].partition == other[i].partition)
          << "collective " << i;
  }
}

std::vector<std::string> algos_for(int world) {
  std::vector<std::string> out = {"ring", "burst", "ulysses"};
  for (int i = 2; i < world; ++i)
    if (world % i == 0) {
      out.push_back("double-ring:" + std::to_string(i));
      out.push_back("double-ring:" + std::to_string(i) + ":ring");
      out.push_back("usp:" + std::to_string(i));
      out.push_back("usp:" + std::to_string(i) + ":ring");
    }
  for (int c = 2; c * c <= world; ++c)
    if (world % (c * c) == 0) {
      out.push_back("startrail:" + std::to_string(c));
      out.push_back("startrail:" + std::to_string(c) + ":rings");
    }
  return out;
}

TEST(ReplayScale, BatchedSchedulesEqualPerRankOnes) {
  for (int world : {1, 3, 5, 6, 7, 9, 12}) {
    const int64_t n = 97 * world + 5;  // odd lengths: padded chunks
    std::vector<std::pair<std::string, MaskSpec>> masks(4);
    masks[0].first = "full";
    masks[1].first = "causal";
    masks[1].second.causal = true;
    masks[2].first = "window:37";
    masks[2].second.causal = true;
    masks[2].second.window = 37;
    masks[3].first = "document";
    masks[3].second.causal = true;
    for (int64_t i = 0; i < n; ++i)  // documents of uneven lengths
      masks[3].second.doc_ids.push_back(static_cast<int32_t>(i * i / (11 * n)));
    for (auto balance :
         {attention::Balance::zigzag, attention::Balance::striped, attention::Balance::contiguous})
      for (const auto& [mask_name, mask] : masks) {
        const Layout layout(balance, n, world, 0);
        const PairTable pairs(layout, mask);
        for (const std::string& name : algos_for(world)) {
          const Algorithm algo = Algorithm::parse(name);
          const comm::Topology topo = attention::schedule_topology(algo, comm::Topology(world));
          for (Pass pass : {Pass::forward, Pass::backward}) {
            const auto all = attention::make_schedules(topo, layout, pairs, algo, pass);
            ASSERT_EQ(static_cast<int>(all.size()), world);
            const std::string what = name + " world " + std::to_string(world) + " " +
                                     std::string(attention::balance_name(balance)) + " " +
                                     mask_name + (pass == Pass::forward ? " forward" : " backward");
            for (int r = 0; r < world; ++r)
              expect_same(attention::make_schedule(r, topo, layout, pairs, algo, pass), all[r],
                          what);
          }
        }
      }
  }
}

void expect_golden(const std::string& file) {
  std::ifstream in(std::string(LONGSEQ_TESTS_DIR) + "/plan/data/" + file);
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const auto golden = nlohmann::json::parse(text.str());
  ASSERT_GE(golden["cases"].size(), 8u);
  for (const auto& c : golden["cases"]) {
    PlanOptions o;
    o.model = load_model("llama-7b");
    o.seq = c["seq"];
    o.gpus = c["gpus"];
    o.gpus_per_node = c["gpus_per_node"];
    o.hw = parse_hardware(c["hardware_json"].dump(), "golden");
    o.mask = MaskSpec::parse(c["mask"].get<std::string>(), false, o.seq);
    o.balance = attention::parse_balance(c["balance"].get<std::string>());
    o.checkpoints = {model::CheckpointPolicy::none, model::CheckpointPolicy::seq_selective};
    o.losses = {model::LossMode::fused};
    o.dps = {1};  // every GPU a context rank, as the files were written (--dp 1)
    const std::string what = "seq " + std::to_string(o.seq) + " gpus " + std::to_string(o.gpus) +
                             " mask " + c["mask"].get<std::string>() + " " +
                             c["balance"].get<std::string>() + " " +
                             c["hardware"].get<std::string>();
    SCOPED_TRACE(what);
    const auto now = nlohmann::json::parse(plan_json(plan(o)))["configs"];
    const auto& want = c["configs"];
    ASSERT_EQ(now.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      SCOPED_TRACE("rank " + std::to_string(i) + " " + want[i]["algo"].get<std::string>() + " " +
                   want[i]["checkpoint"].get<std::string>());
      // Numbers bit for bit (JSON keeps 17 significant digits both ways; null where not costed).
      for (const char* key : {"algo", "checkpoint", "feasible", "reason", "step_seconds",
                              "tokens_per_sec_per_gpu", "mfu", "peak_memory_bytes", "comm_bytes"})
        EXPECT_EQ(now[i][key], want[i][key]) << key;
    }
  }
}

TEST(ReplayScale, RankingsAndNumbersEqualThePerRankReplay) {
  expect_golden("planner_golden.json");
}

// Worlds 6, 12, 24 with 2, 3 or 4 GPUs per node: the planner before issue 31's second round wrote
// these (scripts/plan_golden.py --odd).
TEST(ReplayScale, OddWorldsEqualThePlannerBeforeTheFastPath) {
  expect_golden("planner_golden_odd.json");
}

// ---- the fast path against the reference replay

// Bit equality (EXPECT_EQ on doubles would let 0.0 == -0.0 through).
bool same(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

void expect_same(const Timeline& a, const Timeline& b, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_TRUE(same(a.makespan, b.makespan)) << a.makespan << " vs " << b.makespan;
  EXPECT_EQ(a.critical_rank(), b.critical_rank());
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    const RankTimeline &x = a.ranks[r], &y = b.ranks[r];
    EXPECT_TRUE(same(x.finish, y.finish) && same(x.compute_s, y.compute_s) &&
                same(x.flops, y.flops) && same(x.wait_copy_s, y.wait_copy_s) &&
                same(x.collective_s, y.collective_s) &&
                same(x.collective_bytes, y.collective_bytes) &&
                x.messages_intra == y.messages_intra && x.messages_inter == y.messages_inter &&
                same(x.bytes_intra, y.bytes_intra) && same(x.bytes_inter, y.bytes_inter))
        << "rank " << r << " finish " << x.finish << " vs " << y.finish;
    ASSERT_EQ(x.spans.size(), y.spans.size()) << "rank " << r;
    for (size_t i = 0; i < x.spans.size(); ++i)
      EXPECT_TRUE(same(x.spans[i].begin, y.spans[i].begin) &&
                  same(x.spans[i].end, y.spans[i].end) && x.spans[i].kind == y.spans[i].kind &&
                  x.spans[i].step == y.spans[i].step)
          << "rank " << r << " span " << i;
  }
}

void expect_same(const PassCost& a, const PassCost& b, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.model, b.model);
  const std::pair<const char*, std::pair<double, double>> fields[] = {
      {"seconds", {a.seconds, b.seconds}},
      {"compute_s", {a.compute_s, b.compute_s}},
      {"flops", {a.flops, b.flops}},
      {"flops_total", {a.flops_total, b.flops_total}},
      {"messages_intra", {a.messages_intra, b.messages_intra}},
      {"messages_inter", {a.messages_inter, b.messages_inter}},
      {"bytes_intra", {a.bytes_intra, b.bytes_intra}},
      {"bytes_inter", {a.bytes_inter, b.bytes_inter}},
      {"bytes_inter_max", {a.bytes_inter_max, b.bytes_inter_max}},
      {"collective_s", {a.collective_s, b.collective_s}},
      {"collective_bytes", {a.collective_bytes, b.collective_bytes}}};
  for (const auto& [name, v] : fields)
    EXPECT_TRUE(same(v.first, v.second)) << name << " " << v.first << " vs " << v.second;
}

// Full, causal, window and (for schedules and replays) document masks over n tokens.
std::vector<std::pair<std::string, MaskSpec>> odd_masks(int64_t n, bool documents) {
  std::vector<std::pair<std::string, MaskSpec>> masks(3);
  masks[0].first = "full";
  masks[1].first = "causal";
  masks[1].second.causal = true;
  masks[2].first = "window:37";
  masks[2].second.causal = true;
  masks[2].second.window = 37;
  if (documents) {
    masks.emplace_back();
    masks[3].first = "document";
    masks[3].second.causal = true;
    for (int64_t i = 0; i < n; ++i)  // documents of uneven lengths
      masks[3].second.doc_ids.push_back(static_cast<int32_t>(i * i / (11 * n)));
  }
  return masks;
}

struct OddWorld {
  int world, gpn;
};
constexpr OddWorld kOddWorlds[] = {{6, 3}, {12, 4}, {12, 3}, {24, 4}, {24, 3}};

// A model whose every number depends on what it is asked about (so a transfer or work item
// replayed with another's data shows), with the local backend's wait copy and a cost apart from
// the FLOPs in the `variant`.
ReplayModel odd_model(int gpn, bool variant) {
  ReplayModel m;
  m.bytes = [](int rank, const attention::Xfer& x) {
    if (x.part == attention::Part::side) return 1.1e6 + 131.0 * x.slot + 0.5 * rank;
    return x.part == attention::Part::data ? 3.0e6 + 1021.0 * x.origin : 7.5e5 + 3.0 * x.origin;
  };
  m.flops = [](int rank, const attention::Work& w) {
    double f = 0;
    for (const auto& sp : w.pairs)
      f += (sp.kind == attention::PairKind::full ? 4096.0 : 1331.5) *
           (1 + sp.qc + 2 * sp.kc + sp.qp + 3 * sp.kp);
    return f * 1.0e6 + rank;
  };
  m.flops_per_s = 3.1e12;
  if (variant)
    m.cost_flops = [](int rank, const attention::Work& w) {
      return 1.0e9 * (w.step + 1) + 0.37 * w.origin + rank;
    };
  m.same_node = [gpn](int a, int b) { return a / gpn == b / gpn; };
  m.intra = {1.0e-5, 2.0e11};
  m.inter = {2.0e-5, 2.5e10};
  if (variant) m.wait_copy = {3.0e-6, 7.0e9};
  m.message_bytes = [](int rank, const attention::Collective& c, attention::Field f) {
    return 1.0e6 * (1 + static_cast<int>(f)) + 17.0 * static_cast<double>(c.members.size()) +
           rank % 3;
  };
  m.collective_efficiency = 0.8;
  m.spans = true;
  return m;
}

TEST(ReplayScale, EventReplayEqualsTheStepByStepReplay) {
  for (const auto [world, gpn] : kOddWorlds) {
    const int64_t n = 97 * world + 5;
    for (auto balance :
         {attention::Balance::zigzag, attention::Balance::striped, attention::Balance::contiguous})
      for (const auto& [mask_name, mask] : odd_masks(n, true)) {
        const Layout layout(balance, n, world, 0);
        const PairTable pairs(layout, mask);
        for (const std::string& name : algos_for(world)) {
          const Algorithm algo = Algorithm::parse(name);
          const comm::Topology topo =
              attention::schedule_topology(algo, comm::Topology::declared(world, world / gpn));
          for (Pass pass : {Pass::forward, Pass::backward}) {
            const auto all = attention::make_schedules(topo, layout, pairs, algo, pass);
            for (bool variant : {false, true}) {
              const ReplayModel m = odd_model(gpn, variant);
              expect_same(replay(all, m), reference::replay(all, m),
                          name + " world " + std::to_string(world) + " gpn " + std::to_string(gpn) +
                              " " + std::string(attention::balance_name(balance)) + " " +
                              mask_name + (pass == Pass::forward ? " forward" : " backward") +
                              (variant ? " (wait copy, cost flops)" : ""));
            }
          }
        }
      }
  }
}

// Every algorithm the planner would cost on an odd world, and a few more sizes it would not pick.
std::vector<Algorithm> odd_algos(int world, int gpn) {
  std::vector<Algorithm> out = candidate_algos(world, gpn);
  for (const char* extra : {"double-ring:6", "double-ring:6:ring", "usp:6", "usp:12:ring"})
    out.push_back(Algorithm::parse(extra));
  return out;
}

TEST(ReplayScale, CostsEqualThePairByPairReplay) {
  const Hardware a800 = load_hardware("a800"), local = load_hardware("local");
  ASSERT_TRUE(local.tiles.enabled() && local.wait_copy.bandwidth_Bps > 0);
  for (const auto [world, gpn] : kOddWorlds)
    for (const Hardware* hw : {&a800, &local}) {
      const int64_t n = 211 * world + 7;
      for (auto balance : {attention::Balance::zigzag, attention::Balance::striped,
                           attention::Balance::contiguous})
        for (const auto& [mask_name, mask] : odd_masks(n, false)) {
          AttnProblem p;
          p.n = n;
          p.hq = 24;  // every Ulysses degree of 24 splits the heads
          p.hkv = 24;
          p.d = 64;
          p.world = world;
          p.gpus_per_node = gpn;
          p.balance = balance;
          p.mask = mask;
          for (const Algorithm& algo : odd_algos(world, gpn)) {
            try {
              validate_algo(algo, p);
            } catch (const core::Error&) {
              continue;
            }
            const std::string what = algo.name() + " world " + std::to_string(world) + " gpn " +
                                     std::to_string(gpn) + " " + hw->name + " " +
                                     std::string(attention::balance_name(balance)) + " " +
                                     mask_name;
            const AttentionCost fast = cost_attention(algo, p, *hw, 0.37);
            const AttentionCost ref = reference::cost_attention(algo, p, *hw, 0.37);
            expect_same(fast.forward, ref.forward, what + " forward");
            expect_same(fast.backward, ref.backward, what + " backward");
            expect_same(fast.partial_recompute, ref.partial_recompute, what + " recompute");
            EXPECT_TRUE(same(fast.recompute_fraction, ref.recompute_fraction)) << what;
            EXPECT_TRUE(same(fast.buffer_bytes_forward, ref.buffer_bytes_forward)) << what;
            EXPECT_TRUE(same(fast.buffer_bytes_backward, ref.buffer_bytes_backward)) << what;
            EXPECT_TRUE(same(fast.extra_activation_bytes, ref.extra_activation_bytes)) << what;
          }
        }
    }
}

// plan() costs one forward per forward_key and hands it to every algorithm of the key: each
// configuration's numbers equal the ones of its own algorithm's cost_attention (a grouping of
// algorithms whose forwards differ, e.g. two inner ring sizes, would show here), and a refused
// algorithm keeps its own reason.
TEST(ReplayScale, SharedForwardsEqualEachAlgorithmsOwn) {
  for (const auto [world, gpn] : kOddWorlds)
    for (const char* mask : {"causal", "window:333"}) {
      PlanOptions o;
      o.model = load_model("llama-7b");
      o.seq = 509 * world + 3;
      o.gpus = world;
      o.gpus_per_node = gpn;
      o.hw = load_hardware("a800");
      o.mask = MaskSpec::parse(mask, false, o.seq);
      o.algos = {};
      o.dps = {1};
      for (const Algorithm& a : odd_algos(world, gpn)) o.algos.push_back(a.name());
      const std::vector<Evaluation> evals = plan(o);
      const AttnProblem prob = attention_problem(o);
      std::map<std::string, AttentionCost> own;
      std::map<std::string, std::string> refused;
      for (const Evaluation& e : evals) {
        const Algorithm& a = e.config.algo;
        const std::string what = a.name() + " world " + std::to_string(world) + " gpn " +
                                 std::to_string(gpn) + " " + mask + " " +
                                 std::string(model::checkpoint_policy_name(e.config.checkpoint)) +
                                 " " + std::string(model::loss_mode_name(e.config.loss));
        SCOPED_TRACE(what);
        if (!own.count(a.name()) && !refused.count(a.name())) try {
            own[a.name()] = cost_attention(a, prob, o.hw, o.seq_selective_fraction);
          } catch (const core::Error& err) {
            refused[a.name()] = err.what();
          }
        if (refused.count(a.name())) {
          EXPECT_EQ(e.reason, refused[a.name()]);
          EXPECT_FALSE(e.feasible);
          continue;
        }
        const Evaluation want = evaluate(o, e.config, own[a.name()]);
        EXPECT_EQ(e.feasible, want.feasible);
        EXPECT_EQ(e.reason, want.reason);
        EXPECT_TRUE(same(e.step_seconds, want.step_seconds));
        EXPECT_TRUE(same(e.tokens_per_sec_per_gpu, want.tokens_per_sec_per_gpu));
        EXPECT_TRUE(same(e.mfu, want.mfu));
        EXPECT_TRUE(same(e.memory.total(), want.memory.total()));
        EXPECT_TRUE(same(e.comm_bytes_intra, want.comm_bytes_intra));
        EXPECT_TRUE(same(e.comm_bytes_inter, want.comm_bytes_inter));
      }
      EXPECT_GE(own.size(), 4u);  // ring, burst and double rings at least
    }
}

}  // namespace
}  // namespace longseq::plan
