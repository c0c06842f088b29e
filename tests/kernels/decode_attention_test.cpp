// kernels/cpu decode attention against its fp64 specification (kernels/ref/decode_attention.hpp),
// and the specification against the one-query-row case of ref::attention_forward.
//
// Legend: n cached tokens, Hq query heads, Hkv kv heads, D head dim; q [Hq, D], k/v [n, Hkv, D],
// pos [n], o [Hq, D], lse [Hq]. A shard holds every P-th position of the sequence (round-robin
// decode placement), so the cases use strided positions as well as contiguous ones.
//
// Tolerances (design.md §9, |x - ref| <= atol + rtol * |ref|), fp32 kernel vs fp64 reference on
// the same (fp32) inputs, inputs N(0, 1), scale 1/sqrt(D):
//   o     atol 1e-6, rtol 1e-6   q.k is summed in fp32 over D <= 64 terms, the softmax and P.V in
//                                fp64, o rounded to fp32 (|o| <~ 3); measured at most 1.1e-7
//   lse   atol 1e-6, rtol 1e-6   the same score error, lse rounded to fp32 (|lse| <~ 10); measured
//                                at most 4e-8
// Heads that see no key: o exactly 0 and lse exactly -inf in both. Ref vs attention_forward:
// 1e-12 (both fp64). Thread counts 1, 2 and 3 must give identical bits.
#include "longseq/kernels/cpu/decode_attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/kernels/ref/attention.hpp"
#include "longseq/kernels/ref/decode_attention.hpp"

namespace {

namespace kc = longseq::kernels::cpu;
namespace kr = longseq::kernels::ref;
namespace core = longseq::core;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  std::string name;
  kr::DecodeDims dims;
  int64_t start = 0, stride = 1;  // cached positions start, start + stride, ...
  int64_t qpos = 0, window = 0;
  bool sees_nothing = false;  // every head's expected output is o = 0, lse = -inf
};

std::string describe(const Case& c) {
  return core::cat(c.name, ": n ", c.dims.n, ", Hq ", c.dims.hq, ", Hkv ", c.dims.hkv, ", D ",
                   c.dims.d, ", positions ", c.start, " + ", c.stride, " i, qpos ", c.qpos,
                   ", window ", c.window);
}

struct Problem {
  std::vector<float> q, k, v;
  std::vector<int64_t> pos;
  double scale = 0;

  Problem(const Case& c, uint64_t seed) {
    const auto [n, hq, hkv, d] = c.dims;
    q.resize(static_cast<size_t>(hq * d));
    k.resize(static_cast<size_t>(n * hkv * d));
    v.resize(k.size());
    core::fill_normal(q.data(), q.size(), core::derive_seed(seed, 1));
    core::fill_normal(k.data(), k.size(), core::derive_seed(seed, 2));
    core::fill_normal(v.data(), v.size(), core::derive_seed(seed, 3));
    for (int64_t i = 0; i < n; ++i) pos.push_back(c.start + i * c.stride);
    scale = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(d, 1)));
  }
};

std::vector<double> widen(const std::vector<float>& x) {
  return {x.begin(), x.end()};
}

struct Out {
  std::vector<double> o, lse;
};

Out run_ref(const Case& c, const Problem& p) {
  Out r{std::vector<double>(static_cast<size_t>(c.dims.hq * c.dims.d)),
        std::vector<double>(static_cast<size_t>(c.dims.hq))};
  const auto q = widen(p.q), k = widen(p.k), v = widen(p.v);
  kr::decode_attention(q.data(), k.data(), v.data(), p.pos.data(), c.dims, c.qpos, c.window,
                       p.scale, r.o.data(), r.lse.data());
  return r;
}

struct OutF {
  std::vector<float> o, lse;
};

