// AttentionSpec::precision = bf16: every algorithm (ring, burst, double-ring, startrail, ulysses,
// usp) runs the bf16 kernels and ships bf16 data (in the ring and the collective steps). Checked
// against kernels/ref (fp64) on the bf16-rounded inputs, against the single-rank bf16 result, and
// by the bytes on the wire.
//
// Tolerances. Every input is rounded to bf16 before the reference runs, so what is measured is
// the computation's own error. A bf16 kernel computes scores, softmax statistics and all sums in
// fp32; its error comes from rounding P (forward, P.V) and P, dS (backward GEMMs) to bf16, about
// 2^-9 relative per element. tests/kernels/cpu_attention_test.cpp bounds that single-kernel
// error by 2x a naive bf16 attention. The distributed run computes the same blocks cut at chunk
// boundaries and merges fp32 partials, so its bf16 error must be of the same size as the
// single-rank one: per output, max |dist - ref| <= 2 * max |single - ref| + the fp32 tolerance
// of the distributed fp32 test (distributed_test.cpp: 2e-5 o/lse, 5e-5 gradients), which covers
// outputs whose bf16 error is at fp32 level (lse: computed from fp32 scores, no P rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "attention_case.hpp"
#include "longseq/attention/distributed.hpp"
#include "longseq/attention/schedule.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"

using namespace longseq;
using namespace longseq::attention;
using longseq::testing::AttnCase;

namespace {

constexpr double kOutF32Tol = 2e-5;
constexpr double kGradF32Tol = 5e-5;

// The case's inputs as bf16 holds them (what the reference must see).
void round_inputs(AttnCase& c) {
  for (auto* x : {&c.q, &c.k, &c.v, &c.dout})
    for (float& e : *x) e = core::round_bf16(e);
}

double max_err(const std::vector<float>& got, const std::vector<double>& ref) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!std::isinf(ref[i])) e = std::max(e, std::fabs(got[i] - ref[i]));
  return e;
}

struct Output {
  const char* name;
  std::vector<float> AttnCase::*got;
  std::vector<double> AttnCase::*ref;
  double f32_tol;
};
const Output kOutputs[] = {{"o", &AttnCase::o, &AttnCase::ref_o, kOutF32Tol},
                           {"lse", &AttnCase::lse, &AttnCase::ref_lse, kOutF32Tol},
                           {"dq", &AttnCase::dq, &AttnCase::ref_dq, kGradF32Tol},
                           {"dk", &AttnCase::dk, &AttnCase::ref_dk, kGradF32Tol},
                           {"dv", &AttnCase::dv, &AttnCase::ref_dv, kGradF32Tol}};

AttentionSpec bf16_spec(const std::string& algo, const AttnCase& c) {
  AttentionSpec spec;
  spec.algo = Algorithm::parse(algo);
  spec.mask = c.mask;
  spec.precision = core::DType::bf16;
  return spec;
}

struct Param {
  const char* algo;
  Balance balance;
  const char* mask;
  int world, nodes;
};

std::vector<Param> all_params() {
  std::vector<Param> out;
  for (const char* algo : {"ring", "burst", "double-ring", "double-ring:ring"})
    for (Balance b : {Balance::contiguous, Balance::zigzag, Balance::striped})
      for (const char* mask : {"full", "causal", "window"})
        for (int world : {1, 2, 3, 4}) {
          const bool dr = std::string(algo).rfind("double-ring", 0) == 0;
          // The double ring needs several nodes of several ranks (world 1 runs alone).
          const int nodes = dr && world > 1 ? 2 : 1;
          if (dr && world > 1 && world != 4) continue;
          out.push_back({algo, b, mask, world, nodes});
        }
  // StarTrail (both placements), Ulysses (kv heads split and replicated) and USP, odd lengths.
  for (const char* algo : {"startrail:2", "startrail:2:rings", "ulysses", "usp:2", "usp:2:ring"})
    for (Balance b : {Balance::zigzag, Balance::striped})
      for (const char* mask : {"full", "causal"})
        for (int world : {2, 4}) {
          if (std::string(algo).rfind("startrail", 0) == 0 && world != 4) continue;
          if (std::string(algo).rfind("usp", 0) == 0 && world != 4) continue;
          out.push_back({algo, b, mask, world, 1});
        }
  return out;
}

