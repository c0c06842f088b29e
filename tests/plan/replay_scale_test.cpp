// The planner at cluster scale (issue 31 item 2) computes what it computed before: the batched
// schedules equal the per-rank ones, and the rankings and predicted numbers equal, bit for bit, the
// ones the per-rank schedules and the step-scanning replay gave (tests/plan/data/
// planner_golden.json, written by scripts/plan_golden.py from the planner before the change).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "longseq/attention/schedule.hpp"
#include "longseq/plan/planner.hpp"

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
                x.grad_slot == y.grad_slot && x.pairs.size() == y.pairs.size())
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
                  (*pair)[i].members == other[i].members && (*pair)[i].to == other[i].to &&
                  (*pair)[i].from == other[i].from && (*pair)[i].tag == other[i].tag &&
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

TEST(ReplayScale, RankingsAndNumbersEqualThePerRankReplay) {
  std::ifstream in(std::string(LONGSEQ_TESTS_DIR) + "/plan/data/planner_golden.json");
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

}  // namespace
}  // namespace longseq::plan
