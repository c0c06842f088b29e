// RoPE scaling (model/rope_scaling.hpp) against an fp64 reference written here from the formulas
// of Hugging Face's modeling_rope_utils.py (one function per rope_type, transcribed step by step,
// sharing no code with the library), and the scaled RoPE applied at *global* positions under every
// balance layout, odd lengths and odd worlds included.
//
// Tolerances: frequencies 1e-12 relative (both sides fp64, different operation order); rotated
// values (fp32 table, cos/sin rounded to fp32, O(1) inputs) 2e-6 abs + 2e-6 rel, the same bound as
// the plain RoPE test in tests/kernels/rope_test.cpp scaled by the attention factor (<= ~1.3).
#include "longseq/model/rope_scaling.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <vector>

#include "longseq/attention/layout.hpp"
#include "longseq/core/error.hpp"
#include "longseq/model/config.hpp"
#include "model_test_util.hpp"

namespace {

namespace lm = longseq::model;
namespace la = longseq::attention;
namespace lt = longseq::test;
using nlohmann::json;

// ---- the reference: transformers' formulas, in fp64 ---------------------------------------------

std::vector<double> ref_default(double base, int64_t dim) {
  std::vector<double> inv;
  for (int64_t k = 0; k < dim; k += 2) inv.push_back(1.0 / std::pow(base, double(k) / double(dim)));
  return inv;
}

struct RefFreq {
  std::vector<double> inv;
  double attn = 1.0;
};

// _compute_*_parameters of modeling_rope_utils.py for config `c` (HF config.json keys).
RefFreq ref_frequencies(const json& c, int64_t seq_len) {
  const double base = c.at("rope_theta").get<double>();
  const int64_t dim = c.at("head_dim").get<int64_t>();
  const json rs = c.value("rope_scaling", json());
  RefFreq r;
  if (rs.is_null()) {
    r.inv = ref_default(base, dim);
    return r;
  }
  const std::string type =
      rs.contains("rope_type") ? rs["rope_type"].get<std::string>() : rs["type"].get<std::string>();
  const double factor = rs.value("factor", 1.0);
  const double mpe = c.value("max_position_embeddings", 2048.0);
  if (type == "default") {
    r.inv = ref_default(base, dim);
  } else if (type == "linear") {
    r.inv = ref_default(base, dim);
    for (double& v : r.inv) v = v / factor;
  } else if (type == "dynamic") {
    const double sl = (seq_len > 0 && double(seq_len) > mpe) ? double(seq_len) : mpe;
    const double b =
        base * std::pow((factor * sl / mpe) - (factor - 1), double(dim) / double(dim - 2));
    r.inv = ref_default(b, dim);
  } else if (type == "yarn") {
    const double orig = rs.value("original_max_position_embeddings", mpe);
    r.attn = rs.contains("attention_factor") ? rs["attention_factor"].get<double>()
                                             : (factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0);
    const double beta_fast = rs.value("beta_fast", 32.0), beta_slow = rs.value("beta_slow", 1.0);
    auto find_correction_dim = [&](double num_rotations) {
      return (double(dim) * std::log(orig / (num_rotations * 2 * std::numbers::pi))) /
             (2 * std::log(base));
    };
    double low = std::floor(find_correction_dim(beta_fast));
    double high = std::ceil(find_correction_dim(beta_slow));
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high) high += 0.001;
    for (int64_t k = 0, i = 0; k < dim; k += 2, ++i) {
      const double pos_freq = std::pow(base, double(k) / double(dim));
      const double extrapolation = 1.0 / pos_freq, interpolation = 1.0 / (factor * pos_freq);
      double ramp = (double(i) - low) / (high - low);
      ramp = std::min(std::max(ramp, 0.0), 1.0);
      const double extrapolation_factor = 1 - ramp;
      r.inv.push_back(interpolation * (1 - extrapolation_factor) +
                      extrapolation * extrapolation_factor);
    }
  } else if (type == "llama3") {
    const double low_ff = rs.at("low_freq_factor").get<double>();
    const double high_ff = rs.at("high_freq_factor").get<double>();
    const double old_ctx = rs.at("original_max_position_embeddings").get<double>();
    const double low_wl = old_ctx / low_ff, high_wl = old_ctx / high_ff;
    for (double inv : ref_default(base, dim)) {
      const double wavelen = 2 * std::numbers::pi / inv;
      double v = wavelen > low_wl ? inv / factor : inv;
      const double smooth = (old_ctx / wavelen - low_ff) / (high_ff - low_ff);
      const bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
      if (medium) v = (1 - smooth) * v / factor + smooth * v;
      r.inv.push_back(v);
    }
  } else {
    ADD_FAILURE() << "reference has no rope_type " << type;
  }
  return r;
}

