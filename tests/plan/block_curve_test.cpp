// The attention block curve of a GPU profile (plan/hardware.hpp BlockCurve, issue "GPU II" item
// 6): interpolation, the profile format and its refusals, and what it does to a prediction (each
// kernel call at its block length's efficiency).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "longseq/attention/layout.hpp"
#include "longseq/core/error.hpp"
#include "longseq/plan/attention_cost.hpp"
#include "longseq/plan/hardware.hpp"

namespace longseq::plan {
namespace {

using attention::Balance;
using nlohmann::json;

BlockCurve curve(std::initializer_list<BlockCurve::Point> pts) {
  BlockCurve c;
  c.points = pts;
  c.source = "test";
  return c;
}

TEST(BlockCurve, InterpolatesInLog2AndHoldsTheEnds) {
  const BlockCurve c = curve({{1000, 0.1, 0.2}, {4000, 0.3, 0.6}, {16000, 0.5, 0.5}});
  EXPECT_DOUBLE_EQ(c.at(1000, true), 0.1);
  EXPECT_DOUBLE_EQ(c.at(4000, false), 0.6);
  // 2000 is halfway between 1000 and 4000 in log2.
  EXPECT_NEAR(c.at(2000, true), 0.2, 1e-12);
  EXPECT_NEAR(c.at(2000, false), 0.4, 1e-12);
  EXPECT_NEAR(c.at(8000, true), 0.4, 1e-12);
  // Outside the points: the end points' values, never an extrapolation.
  EXPECT_DOUBLE_EQ(c.at(1, true), 0.1);
  EXPECT_DOUBLE_EQ(c.at(999.5, false), 0.2);
  EXPECT_DOUBLE_EQ(c.at(1e9, true), 0.5);
  // One point: constant.
  const BlockCurve one = curve({{512, 0.25, 0.125}});
  EXPECT_DOUBLE_EQ(one.at(3, true), 0.25);
  EXPECT_DOUBLE_EQ(one.at(1e7, false), 0.125);
}

std::string profile(const json& curve_json) {
  json j = {{"gpus_per_node", 8},
            {"memory_bytes", 8e10},
            {"peak_flops", 1e15},
            {"dtype_bytes", 2},
            {"intra", {{"latency_s", 1e-6}, {"bandwidth_Bps", 2e11}}},
            {"inter", {{"latency_s", 5e-6}, {"node_bandwidth_Bps", 1e11}}}};
  if (!curve_json.is_null()) j["attention_curve"] = curve_json;
  return j.dump();
}

std::string error_of(const json& curve_json) {
  try {
    parse_hardware(profile(curve_json), "g.json");
  } catch (const core::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(BlockCurve, ProfileRoundTripsAndRefusesBadCurvesByName) {
  const json good = {{"source", "bench run"},
                     {"points",
                      {{{"tokens", 1024}, {"fwd", 0.3}, {"bwd", 0.25}},
                       {{"tokens", 3000}, {"fwd", 0.35}, {"bwd", 0.3}}}}};
  const Hardware hw = parse_hardware(profile(good), "g.json");
  ASSERT_TRUE(hw.attention_curve.enabled());
  ASSERT_EQ(hw.attention_curve.points.size(), 2u);
  EXPECT_DOUBLE_EQ(hw.attention_curve.points[1].tokens, 3000);
  EXPECT_EQ(hw.attention_curve.source, "bench run");
  const Hardware back = parse_hardware(hardware_to_json(hw), "again");
  EXPECT_EQ(hardware_to_json(back), hardware_to_json(hw));
  EXPECT_FALSE(parse_hardware(profile(nullptr), "g.json").attention_curve.enabled());

  auto bad = [&](const json& pts) { return error_of({{"points", pts}}); };
  EXPECT_NE(bad(json::array()).find("g.json attention_curve.points must be a non-empty array"),
            std::string::npos)
      << bad(json::array());
  const std::string order = bad({{{"tokens", 2048}, {"fwd", 0.3}, {"bwd", 0.3}},
                                 {{"tokens", 2048}, {"fwd", 0.3}, {"bwd", 0.3}}});
  EXPECT_NE(order.find("points[1].tokens 2048 must be larger than the previous point's 2048"),
            std::string::npos)
      << order;
  const std::string eff = bad({{{"tokens", 64}, {"fwd", 0.0}, {"bwd", 0.3}}});
  EXPECT_NE(eff.find("points[0] efficiencies fwd 0 bwd 0.3 must be in (0, 1.5]"), std::string::npos)
      << eff;
  const std::string tokens = bad({{{"tokens", 0.5}, {"fwd", 0.2}, {"bwd", 0.3}}});
  EXPECT_NE(tokens.find("points[0].tokens 0.5 must be >= 1"), std::string::npos) << tokens;
  const std::string shape = bad({{{"tokens", 64}, {"fwd", 0.2}}});
  EXPECT_NE(shape.find("points[0] must be {tokens, fwd, bwd}"), std::string::npos) << shape;
  const std::string type = bad({{{"tokens", "1K"}, {"fwd", 0.2}, {"bwd", 0.1}}});
  EXPECT_NE(type.find("points[0].tokens must be a number, got \"1K\""), std::string::npos) << type;
  const std::string key =
      error_of({{"points", {{{"tokens", 1}, {"fwd", 1}, {"bwd", 1}}}}, {"unit", "TFLOP/s"}});
  EXPECT_NE(key.find("attention_curve: unknown key 'unit'"), std::string::npos) << key;
}

Hardware gpu_like() {
  Hardware hw;
  hw.name = "test-gpu";
  hw.gpus_per_node = 8;
  hw.memory_bytes = 8e10;
  hw.peak_flops = 1e15;
  hw.dtype_bytes = 2;
  hw.intra = hw.inter = {1e-5, 1e11};
  hw.inter_node_bandwidth_Bps = 8e11;
  hw.corrections.attention_fwd_efficiency = 0.4;
  hw.corrections.attention_bwd_efficiency = 0.3;
  return hw;
}

AttnProblem problem(int world) {
  AttnProblem p;
  p.n = 6000;  // not a power of two: chunks of odd lengths
  p.hq = 6;
  p.hkv = 2;
  p.d = 64;
  p.world = world;
  p.gpus_per_node = 8;
  p.balance = Balance::zigzag;
  p.mask.causal = true;
  return p;
}

TEST(BlockCurve, EachKernelCallRunsAtItsBlockLengthsEfficiency) {
  const auto ring = attention::Algorithm::parse("ring");
  for (int world : {3, 6}) {
    const AttnProblem p = problem(world);
    Hardware flat = gpu_like();
    const AttentionCost base = cost_attention(ring, p, flat);
    // A curve equal to the constants everywhere predicts the same times.
    Hardware same = gpu_like();
    same.attention_curve = curve({{100, 0.4, 0.3}, {100000, 0.4, 0.3}});
    const AttentionCost c1 = cost_attention(ring, p, same);
    EXPECT_NEAR(c1.forward.compute_s, base.forward.compute_s, 1e-12 * base.forward.compute_s);
    EXPECT_NEAR(c1.backward.compute_s, base.backward.compute_s, 1e-12 * base.backward.compute_s);
    EXPECT_DOUBLE_EQ(c1.forward.flops, base.forward.flops);
    // Half the efficiency at every length: compute takes exactly twice as long, FLOPs unchanged.
    Hardware half = gpu_like();
    half.attention_curve = curve({{100, 0.2, 0.15}, {100000, 0.2, 0.15}});
    const AttentionCost c2 = cost_attention(ring, p, half);
    EXPECT_NEAR(c2.forward.compute_s, 2 * base.forward.compute_s, 1e-9 * base.forward.compute_s);
    EXPECT_NEAR(c2.backward.compute_s, 2 * base.backward.compute_s, 1e-9 * base.backward.compute_s);
    EXPECT_DOUBLE_EQ(c2.forward.flops, base.forward.flops);
  }
  // The zigzag chunks of world W are n / 2W tokens: a curve that drops below 1000 tokens slows
  // world 6 (chunks of 500) and leaves world 3 (chunks of 1000) as the constants say.
  Hardware steep = gpu_like();
  steep.attention_curve = curve({{500, 0.1, 0.075}, {1000, 0.4, 0.3}});
  for (int world : {3, 6}) {
    const AttnProblem p = problem(world);
    const double flat = cost_attention(ring, p, gpu_like()).forward.compute_s;
    const double s = cost_attention(ring, p, steep).forward.compute_s;
    if (world == 3)
      EXPECT_NEAR(s, flat, 1e-12 * flat);
    else
      EXPECT_NEAR(s, 4 * flat, 1e-9 * flat);
  }
}

TEST(BlockCurve, TheShippedH200ProfileCarriesAMeasuredCurve) {
  const Hardware hw = load_hardware("h200-ib");
  ASSERT_TRUE(hw.attention_curve.enabled());
  EXPECT_GE(hw.attention_curve.points.size(), 3u);
  EXPECT_NE(hw.attention_curve.source.find("H200"), std::string::npos);
  for (const auto& pt : hw.attention_curve.points) {
    EXPECT_GT(pt.fwd, 0.0);
    EXPECT_LE(pt.fwd, 1.0);
  }
}

}  // namespace
}  // namespace longseq::plan