OutF run_cpu(const Case& c, const Problem& p, int threads) {
  // Garbage in the outputs must be overwritten, never read.
  OutF r{std::vector<float>(static_cast<size_t>(c.dims.hq * c.dims.d), 7.0f),
         std::vector<float>(static_cast<size_t>(c.dims.hq), 7.0f)};
  kc::decode_attention(p.q.data(), p.k.data(), p.v.data(), p.pos.data(), c.dims, c.qpos, c.window,
                       p.scale, r.o.data(), r.lse.data(), threads);
  return r;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(static_cast<double>(got[i]), want[i]) << what << " [" << i << "]";
      continue;
    }
    EXPECT_LE(std::abs(got[i] - want[i]), tol + tol * std::abs(want[i]))
        << what << " [" << i << "]: " << got[i] << " vs " << want[i];
  }
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"one key", {1, 4, 2, 8}, 0, 1, 0, 0},
      {"odd n, MHA", {37, 3, 3, 5}, 0, 1, 36, 0},
      {"GQA group 3, odd D", {29, 6, 2, 7}, 0, 1, 40, 0},
      {"MQA", {33, 8, 1, 16}, 0, 1, 32, 0},
      {"strided shard (P = 4)", {25, 4, 2, 64}, 3, 4, 99, 0},
      {"causal cut: half the keys after qpos", {40, 4, 2, 8}, 0, 1, 19, 0},
      {"sliding window", {61, 4, 1, 8}, 0, 1, 60, 13},
      {"window on a strided shard", {31, 2, 2, 9}, 1, 3, 91, 10},
      {"every key masked (window)", {12, 4, 2, 8}, 0, 1, 100, 5, true},
      {"every key after qpos", {9, 4, 4, 8}, 10, 1, 3, 0, true},
      {"empty cache", {0, 4, 2, 8}, 0, 1, 5, 0, true},
      {"D = 1", {17, 2, 1, 1}, 0, 2, 40, 0},
  };
  return all;
}

TEST(DecodeAttention, CpuMatchesRefWithinToleranceAndIsThreadInvariant) {
  uint64_t seed = 101;
  for (const Case& c : cases()) {
    const Problem p(c, seed++);
    const Out want = run_ref(c, p);
    const OutF got = run_cpu(c, p, 1);
    expect_close(got.o, want.o, 1e-6, describe(c) + " o");
    expect_close(got.lse, want.lse, 1e-6, describe(c) + " lse");
    for (int threads : {2, 3}) {
      const OutF again = run_cpu(c, p, threads);
      EXPECT_EQ(std::memcmp(again.o.data(), got.o.data(), got.o.size() * sizeof(float)), 0)
          << describe(c) << ": o differs at " << threads << " threads";
      EXPECT_EQ(std::memcmp(again.lse.data(), got.lse.data(), got.lse.size() * sizeof(float)), 0)
          << describe(c) << ": lse differs at " << threads << " threads";
    }
  }
}

TEST(DecodeAttention, HeadsThatSeeNothingGetZeroAndMinusInf) {
  for (const Case& c : cases()) {
    if (!c.sees_nothing) continue;
    const Problem p(c, 7);
    const OutF got = run_cpu(c, p, 2);
    for (float x : got.o) EXPECT_EQ(x, 0.0f) << describe(c);
    for (float x : got.lse) EXPECT_EQ(static_cast<double>(x), -kInf) << describe(c);
  }
}

// The decode twin is the Tq = 1 case of the attention specification with the same mask.
TEST(DecodeAttention, RefIsTheOneRowCaseOfAttentionForward) {
  uint64_t seed = 501;
  for (const Case& c : cases()) {
    const Problem p(c, seed++);
    const Out dec = run_ref(c, p);
    const auto [n, hq, hkv, d] = c.dims;
    std::vector<double> o(static_cast<size_t>(hq * d)), lse(static_cast<size_t>(hq));
    const auto q = widen(p.q), k = widen(p.k), v = widen(p.v);
    const int64_t qpos = c.qpos;
    const longseq::kernels::Mask mask{.causal = true, .window = c.window};
    kr::attention_forward(q.data(), k.data(), v.data(), {&qpos, nullptr}, {p.pos.data(), nullptr},
                          mask, p.scale, {1, n, hq, hkv, d}, o.data(), lse.data());
    for (size_t i = 0; i < o.size(); ++i) EXPECT_NEAR(dec.o[i], o[i], 1e-12) << describe(c);
    for (size_t i = 0; i < lse.size(); ++i) {
      if (std::isinf(lse[i]))
        EXPECT_EQ(dec.lse[i], lse[i]) << describe(c);
      else
        EXPECT_NEAR(dec.lse[i], lse[i], 1e-12) << describe(c);
    }
  }
}

TEST(DecodeAttention, RefRefusesHeadsThatDoNotGroup) {
  const std::vector<double> q(6 * 4), k(2 * 4 * 4), v(k.size());
  const std::vector<int64_t> pos = {0, 1};
  std::vector<double> o(q.size()), lse(6);
  try {
    kr::decode_attention(q.data(), k.data(), v.data(), pos.data(), {2, 6, 4, 4}, 1, 0, 0.5,
                         o.data(), lse.data());
    FAIL() << "Hkv 4 does not divide Hq 6 but no error was raised";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Hkv 4 does not divide Hq 6"), std::string::npos)
        << e.what();
  }
}

}  // namespace
