// The fp64 specifications of the non-attention ops (kernels/ref: cross_entropy, rmsnorm, rope,
// swiglu): gradients by central differences (ref_gradcheck.hpp: h 1e-5, |fd - analytic| <=
// 1e-7 + 1e-6 |analytic|) on tiny shapes, and forward values against closed forms (1e-12 unless
// stated).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/kernels/ref/cross_entropy.hpp"
#include "longseq/kernels/ref/rmsnorm.hpp"
#include "longseq/kernels/ref/rope.hpp"
#include "longseq/kernels/ref/swiglu.hpp"
#include "ref_gradcheck.hpp"

namespace {

namespace kr = longseq::kernels::ref;
namespace lt = longseq::test;
using longseq::core::Error;

// ---- LM head + cross-entropy
// ---------------------------------------------------------------------

struct CeProblem {
  kr::LmHeadDims dims{6, 4, 7};
  std::vector<double> hidden = lt::normal(6 * 4, 11), weight = lt::normal(7 * 4, 12);
  std::vector<int32_t> labels = {3, -100, 0, 6, -100, 2};
  int32_t ignore = kr::kIgnoreIndex;
  double mean() const {
    return kr::lm_head_ce_forward(hidden.data(), weight.data(), labels.data(), dims, nullptr,
                                  nullptr, ignore)
        .mean();
  }
};

TEST(RefCrossEntropy, MeanGradientsMatchFiniteDifferences) {
  for (int32_t ignore : {kr::kIgnoreIndex, -1}) {
    CeProblem p;
    p.ignore = ignore;
    for (auto& l : p.labels)
      if (l < 0) l = ignore;
    const auto ce = kr::lm_head_ce_forward(p.hidden.data(), p.weight.data(), p.labels.data(),
                                           p.dims, nullptr, nullptr, ignore);
    ASSERT_EQ(ce.count, 4);
    std::vector<double> dh(p.hidden.size()), dw(p.weight.size());
    kr::lm_head_ce_backward(p.hidden.data(), p.weight.data(), p.labels.data(), p.dims,
                            1.0 / static_cast<double>(ce.count), dh.data(), dw.data(), ignore);
    auto loss = [&] { return p.mean(); };
    lt::expect_fd_grad(p.hidden, dh, loss, "dhidden");
    lt::expect_fd_grad(p.weight, dw, loss, "dweight");
    // Ignored tokens get no gradient.
    for (int64_t t : {1, 4})
      for (int64_t c = 0; c < p.dims.c; ++c) EXPECT_EQ(dh[t * p.dims.c + c], 0.0);
  }
}

TEST(RefCrossEntropy, SumCountAndTokenLossesAgreeWithClosedForm) {
  CeProblem p;
  std::vector<double> tl(6), lse(6);
  const auto ce = kr::lm_head_ce_forward(p.hidden.data(), p.weight.data(), p.labels.data(), p.dims,
                                         tl.data(), lse.data());
  double sum = 0.0;
  for (int64_t t = 0; t < 6; ++t) {
    double z[7], s = 0.0;
    for (int64_t v = 0; v < 7; ++v) {
      z[v] = 0.0;
      for (int64_t c = 0; c < 4; ++c) z[v] += p.hidden[t * 4 + c] * p.weight[v * 4 + c];
      s += std::exp(z[v]);
    }
    EXPECT_NEAR(lse[t], std::log(s), 1e-12);
    const double want = p.labels[t] < 0 ? 0.0 : std::log(s) - z[p.labels[t]];
    EXPECT_NEAR(tl[t], want, 1e-12);
    sum += want;
  }
  EXPECT_NEAR(ce.sum, sum, 1e-12);
  EXPECT_EQ(ce.count, 4);
  EXPECT_NEAR(ce.mean(), sum / 4, 1e-12);
}

// Zero hidden states give uniform logits: loss = log V exactly, whatever the label.
TEST(RefCrossEntropy, UniformLogitsGiveLogV) {
  kr::LmHeadDims d{3, 5, 11};
  const std::vector<double> h(15, 0.0), w = lt::normal(55, 3);
  const std::vector<int32_t> labels = {0, 10, 4};
  EXPECT_NEAR(kr::lm_head_ce_forward(h.data(), w.data(), labels.data(), d).mean(), std::log(11.0),
              1e-14);
}

// Logits of +-1e4 do not overflow: the per-token logsumexp subtracts the max.
TEST(RefCrossEntropy, HugeLogitsStayFinite) {
  kr::LmHeadDims d{2, 1, 3};
  const std::vector<double> h = {1e4, -1e4}, w = {1.0, 0.0, -1.0};
  const std::vector<int32_t> labels = {2, 2};
  std::vector<double> tl(2);
  const auto ce = kr::lm_head_ce_forward(h.data(), w.data(), labels.data(), d, tl.data());
  EXPECT_NEAR(tl[0], 2e4, 1e-9);   // logits (1e4, 0, -1e4), label at -1e4
  EXPECT_NEAR(tl[1], 0.0, 1e-12);  // logits (-1e4, 0, 1e4), label at the max
  std::vector<double> dh(2), dw(3);
  kr::lm_head_ce_backward(h.data(), w.data(), labels.data(), d, 1.0 / ce.count, dh.data(),
                          dw.data());
  for (double x : dh) EXPECT_TRUE(std::isfinite(x));
  for (double x : dw) EXPECT_TRUE(std::isfinite(x));
}

// A shard whose tokens are all ignored (possible on one rank of a distributed run): sum 0,
// count 0, mean 0 (not NaN), zero gradients.
TEST(RefCrossEntropy, AllIgnoredIsZeroNotNaN) {
  CeProblem p;
  p.labels.assign(6, kr::kIgnoreIndex);
  const auto ce = kr::lm_head_ce_forward(p.hidden.data(), p.weight.data(), p.labels.data(), p.dims);
  EXPECT_EQ(ce.count, 0);
  EXPECT_EQ(ce.sum, 0.0);
  EXPECT_EQ(ce.mean(), 0.0);
  std::vector<double> dh(p.hidden.size(), 1.0), dw(p.weight.size(), 1.0);
  kr::lm_head_ce_backward(p.hidden.data(), p.weight.data(), p.labels.data(), p.dims, 0.25,
                          dh.data(), dw.data());
  for (double x : dh) EXPECT_EQ(x, 0.0);
  for (double x : dw) EXPECT_EQ(x, 0.0);
}

// Splitting tokens over two "ranks" and normalising by the global count equals the whole.
TEST(RefCrossEntropy, ShardedSumOverGlobalCountEqualsMean) {
  CeProblem p;
  const auto whole =
      kr::lm_head_ce_forward(p.hidden.data(), p.weight.data(), p.labels.data(), p.dims);
  std::vector<double> dh(p.hidden.size()), dw(p.weight.size());
  kr::lm_head_ce_backward(p.hidden.data(), p.weight.data(), p.labels.data(), p.dims,
                          1.0 / whole.count, dh.data(), dw.data());
  kr::CrossEntropy parts[2];
  std::vector<double> sdh(p.hidden.size()), sdw[2];
  for (int r = 0; r < 2; ++r) {
    kr::LmHeadDims d = p.dims;
    d.t = 3;
    parts[r] = kr::lm_head_ce_forward(p.hidden.data() + r * 3 * d.c, p.weight.data(),
                                      p.labels.data() + r * 3, d);
  }
  const int64_t global = parts[0].count + parts[1].count;
  ASSERT_EQ(global, whole.count);
  EXPECT_NEAR((parts[0].sum + parts[1].sum) / global, whole.mean(), 1e-12);
  for (int r = 0; r < 2; ++r) {
    kr::LmHeadDims d = p.dims;
    d.t = 3;
    sdw[r].resize(p.weight.size());
    kr::lm_head_ce_backward(p.hidden.data() + r * 3 * d.c, p.weight.data(), p.labels.data() + r * 3,
                            d, 1.0 / global, sdh.data() + r * 3 * d.c, sdw[r].data());
  }
  for (size_t i = 0; i < dh.size(); ++i) EXPECT_NEAR(sdh[i], dh[i], 1e-14);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(sdw[0][i] + sdw[1][i], dw[i], 1e-14);
}

TEST(RefCrossEntropy, RefusesLabelsOutsideTheVocabulary) {
  CeProblem p;
  p.labels[2] = 7;  // V = 7
  EXPECT_THROW(p.mean(), Error);
  p.labels[2] = -5;
  EXPECT_THROW(p.mean(), Error);
}

// ---- RMSNorm
// -------------------------------------------------------------------------------------

TEST(RefRmsNorm, GradientsMatchFiniteDifferences) {
  const int64_t t = 4, c = 6;
  const double eps = 1e-5;
  auto x = lt::normal(t * c, 21), w = lt::normal(c, 22);
  const auto dout = lt::normal(t * c, 23);
  std::vector<double> dx(t * c), dw(c), y(t * c);
  kr::rmsnorm_backward(dout.data(), x.data(), w.data(), t, c, eps, dx.data(), dw.data());
  auto loss = [&] {
    kr::rmsnorm_forward(x.data(), w.data(), t, c, eps, y.data());
    return lt::dot(y, dout);
  };
  lt::expect_fd_grad(x, dx, loss, "rmsnorm dx");
  lt::expect_fd_grad(w, dw, loss, "rmsnorm dweight");
}

TEST(RefRmsNorm, ForwardMatchesClosedFormAndAliases) {
  const int64_t t = 2, c = 3;
  std::vector<double> x = {1, 2, 2, -3, 0, 4}, w = {1, 0.5, -2}, y(6), rstd(2);
  kr::rmsnorm_forward(x.data(), w.data(), t, c, 0.0, y.data(), rstd.data());
  EXPECT_NEAR(rstd[0], 1.0 / std::sqrt(3.0), 1e-15);  // mean of squares (1 + 4 + 4) / 3
  EXPECT_NEAR(rstd[1], 1.0 / std::sqrt(25.0 / 3.0), 1e-15);
  EXPECT_NEAR(y[2], 2 * rstd[0] * -2, 1e-15);
  EXPECT_NEAR(y[3], -3 * rstd[1], 1e-15);
  kr::rmsnorm_forward(x.data(), w.data(), t, c, 0.0, x.data());  // in place
  for (int i = 0; i < 6; ++i) EXPECT_EQ(x[i], y[i]);
  // eps keeps a zero row finite.
  std::vector<double> z(3, 0.0), zy(3);
  kr::rmsnorm_forward(z.data(), w.data(), 1, 3, 1e-6, zy.data());
  for (double v : zy) EXPECT_EQ(v, 0.0);
  EXPECT_THROW(kr::rmsnorm_forward(z.data(), w.data(), 1, 3, -1.0, zy.data()), Error);
}

// ---- RoPE
// ----------------------------------------------------------------------------------------

TEST(RefRope, GradientsMatchFiniteDifferences) {
  const int64_t t = 4, h = 2, d = 6;
  const std::vector<int64_t> pos = {0, 7, 1000003, -1};
  auto x = lt::normal(t * h * d, 31);
  const auto dout = lt::normal(t * h * d, 32);
  std::vector<double> dx(x.size()), y(x.size());
  kr::rope_backward(dout.data(), pos.data(), t, h, d, 5e5, dx.data());
  auto loss = [&] {
    kr::rope_forward(x.data(), pos.data(), t, h, d, 5e5, y.data());
    return lt::dot(y, dout);
  };
  lt::expect_fd_grad(x, dx, loss, "rope dx");
}

// rotate_half pairing: dimension i rotates with i + D/2 by pos * theta^(-2i/D).
TEST(RefRope, RotateHalfConventionByHand) {
  const int64_t d = 4;
  const std::vector<int64_t> pos = {3};
  const double theta = 100.0;  // inv_freq = (1, 0.1)
  std::vector<double> y(4);
  const std::vector<double> e0 = {1, 0, 0, 0}, e1 = {0, 1, 0, 0};
  kr::rope_forward(e0.data(), pos.data(), 1, 1, d, theta, y.data());
  EXPECT_NEAR(y[0], std::cos(3.0), 1e-15);
  EXPECT_NEAR(y[1], 0.0, 1e-15);
  EXPECT_NEAR(y[2], std::sin(3.0), 1e-15);
  EXPECT_NEAR(y[3], 0.0, 1e-15);
  kr::rope_forward(e1.data(), pos.data(), 1, 1, d, theta, y.data());
  EXPECT_NEAR(y[1], std::cos(0.3), 1e-15);
  EXPECT_NEAR(y[3], std::sin(0.3), 1e-15);
  EXPECT_NEAR(y[0], 0.0, 1e-15);
}

// The property RoPE exists for: <rope(q, m), rope(k, n)> depends only on m - n, also at
// positions near a million; padding passes through; backward inverts forward.
TEST(RefRope, ScoresDependOnlyOnRelativePosition) {
  const int64_t d = 8;
  const auto q = lt::normal(d, 41), k = lt::normal(d, 42);
  auto score = [&](int64_t m, int64_t n) {
    std::vector<double> rq(d), rk(d);
    kr::rope_forward(q.data(), &m, 1, 1, d, 1e4, rq.data());
    kr::rope_forward(k.data(), &n, 1, 1, d, 1e4, rk.data());
    return lt::dot(rq, rk);
  };
  EXPECT_NEAR(score(10, 3), score(1000010, 1000003), 1e-9);
  EXPECT_NEAR(score(0, 0), lt::dot(q, k), 1e-12);
  EXPECT_GT(std::fabs(score(10, 3) - score(10, 4)), 1e-3);
  const int64_t pad = -1;
  std::vector<double> y(d), back(d);
  kr::rope_forward(q.data(), &pad, 1, 1, d, 1e4, y.data());
  for (int64_t i = 0; i < d; ++i) EXPECT_EQ(y[i], q[i]);
  const int64_t p = 123457;
  kr::rope_forward(q.data(), &p, 1, 1, d, 1e4, y.data());
  kr::rope_backward(y.data(), &p, 1, 1, d, 1e4, back.data());
  for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(back[i], q[i], 1e-14);
  EXPECT_THROW(kr::rope_forward(q.data(), &p, 1, 1, 7, 1e4, y.data()), Error);
}

// ---- SwiGLU
// --------------------------------------------------------------------------------------

TEST(RefSwiglu, GradientsMatchFiniteDifferences) {
  const int64_t n = 3 * 5;
  auto gate = lt::normal(n, 51), up = lt::normal(n, 52);
  for (auto& g : gate) g *= 3.0;  // exercise both tails of the sigmoid
  const auto dout = lt::normal(n, 53);
  std::vector<double> dg(n), du(n), y(n);
  kr::swiglu_backward(dout.data(), gate.data(), up.data(), n, dg.data(), du.data());
  auto loss = [&] {
    kr::swiglu_forward(gate.data(), up.data(), n, y.data());
    return lt::dot(y, dout);
  };
  lt::expect_fd_grad(gate, dg, loss, "swiglu dgate");
  lt::expect_fd_grad(up, du, loss, "swiglu dup");
}

TEST(RefSwiglu, ClosedFormsAndExtremes) {
  const std::vector<double> g = {0.0, 1.0, -1000.0, 1000.0}, u = {2.0, 3.0, 5.0, 7.0};
  std::vector<double> y(4), dg(4), du(4);
  kr::swiglu_forward(g.data(), u.data(), 4, y.data());
  EXPECT_EQ(y[0], 0.0);
  EXPECT_NEAR(y[1], 3.0 / (1.0 + std::exp(-1.0)), 1e-15);
  EXPECT_EQ(y[2], -0.0);
  EXPECT_EQ(y[3], 7000.0);
  const std::vector<double> ones(4, 1.0);
  kr::swiglu_backward(ones.data(), g.data(), u.data(), 4, dg.data(), du.data());
  EXPECT_NEAR(dg[0], 2.0 * 0.5, 1e-15);  // silu'(0) = 1/2
  EXPECT_EQ(dg[2], 0.0);
  EXPECT_EQ(dg[3], 7.0);
  for (double x : dg) EXPECT_TRUE(std::isfinite(x));
  // Outputs may alias inputs (elementwise).
  std::vector<double> ga = g, ua = u;
  kr::swiglu_backward(ones.data(), ga.data(), ua.data(), 4, ga.data(), ua.data());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ga[i], dg[i]);
    EXPECT_EQ(ua[i], du[i]);
  }
}

}  // namespace