// A model config with the HF config.json keys the reference reads.
lm::LlamaConfig model_of(const json& c) {
  lm::LlamaConfig m;
  m.head_dim = c.at("head_dim").get<int64_t>();
  m.heads = 2;
  m.kv_heads = 1;
  m.hidden = m.heads * m.head_dim;
  m.rope_theta = c.at("rope_theta").get<double>();
  m.max_position_embeddings = c.value("max_position_embeddings", int64_t{2048});
  m.rope_scaling = lm::RopeScaling::from_json(c.value("rope_scaling", json()));
  m.validate();
  return m;
}

// Configs covering every type, default and explicit optional keys, small and LLaMA-size heads.
std::vector<json> cases() {
  return {
      {{"rope_theta", 10000.0}, {"head_dim", 64}, {"rope_scaling", nullptr}},
      {{"rope_theta", 10000.0},
       {"head_dim", 64},
       {"rope_scaling", {{"rope_type", "linear"}, {"factor", 4.0}}}},
      {{"rope_theta", 10000.0},
       {"head_dim", 6},
       {"rope_scaling", {{"type", "linear"}, {"factor", 2.5}}}},
      {{"rope_theta", 10000.0},
       {"head_dim", 64},
       {"max_position_embeddings", 2048},
       {"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 8.0}}}},
      {{"rope_theta", 500000.0},
       {"head_dim", 10},
       {"max_position_embeddings", 100},
       {"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}},
      {{"rope_theta", 10000.0},
       {"head_dim", 64},
       {"max_position_embeddings", 4096},
       {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 16.0}}}},
      {{"rope_theta", 1000000.0},
       {"head_dim", 128},
       {"max_position_embeddings", 131072},
       {"rope_scaling",
        {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}}},
      {{"rope_theta", 10000.0},
       {"head_dim", 32},
       {"max_position_embeddings", 512},
       {"rope_scaling",
        {{"rope_type", "yarn"},
         {"factor", 3.0},
         {"beta_fast", 16.0},
         {"beta_slow", 2.0},
         {"attention_factor", 1.25}}}},
      // A short original context: the correction range collapses (low == high guard).
      {{"rope_theta", 10000.0},
       {"head_dim", 8},
       {"max_position_embeddings", 64},
       {"rope_scaling",
        {{"rope_type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 8}}}},
      // The smallest head (one frequency) and an odd base.
      {{"rope_theta", 3.5},
       {"head_dim", 2},
       {"max_position_embeddings", 16},
       {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 5.0}}}},
      {{"rope_theta", 123.0},
       {"head_dim", 2},
       {"rope_scaling", {{"type", "linear"}, {"factor", 1.0}}}},
      // beta_fast below beta_slow (transformers warns and computes): an empty ramp.
      {{"rope_theta", 10000.0},
       {"head_dim", 12},
       {"max_position_embeddings", 300},
       {"rope_scaling",
        {{"type", "yarn"}, {"factor", 7.5}, {"beta_fast", 0.5}, {"beta_slow", 4.0}}}},
      // LLaMA-3.1-8B.
      {{"rope_theta", 500000.0},
       {"head_dim", 128},
       {"max_position_embeddings", 131072},
       {"rope_scaling",
        {{"rope_type", "llama3"},
         {"factor", 8.0},
         {"low_freq_factor", 1.0},
         {"high_freq_factor", 4.0},
         {"original_max_position_embeddings", 8192}}}},
      {{"rope_theta", 10000.0},
       {"head_dim", 16},
       {"max_position_embeddings", 1024},
       {"rope_scaling",
        {{"rope_type", "llama3"},
         {"factor", 4.0},
         {"low_freq_factor", 2.0},
         {"high_freq_factor", 8.0},
         {"original_max_position_embeddings", 256}}}},
  };
}

TEST(RopeScaling, FrequenciesMatchTheFormulas) {
  for (const json& c : cases())
    for (int64_t seq : {int64_t{0}, int64_t{37}, int64_t{100}, int64_t{2049}, int64_t{20000}}) {
      const lm::LlamaConfig m = model_of(c);
      const lm::RopeFrequencies f = m.rope(seq);
      const RefFreq r = ref_frequencies(c, seq);
      ASSERT_EQ(f.inv_freq.size(), r.inv.size()) << c.dump();
      for (size_t i = 0; i < r.inv.size(); ++i)
        EXPECT_NEAR(f.inv_freq[i], r.inv[i], 1e-12 * r.inv[i])
            << c.dump() << " seq " << seq << " i " << i;
      EXPECT_NEAR(f.attention_factor, r.attn, 1e-15) << c.dump();
    }
}

// Spot values that do not depend on transcribing the code: linear divides every frequency; yarn
// keeps the highest frequency and divides the lowest by the factor; llama3 keeps inv_freq[0]
// (wavelength 2 pi < L / high) and divides the last; dynamic is plain RoPE up to M.
TEST(RopeScaling, LimitsOfEachType) {
  const auto plain = lm::rope_frequencies({}, 10000.0, 64, 0, 0);
  auto with = [](const json& rs, int64_t mpe, int64_t seq, double theta = 10000.0) {
    return lm::rope_frequencies(lm::RopeScaling::from_json(rs), theta, 64, mpe, seq);
  };
  const auto lin = with({{"rope_type", "linear"}, {"factor", 4.0}}, 0, 0);
  for (size_t i = 0; i < plain.inv_freq.size(); ++i)
    EXPECT_DOUBLE_EQ(lin.inv_freq[i], plain.inv_freq[i] / 4);
  const auto yarn = with({{"rope_type", "yarn"}, {"factor", 16.0}}, 2048, 0);
  EXPECT_DOUBLE_EQ(yarn.inv_freq.front(), plain.inv_freq.front());
  EXPECT_DOUBLE_EQ(yarn.inv_freq.back(), plain.inv_freq.back() / 16);
  EXPECT_NEAR(yarn.attention_factor, 1.0 + 0.1 * std::log(16.0), 1e-15);
  const auto l3 = with({{"rope_type", "llama3"},
                        {"factor", 8.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}},
                       131072, 0, 500000.0);
  const auto plain5 = lm::rope_frequencies({}, 500000.0, 64, 0, 0);
  EXPECT_DOUBLE_EQ(l3.inv_freq.front(), plain5.inv_freq.front());
  EXPECT_DOUBLE_EQ(l3.inv_freq.back(), plain5.inv_freq.back() / 8);
  const json dyn = {{"rope_type", "dynamic"}, {"factor", 4.0}};
  EXPECT_EQ(with(dyn, 2048, 2048).inv_freq, plain.inv_freq);
  EXPECT_EQ(with(dyn, 2048, 100).inv_freq, plain.inv_freq);
  EXPECT_LT(with(dyn, 2048, 4096).inv_freq.back(), plain.inv_freq.back());
}

// The scaled table at global positions: every rank of every layout rotates its shard exactly as
// the reference rotates the whole sequence (HF: q * cos * af + rotate_half(q) * sin * af).
TEST(RopeScaling, ScaledRopeAtGlobalPositionsUnderEveryLayout) {
  const int64_t h = 3;
  for (const json& c : cases()) {
    const lm::LlamaConfig m = model_of(c);
    const int64_t d = m.head_dim;
    for (const char* bal : {"contiguous", "zigzag", "striped", "block-striped"})
      for (int world : {1, 3, 4, 5})
        for (int64_t n : {int64_t{37}, int64_t{60}}) {
          // block-striped: blocks of B tokens cut into P runs (B a multiple of P dividing n).
          const bool blocks = std::string(bal) == "block-striped";
          if (blocks && n % 60 != 0) continue;
          const int64_t block = blocks ? (world == 4 ? 12 : 2 * world * (world == 1 ? 3 : 1)) : 0;
          const la::Layout layout(la::parse_balance(bal), n, world, block);
          // Positions far out too: the sequence is placed at offset 5000 (a later window).
          const int64_t offset = 5000;
          const RefFreq r = ref_frequencies(c, n + offset);
          const auto x = lt::normal_f(static_cast<size_t>(n * h * d), 17);
          std::vector<double> want(x.size());
          for (int64_t t = 0; t < n; ++t)
            for (int64_t hh = 0; hh < h; ++hh)
              for (int64_t i = 0; i < d / 2; ++i) {
                const double a = double(t + offset) * r.inv[i];
                const int64_t b = (t * h + hh) * d;
                const double x0 = x[b + i], x1 = x[b + i + d / 2];
                want[b + i] = (x0 * std::cos(a) - x1 * std::sin(a)) * r.attn;
                want[b + i + d / 2] = (x1 * std::cos(a) + x0 * std::sin(a)) * r.attn;
              }
          std::vector<float> got(x.size(), 0.0f);
          for (int rank = 0; rank < world; ++rank) {
            std::vector<int64_t> pos = layout.positions(rank);
            const int64_t l = layout.local_len();
            std::vector<float> local(static_cast<size_t>(l * h * d));
            layout.shard(x.data(), h * d, rank, local.data());
            for (int64_t& p : pos)
              if (p >= 0) p += offset;
            const auto table = lm::rope_table(pos.data(), l, m.rope(n + offset));
            table.forward(local.data(), h, 2);
            for (int64_t& p : pos)
              if (p >= 0) p -= offset;
            layout.unshard(local.data(), h * d, rank, got.data());
          }
          lt::expect_close(got, want, 2e-6, 2e-6,
                           std::string(bal) + " world " + std::to_string(world) + " " + c.dump());
          // The backward is the transpose: <R x, y> = <x, R^T y>.
          const auto y = lt::normal_f(static_cast<size_t>(n * h * d), 18);
          std::vector<float> ry(y.size(), 0.0f);
          for (int rank = 0; rank < world; ++rank) {
            std::vector<int64_t> pos = layout.positions(rank);
            const int64_t l = layout.local_len();
            std::vector<float> local(static_cast<size_t>(l * h * d));
            layout.shard(y.data(), h * d, rank, local.data());
            for (int64_t& p : pos)
              if (p >= 0) p += offset;
            lm::rope_table(pos.data(), l, m.rope(n + offset)).backward(local.data(), h, 1);
            layout.unshard(local.data(), h * d, rank, ry.data());
          }
          double lhs = 0, rhs = 0;
          for (size_t i = 0; i < y.size(); ++i) {
            lhs += want[i] * y[i];
            rhs += double(x[i]) * ry[i];
          }
          EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::fabs(lhs))) << bal << " " << c.dump();
        }
  }
}

TEST(RopeScaling, JsonRoundTripKeepsHuggingFaceKeys) {
  for (const json& c : cases()) {
    const json rs = c.value("rope_scaling", json());
    const lm::RopeScaling s = lm::RopeScaling::from_json(rs);
    const json back = s.to_json();
    if (rs.is_null()) {
      EXPECT_TRUE(back.is_null());
      continue;
    }
    for (auto it = rs.begin(); it != rs.end(); ++it) {
      ASSERT_TRUE(back.contains(it.key())) << it.key() << " lost: " << back.dump();
      if (it.value().is_number())
        EXPECT_DOUBLE_EQ(back[it.key()].get<double>(), it.value().get<double>()) << it.key();
      else
        EXPECT_EQ(back[it.key()], it.value()) << it.key();
    }
    EXPECT_EQ(back.size(), rs.size()) << back.dump();
  }
  EXPECT_FALSE(lm::RopeScaling::from_json({{"rope_type", "default"}}).enabled());
}

TEST(RopeScaling, RefusesWhatItCannotHonour) {
  auto refusal = [](const json& rs, int64_t head_dim = 64, int64_t mpe = 2048) -> std::string {
    try {
      lm::RopeScaling s = lm::RopeScaling::from_json(rs);
      s.validate(head_dim, mpe);
    } catch (const longseq::core::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(refusal({{"rope_type", "longrope"}, {"factor", 2.0}}).find("longrope"),
            std::string::npos);
  EXPECT_NE(refusal({{"factor", 2.0}}).find("neither rope_type nor type"), std::string::npos);
  EXPECT_NE(refusal({{"rope_type", "linear"}}).find("needs a factor"), std::string::npos);
  EXPECT_NE(refusal({{"rope_type", "linear"}, {"factor", 0.5}}).find("0.5"), std::string::npos);
  EXPECT_NE(refusal({{"rope_type", "linear"}, {"factor", "2"}}).find("factor"), std::string::npos);
  EXPECT_NE(
      refusal({{"rope_type", "llama3"}, {"factor", 8.0}}).find("original_max_position_embeddings"),
      std::string::npos);
  EXPECT_NE(refusal({{"rope_type", "llama3"},
                     {"factor", 8.0},
                     {"low_freq_factor", 4.0},
                     {"high_freq_factor", 1.0},
                     {"original_max_position_embeddings", 8192}})
                .find("low_freq_factor < high_freq_factor"),
            std::string::npos);
  EXPECT_NE(refusal({{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale", 1.0}}).find("mscale"),
            std::string::npos);
  EXPECT_NE(refusal({{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", -1.0}})
                .find("attention_factor"),
            std::string::npos);
  EXPECT_NE(
      refusal({{"rope_type", "dynamic"}, {"factor", 4.0}}, 64, 0).find("max_position_embeddings"),
      std::string::npos);
  EXPECT_NE(refusal({{"rope_type", "dynamic"}, {"factor", 4.0}}, 2, 2048).find("head_dim"),
            std::string::npos);
  EXPECT_EQ(
      refusal({{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 512}},
              64, 0),
      "");
}

}  // namespace
