// Planner, simulator, profiles and CLI-facing errors.
#include "longseq/plan/planner.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "longseq/core/error.hpp"
#include "longseq/plan/simulator.hpp"

namespace longseq::plan {
namespace {

PlanOptions options(const std::string& model, const std::string& seq, int gpus, int gpn,
                    const std::string& hw) {
  PlanOptions o;
  o.model = load_model(model);
  o.seq = parse_count(seq, "--seq");
  o.gpus = gpus;
  o.gpus_per_node = gpn;
  o.hw = load_hardware(hw);
  o.mask.causal = true;
  return o;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Hardware, EveryShippedProfileLoads) {
  const auto names = hardware_names();
  for (const char* want : {"a800", "h100-ib", "a100-ib", "a100-eth8", "a100-eth16"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const auto& n : names) {
    const Hardware hw = load_hardware(n);
    EXPECT_GT(hw.peak_flops, 0) << n;
    EXPECT_GE(hw.intra.bandwidth_Bps, hw.inter.bandwidth_Bps) << n;  // local: one host, equal
    // Round trip.
    const Hardware back = parse_hardware(hardware_to_json(hw), "round trip");
    EXPECT_DOUBLE_EQ(back.inter.bandwidth_Bps, hw.inter.bandwidth_Bps) << n;
    EXPECT_DOUBLE_EQ(back.corrections.attention_bwd_efficiency,
                     hw.corrections.attention_bwd_efficiency);
  }
  const Hardware a800 = load_hardware("a800");
  EXPECT_DOUBLE_EQ(a800.inter.bandwidth_Bps, 25e9);  // 8 x 200 Gb/s over 8 GPUs
  EXPECT_EQ(a800.gpus_per_node, 8);
}

TEST(Hardware, ErrorsNameTheValue) {
  EXPECT_NE(error_of([] { load_hardware("a900"); }).find("--hardware 'a900'"), std::string::npos);
  EXPECT_NE(error_of([] { load_hardware("a900"); }).find("a800"), std::string::npos);
  EXPECT_NE(
      error_of([] { parse_hardware("{\"gpus_per_node\": 8}", "x.json"); }).find("memory_bytes"),
      std::string::npos);
}

TEST(PlanModel, PresetsCountsAndErrors) {
  const NamedModel m7 = load_model("llama-7b");
  EXPECT_EQ(m7.name, "llama-7b");
  EXPECT_NEAR(static_cast<double>(m7.config.parameters()), 6.74e9, 0.01e9);  // LLaMA-2 7B
  EXPECT_FALSE(m7.config.tied_embeddings);
  EXPECT_EQ(parse_count("1M", "--seq"), 1048576);
  EXPECT_EQ(parse_count("32k", "--seq"), 32768);
  EXPECT_EQ(parse_count("65536", "--seq"), 65536);
  EXPECT_NE(error_of([] { parse_count("1.5M", "--seq"); }).find("--seq '1.5M'"), std::string::npos);
  EXPECT_NE(error_of([] { load_model("llama-99b"); }).find("--model 'llama-99b'"),
            std::string::npos);
}

// A --model file is read into the trainer's own configuration: its defaults (kv_heads = heads,
// head_dim = hidden / heads, untied), its name, and the trainer's validation of the shapes.
TEST(PlanModel, JsonFileReadsIntoTheTrainersConfig) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    return path;
  };
  const NamedModel a = load_model(write(
      "m_a.json", R"({"layers": 3, "hidden": 96, "heads": 6, "intermediate": 200, "vocab": 77})"));
  EXPECT_EQ(a.config.kv_heads, 6);
  EXPECT_EQ(a.config.head_dim, 16);
  EXPECT_FALSE(a.config.tied_embeddings);
  EXPECT_EQ(a.name.substr(a.name.size() - 8), "m_a.json");
  const int64_t per_layer = 2 * 96 + 4 * 96 * 96 + 3 * 96 * 200;
  EXPECT_EQ(a.config.layer_parameters(), per_layer);
  EXPECT_EQ(a.config.parameters(), 3 * per_layer + 2 * 77 * 96 + 96);
  const NamedModel b = load_model(
      write("m_b.json", R"({"name": "gqa", "layers": 1, "hidden": 64, "heads": 8, "kv_heads": 2,
                     "intermediate": 100, "vocab": 50, "tied_embeddings": true})"));
  EXPECT_EQ(b.name, "gqa");
  EXPECT_EQ(b.config.parameters(), b.config.layer_parameters() + 50 * 64 + 64);
  // head_dim given but hidden != heads * head_dim: the trainer refuses it, and so does plan.
  const std::string e = error_of([&] {
    load_model(write("m_c.json", R"({"layers": 1, "hidden": 64, "heads": 8, "head_dim": 16,
                                     "intermediate": 100, "vocab": 50})"));
  });
  EXPECT_NE(e.find("[model] hidden 64 != heads 8 * head_dim 16"), std::string::npos) << e;
  EXPECT_NE(error_of([&] {
              load_model(write("m_d.json", R"({"layers": 1, "hidden": 64, "heads": 8,
                                     "intermediate": 100, "vocab": 50, "tied_embeddings": 1})"));
            }).find("'tied_embeddings' must be true or false"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              load_model(write("m_e.json", R"({"layers": 1, "hidden": 64, "heads": 8,
                                     "vocab": 50})"));
            }).find("missing or non-integer field 'intermediate'"),
            std::string::npos);
}