std::string name_of(const Param& p) {
  std::string s = std::string(p.algo) + "_" + std::string(balance_name(p.balance)) + "_" + p.mask +
                  "_w" + std::to_string(p.world) + "n" + std::to_string(p.nodes);
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

class Bf16Attention : public ::testing::TestWithParam<Param> {};

TEST_P(Bf16Attention, WithinTwiceSingleRankErrorOfReference) {
  const Param& p = GetParam();
  // Odd lengths, GQA (Hq 4, Hkv 2), D not a power of two, as distributed_test.cpp. The runs get
  // the fp32 inputs (the executor must round them itself); the reference the rounded ones.
  const int64_t n = p.world * 13 + 5;
  AttnCase c(n, 4, 2, 12, p.mask, p.world, /*seed=*/p.world * 7 + 3);
  c.run_distributed(bf16_spec(p.algo, c), Layout(p.balance, n, p.world), p.nodes);
  // The same inputs (same seed and n; these masks do not depend on the world) on one rank.
  AttnCase one(n, 4, 2, 12, p.mask, 1, p.world * 7 + 3);
  one.run_distributed(bf16_spec("ring", one), Layout(Balance::contiguous, n, 1), 1);
  round_inputs(c);
  c.run_reference();

  for (const Output& out : kOutputs) {
    const std::vector<float>& got = c.*out.got;
    const std::vector<float>& single = one.*out.got;
    const std::vector<double>& ref = c.*out.ref;
    const double e_dist = max_err(got, ref), e_one = max_err(single, ref);
    EXPECT_LE(e_dist, 2 * e_one + out.f32_tol) << out.name << ": distributed bf16 error " << e_dist
                                               << " vs single-rank bf16 error " << e_one;
    // Interchangeable with the single-rank pass: the two round P at different block boundaries,
    // so they may differ by both errors (<= e_dist + e_one); measured <= 1.8 e_one, allowed 2.5.
    // -inf rows (no key visible) must agree exactly.
    AttnCase::expect_close(out.name, got, std::vector<double>(single.begin(), single.end()),
                           2.5 * e_one + out.f32_tol, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, Bf16Attention, ::testing::ValuesIn(all_params()),
                         [](const auto& info) { return name_of(info.param); });

TEST(Bf16AttentionBytes, DataBytesHalve) {
  // Full mask (nothing pruned), per rank and pass. Forward: (P-1) * 2*L*Hkv*D elements of K, V,
  // so exactly half the f32 bytes. Backward: the data part halves, the gradient part (fp32 so
  // partial gradients add in fp32) and burst's D, LSE (fp32) do not:
  //   ring   (P-1) * (2*L*Hkv*D * 2 + 2*L*Hkv*D * 4)                  bytes
  //   burst  (P-1) * (2*L*Hq*D * 2 + 2*L*Hq * 4 + L*Hq*D * 4)         bytes
  for (const char* algo : {"ring", "burst", "double-ring", "double-ring:ring"})
    for (int world : {2, 4}) {
      const int nodes = std::string(algo).rfind("double", 0) == 0 ? 2 : 1;
      if (HasFailure()) return;
      if (nodes == 2 && world == 2) continue;
      SCOPED_TRACE(std::string(algo) + " world " + std::to_string(world));
      AttnCase f32(world * 16, 8, 2, 8, "full", world, 3),
          bf16(world * 16, 8, 2, 8, "full", world, 3);
      const Layout layout(Balance::zigzag, f32.n, world, 0);
      AttentionSpec spec = bf16_spec(algo, f32);
      spec.precision = core::DType::f32;
      f32.run_distributed(spec, layout, nodes);
      bf16.run_distributed(bf16_spec(algo, bf16), layout, nodes);
      const int64_t l = layout.local_len(), hq = 8, hkv = 2, d = 8, p = world;
      const int64_t bwd = spec.algo.backward == Backward::kv
                              ? (p - 1) * (2 * l * hkv * d * 2 + 2 * l * hkv * d * 4)
                              : (p - 1) * (2 * l * hq * d * 2 + 2 * l * hq * 4 + l * hq * d * 4);
      for (int r = 0; r < world; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const auto& f = f32.fwd_bytes[r];
        const auto& b = bf16.fwd_bytes[r];
        EXPECT_EQ(2 * (b.intra + b.inter), f.intra + f.inter);
        EXPECT_EQ(2 * b.inter, f.inter);  // the same hops, each half the size
        EXPECT_EQ(b.intra + b.inter, (p - 1) * 2 * l * hkv * d * 2);
        EXPECT_EQ(bf16.bwd_bytes[r].intra + bf16.bwd_bytes[r].inter, bwd);
      }
    }
}

TEST(Bf16Attention, RefusesOtherPrecisions) {
  AttnCase c(40, 4, 2, 8, "causal", 2, 1);
  for (const char* algo : {"burst", "ulysses"}) {
    AttentionSpec spec = bf16_spec(algo, c);
    spec.precision = core::DType::f64;
    try {
      validate(spec, Layout(Balance::zigzag, 40, 2), longseq::comm::Topology::declared(2, 1), 4, 2,
               8);
      ADD_FAILURE() << algo << ": f64 accepted";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("f64"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("attention"), std::string::npos) << e.what();
    }
    // The entry points refuse it too, before any transfer.
    try {
      c.run_distributed(spec, Layout(Balance::zigzag, 40, 2), 1, /*backward=*/false);
      ADD_FAILURE() << algo << ": f64 ran";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("precision f64"), std::string::npos) << e.what();
    }
  }
}

// Every algorithm's bf16 bytes are its schedule's bytes with 2-byte q, k, v, dO (collective
// steps included); the f32 run moves more.
TEST(Bf16AttentionBytes, EveryAlgorithmShipsBf16) {
  for (const char* algo : {"startrail:2", "startrail:2:rings", "ulysses", "usp:2", "usp:2:ring"}) {
    SCOPED_TRACE(algo);
    AttnCase f32(4 * 13 + 3, 4, 2, 8, "causal", 4, 5), bf16(4 * 13 + 3, 4, 2, 8, "causal", 4, 5);
    const Layout layout(Balance::zigzag, f32.n, 4);
    AttentionSpec spec = bf16_spec(algo, f32);
    spec.precision = core::DType::f32;
    f32.run_distributed(spec, layout, 1);
    bf16.run_distributed(bf16_spec(algo, bf16), layout, 1);
    longseq::testing::expect_schedule_bytes(f32, spec.algo, layout, 1, true, 4);
    longseq::testing::expect_schedule_bytes(bf16, spec.algo, layout, 1, true, 2);
    for (int r = 0; r < 4; ++r) {
      EXPECT_LT(bf16.fwd_bytes[r].intra, f32.fwd_bytes[r].intra) << "rank " << r;
      EXPECT_LT(bf16.bwd_bytes[r].intra, f32.bwd_bytes[r].intra) << "rank " << r;
    }
  }
}

// The bf16 `_into` forms (distributed.hpp): q, k, v, dO and the saved o read where they lie give
// the bits of the fp32 forms fed the same values widened, for every algorithm, both precisions,
// with and without an lse gradient; a GPU spec is refused before anything runs.
struct ViewRun {
  std::vector<float> o, lse, dq, dk, dv;
};

// Forward, then backward with the forward's o (rounded to bf16, as a bf16 caller keeps it) and an
// lse gradient when `dlse`: through bf16 views when `bf16_views`, else through the fp32 views of
// the same (bf16-representable) values.
ViewRun run_views(const AttnCase& c, const AttentionSpec& spec, const Layout& layout, int nodes,
                  bool bf16_views, bool dlse) {
  ViewRun out;
  out.o.assign(c.n * c.hq * c.d, 0.f);
  out.lse.assign(c.n * c.hq, 0.f);
  out.dq.assign(c.n * c.hq * c.d, 0.f);
  out.dk.assign(c.n * c.hkv * c.d, 0.f);
  out.dv.assign(c.n * c.hkv * c.d, 0.f);
  longseq::comm::Options cfg;
  cfg.backend = "local";
  cfg.world = c.world;
  cfg.nodes = nodes;
  longseq::comm::run_local(cfg, [&](longseq::comm::Group& g) {
    const int r = g.rank();
    const int64_t l = layout.local_len(), d = c.d;
    auto shard = [&](const std::vector<float>& global, int64_t heads) {
      std::vector<float> local(static_cast<size_t>(l * heads * d));
      layout.shard(global.data(), heads * d, r, local.data());
      return local;
    };
    auto to_bf16 = [](const std::vector<float>& x) {
      std::vector<core::bf16> y(x.size());
      for (size_t i = 0; i < x.size(); ++i) y[i] = core::to_bf16(x[i]);
      return y;
    };
    const core::Shape qs{l, c.hq, d}, ks{l, c.hkv, d}, ls{l, c.hq};
    const std::vector<float> q = shard(c.q, c.hq), k = shard(c.k, c.hkv), v = shard(c.v, c.hkv),
                             dout = shard(c.dout, c.hq);
    const std::vector<core::bf16> qb = to_bf16(q), kb = to_bf16(k), vb = to_bf16(v),
                                  db = to_bf16(dout);
    std::vector<float> o(static_cast<size_t>(qs.numel())), lse(static_cast<size_t>(ls.numel()));
    if (bf16_views)
      distributed_attention_forward_into(
          core::View<const core::bf16>(qb.data(), qs), core::View<const core::bf16>(kb.data(), ks),
          core::View<const core::bf16>(vb.data(), ks), spec, layout, g,
          core::View<float>(o.data(), qs), core::View<float>(lse.data(), ls));
    else
      distributed_attention_forward_into(
          core::View<const float>(q.data(), qs), core::View<const float>(k.data(), ks),
          core::View<const float>(v.data(), ks), spec, layout, g, core::View<float>(o.data(), qs),
          core::View<float>(lse.data(), ls));
    // The caller keeps o in bf16; the fp32 form gets those values widened.
    const std::vector<core::bf16> ob = to_bf16(o);
    std::vector<float> o_kept(o.size());
    for (size_t i = 0; i < o.size(); ++i) o_kept[i] = core::to_f32(ob[i]);
    std::vector<float> gl(lse.size());
    for (size_t i = 0; i < gl.size(); ++i) gl[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
    const core::View<const float> dl =
        dlse ? core::View<const float>(gl.data(), ls) : core::View<const float>();
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    if (bf16_views)
      distributed_attention_backward_into(
          core::View<const core::bf16>(db.data(), qs), core::View<const core::bf16>(qb.data(), qs),
          core::View<const core::bf16>(kb.data(), ks), core::View<const core::bf16>(vb.data(), ks),
          core::View<const core::bf16>(ob.data(), qs), core::View<const float>(lse.data(), ls),
          spec, layout, g, core::View<float>(dq.data(), qs), core::View<float>(dk.data(), ks),
          core::View<float>(dv.data(), ks), nullptr, dl);
    else
      distributed_attention_backward_into(
          core::View<const float>(dout.data(), qs), core::View<const float>(q.data(), qs),
          core::View<const float>(k.data(), ks), core::View<const float>(v.data(), ks),
          core::View<const float>(o_kept.data(), qs), core::View<const float>(lse.data(), ls), spec,
          layout, g, core::View<float>(dq.data(), qs), core::View<float>(dk.data(), ks),
          core::View<float>(dv.data(), ks), nullptr, dl);
    layout.unshard(o.data(), c.hq * d, r, out.o.data());
    layout.unshard(lse.data(), c.hq, r, out.lse.data());
    layout.unshard(dq.data(), c.hq * d, r, out.dq.data());
    layout.unshard(dk.data(), c.hkv * d, r, out.dk.data());
    layout.unshard(dv.data(), c.hkv * d, r, out.dv.data());
  });
  return out;
}

TEST(Bf16Views, SameBitsAsFp32ViewsOfTheSameValues) {
  struct Case {
    const char* algo;
    int world, nodes;
    const char* mask;
  };
  const Case cases[] = {{"ring", 3, 1, "causal"},        {"burst", 4, 1, "document"},
                        {"double-ring", 4, 2, "window"}, {"startrail:2", 4, 1, "causal"},
                        {"ulysses", 2, 1, "full"},       {"usp:2", 4, 1, "causal"},
                        {"burst", 1, 1, "blocks+causal"}};
  for (const Case& k : cases)
    for (const core::DType precision : {core::DType::bf16, core::DType::f32})
      for (const bool dlse : {false, true}) {
        SCOPED_TRACE(std::string(k.algo) + " world " + std::to_string(k.world) + " " + k.mask +
                     " " + std::string(core::dtype_name(precision)) + (dlse ? " dlse" : ""));
        // Odd length, GQA 6/2, D 10; the inputs rounded to bf16 so both forms see one set of
        // values.
        AttnCase c(k.world * 11 + 3, 6, 2, 10, k.mask, k.world, 17);
        round_inputs(c);
        const Layout layout(Balance::zigzag, c.n, k.world);
        AttentionSpec spec = bf16_spec(k.algo, c);
        spec.precision = precision;
        const ViewRun a = run_views(c, spec, layout, k.nodes, true, dlse);
        const ViewRun b = run_views(c, spec, layout, k.nodes, false, dlse);
        for (const auto& [name, x, y] :
             {std::tuple{"o", &a.o, &b.o}, std::tuple{"lse", &a.lse, &b.lse},
              std::tuple{"dq", &a.dq, &b.dq}, std::tuple{"dk", &a.dk, &b.dk},
              std::tuple{"dv", &a.dv, &b.dv}}) {
          ASSERT_EQ(x->size(), y->size()) << name;
          EXPECT_EQ(std::memcmp(x->data(), y->data(), x->size() * sizeof(float)), 0)
              << name << " differs between bf16 views and fp32 views of the same values";
        }
        // Not vacuous: the pass computed something.
        EXPECT_TRUE(std::any_of(a.dk.begin(), a.dk.end(), [](float e) { return e != 0.f; }));
      }
}

TEST(Bf16Views, RefusedOnAGpuSpec) {
  AttnCase c(16, 2, 2, 8, "causal", 1, 3);
  const Layout layout(Balance::contiguous, 16, 1);
  AttentionSpec spec = bf16_spec("ring", c);
  spec.device = core::Device::cuda(0);
  std::vector<core::bf16> x(16 * 2 * 8);
  std::vector<float> o(16 * 2 * 8), lse(16 * 2);
  const core::Shape s{16, 2, 8};
  longseq::comm::Options cfg;
  cfg.backend = "local";
  cfg.world = 1;
  longseq::comm::run_local(cfg, [&](longseq::comm::Group& g) {
    const core::View<const core::bf16> in(x.data(), s);
    try {
      distributed_attention_forward_into(in, in, in, spec, layout, g,
                                         core::View<float>(o.data(), s),
                                         core::View<float>(lse.data(), core::Shape{16, 2}));
      ADD_FAILURE() << "bf16 views on cuda:0 accepted";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("bf16 q, k, v are taken on the CPU executor only"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