TEST(Planner, BadInputNamesTheFlags) {
  PlanOptions o = options("llama-7b", "1M", 30, 8, "a800");
  const std::string e = error_of([&] { o.validate(); });
  EXPECT_NE(e.find("--gpus 30"), std::string::npos) << e;
  EXPECT_NE(e.find("--gpus-per-node 8"), std::string::npos) << e;
  o = options("llama-7b", "1M", 32, 16, "a800");
  EXPECT_NE(error_of([&] { o.validate(); }).find("--gpus-per-node 16"), std::string::npos);
  EXPECT_NE(error_of([] { attention::Algorithm::parse("startrail:x"); }).find("startrail:x"),
            std::string::npos);
}

TEST(Planner, RanksFeasibleFirstWithReasons) {
  PlanOptions o = options("llama-14b", "256K", 32, 8, "a800");
  const auto evals = plan(o);
  ASSERT_FALSE(evals.empty());
  ASSERT_TRUE(evals.front().feasible);
  bool seen_infeasible = false, ulysses_reason = false;
  double last = 0;
  for (const auto& e : evals) {
    if (e.feasible) {
      EXPECT_FALSE(seen_infeasible);
      EXPECT_GE(e.key(), last);  // seconds per sequence: dp sequences per step, no global batch
      last = e.key();
      EXPECT_EQ(e.config.split.dp * e.config.split.cp, 32);
      EXPECT_EQ(e.config.split.grad_accum, 1);
      EXPECT_GT(e.mfu, 0.05);
      EXPECT_LT(e.mfu, 1.0);
      EXPECT_NEAR(e.tokens_per_sec_per_gpu, e.config.split.dp * 262144.0 / (e.step_seconds * 32),
                  1e-9 * e.tokens_per_sec_per_gpu);
    } else {
      seen_infeasible = true;
      EXPECT_FALSE(e.reason.empty());
      if (e.config.algo.family == attention::Algorithm::Family::ulysses)
        ulysses_reason = e.reason.find("heads 40") != std::string::npos;
    }
  }
  EXPECT_TRUE(ulysses_reason);  // 40 heads on 32 GPUs (BurstEngine §4.3)
  // JSON shape.
  const auto j = nlohmann::json::parse(plan_json(evals));
  ASSERT_EQ(j["configs"].size(), evals.size());
  for (const char* k :
       {"algo", "inner_ring", "team_c", "ulysses", "checkpoint", "loss", "feasible", "reason",
        "step_seconds", "tokens_per_sec_per_gpu", "mfu", "peak_memory_bytes", "comm_bytes"})
    EXPECT_TRUE(j["configs"][0].contains(k)) << k;
  EXPECT_TRUE(j["configs"][0]["comm_bytes"].contains("inter"));
}

TEST(Planner, MemoryLimitAndCheckpointTradeOff) {
  PlanOptions o = options("llama-7b", "1M", 32, 8, "a800");
  o.algos = {"burst"};
  o.dps = {1};
  const auto evals = plan(o);
  auto find = [&](model::CheckpointPolicy c, model::LossMode l) {
    for (const auto& e : evals)
      if (e.config.checkpoint == c && e.config.loss == l) return e;
    ADD_FAILURE();
    return Evaluation{};
  };
  const auto none = find(model::CheckpointPolicy::none, model::LossMode::fused),
             full = find(model::CheckpointPolicy::full, model::LossMode::fused),
             sel = find(model::CheckpointPolicy::selective_pp, model::LossMode::fused),
             seq = find(model::CheckpointPolicy::seq_selective, model::LossMode::fused),
             unfused = find(model::CheckpointPolicy::full, model::LossMode::unfused);
  // Memory: none > selective++ > seq-selective > full; time: the reverse.
  EXPECT_GT(none.memory.total(), sel.memory.total());
  EXPECT_GT(sel.memory.total(), seq.memory.total());
  EXPECT_GT(seq.memory.total(), full.memory.total());
  EXPECT_GT(full.step_seconds, seq.step_seconds);
  EXPECT_GT(seq.step_seconds, sel.step_seconds);
  EXPECT_GT(unfused.memory.total(), full.memory.total());
  EXPECT_FALSE(none.feasible);  // 32 layers of full activations at 32K tokens per GPU
  EXPECT_NE(none.reason.find("exceeds the limit 80.00 GiB"), std::string::npos) << none.reason;
  o.memory_limit_bytes = 1e12;
  EXPECT_TRUE(plan(o).front().config.checkpoint == model::CheckpointPolicy::none);
}

// Replay semantics on a hand-computable case: 4 ranks, flat burst forward, full mask.
TEST(Simulator, OverlapAndCommBoundLimits) {
  AttnProblem p;
  p.n = 64;
  p.hq = p.hkv = 1;
  p.d = 8;
  p.world = 4;
  p.gpus_per_node = 4;
  const ScheduleSet set =
      make_schedules(attention::Algorithm::parse("burst"), p, attention::Pass::forward);
  ReplayModel m;
  m.same_node = [](int, int) { return true; };
  m.intra = {0.0, 1.0};
  m.inter = m.intra;
  m.flops_per_s = 1.0;
  // Compute-bound: each step computes 10 s, transfers take 1 s -> 4 steps of compute, hidden comm.
  m.flops = [](int, const attention::Work&) { return 10.0; };
  m.bytes = [](int, const attention::Xfer&) { return 1.0; };
  Timeline t = replay(set.ranks, m);
  EXPECT_DOUBLE_EQ(t.makespan, 40.0);
  EXPECT_EQ(t.ranks[0].messages_intra, 3);
  // Comm-bound: free compute, 5 s per hop -> 3 hops in sequence.
  m.flops = [](int, const attention::Work&) { return 0.0; };
  m.bytes = [](int, const attention::Xfer&) { return 5.0; };
  t = replay(set.ranks, m);
  EXPECT_DOUBLE_EQ(t.makespan, 15.0);
  const std::string svg = timeline_svg(t, "test");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("rank 3"), std::string::npos);
}

}  // namespace
}  // namespace longseq::plan
