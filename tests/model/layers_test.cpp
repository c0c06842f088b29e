// The fp32 model layers against their fp64 specifications (kernels/ref) and plain fp64 products.
// Inputs are standard normal (weights 0.1-0.5 scale), shapes tiny. Tolerances (|out - ref| <=
// atol + rtol |ref|), each a few hundred fp32 ulps of the outputs' size:
//   rmsnorm out/dx/dweight 1e-5 + 1e-5 rel; linear and MLP 1e-5 + 1e-4 rel (sums of C or F fp32
//   products); rope 1e-5 + 1e-5 rel (angles up to 1e6 rad, computed in fp64 then rounded);
//   swiglu 1e-6 + 1e-6 rel.
#include "longseq/model/layers.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/kernels/ref/rmsnorm.hpp"
#include "longseq/kernels/ref/rope.hpp"
#include "longseq/kernels/ref/swiglu.hpp"
#include "longseq/model/config.hpp"
#include "model_test_util.hpp"

namespace {

namespace lm = longseq::model;
namespace kr = longseq::kernels::ref;
namespace lt = longseq::test;
using longseq::core::Error;

// out[t, n] = sum_k in[t, k] w[n, k], fp64.
std::vector<double> matmul_t(const std::vector<double>& in, const std::vector<double>& w, int64_t t,
                             int64_t k, int64_t n) {
  std::vector<double> out(t * n, 0.0);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t e = 0; e < k; ++e) out[i * n + j] += in[i * k + e] * w[j * k + e];
  return out;
}

TEST(ModelConfig, RefusesBadShapesNamingValues) {
  lm::LlamaConfig c;
  c.validate();
  auto msg = [](lm::LlamaConfig x) {
    try {
      x.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  lm::LlamaConfig a = c;
  a.kv_heads = 3;
  EXPECT_NE(msg(a).find("heads 4 not divisible by kv_heads 3"), std::string::npos) << msg(a);
  a = c;
  a.hidden = 200;
  EXPECT_NE(msg(a).find("hidden 200 != heads 4 * head_dim 64"), std::string::npos) << msg(a);
  a = c;
  a.layers = 0;
  EXPECT_NE(msg(a).find("layers must be positive, got 0"), std::string::npos) << msg(a);
  a = c;
  a.heads = 8;
  a.kv_heads = 2;
  a.head_dim = 31;
  a.hidden = 248;
  EXPECT_NE(msg(a).find("head_dim 31 must be even"), std::string::npos) << msg(a);
  EXPECT_NE(msg(a).find("[model]"), std::string::npos);
}

TEST(ModelConfig, LayoutHasHuggingFaceNamesAndCounts) {
  lm::LlamaConfig c;
  c.layers = 2;
  c.hidden = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.intermediate = 40;
  c.vocab = 50;
  c.tied_embeddings = false;
  lm::ParamLayout p(c);
  ASSERT_EQ(p.num_units(), 4);
  EXPECT_EQ(p.units()[0].tensors[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(p.units()[1].tensors[1].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(p.units()[2].tensors[2].shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(p.units()[3].tensors[1].name, "lm_head.weight");
  const int64_t per_layer = 32 + 32 * 32 + 2 * 16 * 32 + 32 * 32 + 32 + 3 * 40 * 32;
  EXPECT_EQ(p.num_parameters(), 50 * 32 + 2 * per_layer + 32 + 50 * 32);
  c.tied_embeddings = true;
  EXPECT_EQ(lm::ParamLayout(c).num_parameters(), 50 * 32 + 2 * per_layer + 32);
  EXPECT_EQ(lm::ParamLayout(c).lm_head_offset(), -1);
}

TEST(ModelLayers, EmbeddingGathersRowsZeroesPaddingAndScattersGradients) {
  const int64_t v = 7, c = 3, t = 5;
  std::vector<float> w = lt::normal_f(v * c, 1);
  std::vector<int32_t> tok = {2, 6, 0, 2, 3};
  std::vector<int64_t> pos = {10, 11, -1, 12, 13};
  std::vector<float> out(t * c, 9.0f);
  lm::embedding_forward(tok.data(), pos.data(), w.data(), t, c, v, out.data());
  for (int64_t j = 0; j < c; ++j) {
    EXPECT_EQ(out[0 * c + j], w[2 * c + j]);
    EXPECT_EQ(out[1 * c + j], w[6 * c + j]);
    EXPECT_EQ(out[2 * c + j], 0.0f);
  }
  std::vector<float> d = lt::normal_f(t * c, 2), dw(v * c, 0.0f);
  lm::embedding_backward(tok.data(), pos.data(), d.data(), t, c, dw.data());
  for (int64_t j = 0; j < c; ++j) {
    EXPECT_FLOAT_EQ(dw[2 * c + j], d[0 * c + j] + d[3 * c + j]);
    EXPECT_EQ(dw[0 * c + j], 0.0f);  // token 0 only appears at a padding slot
  }
  tok[1] = 7;
  try {
    lm::embedding_forward(tok.data(), pos.data(), w.data(), t, c, v, out.data());
    ADD_FAILURE() << "out-of-vocabulary id accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 7 at position 11 outside the vocabulary [0, 7)"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModelLayers, RmsNormMatchesReference) {
  const int64_t t = 6, c = 24;
  const float eps = 1e-5f;
  std::vector<float> x = lt::normal_f(t * c, 3), w = lt::normal_f(c, 4),
                     dout = lt::normal_f(t * c, 5);
  std::vector<float> out(t * c), rstd(t), dx(t * c), dw(c, 0.0f);
  lm::rmsnorm_forward(x.data(), w.data(), t, c, eps, out.data(), rstd.data(), 2);
  lm::rmsnorm_backward(dout.data(), x.data(), w.data(), rstd.data(), t, c, dx.data(), dw.data(),
                       false, 2);
  auto xd = lt::widen(x), wd = lt::widen(w), dd = lt::widen(dout);
  std::vector<double> ro(t * c), rr(t), rdx(t * c), rdw(c);
  kr::rmsnorm_forward(xd.data(), wd.data(), t, c, eps, ro.data(), rr.data());
  kr::rmsnorm_backward(dd.data(), xd.data(), wd.data(), t, c, eps, rdx.data(), rdw.data());
  lt::expect_close(out, ro, 1e-5, 1e-5, "rmsnorm out");
  lt::expect_close(rstd, rr, 1e-6, 1e-6, "rmsnorm rstd");
  lt::expect_close(dx, rdx, 1e-5, 1e-5, "rmsnorm dx");
  lt::expect_close(dw, rdw, 1e-5, 1e-5, "rmsnorm dweight");
  // accumulate mode adds
  std::vector<float> dx2(t * c, 1.0f);
  std::vector<float> dw2(c, 0.0f);
  lm::rmsnorm_backward(dout.data(), x.data(), w.data(), rstd.data(), t, c, dx2.data(), dw2.data(),
                       true, 1);
  for (int64_t i = 0; i < t * c; ++i) EXPECT_NEAR(dx2[i], dx[i] + 1.0f, 1e-6);
}

TEST(ModelLayers, LinearForwardBackwardMatchProducts) {
  const int64_t t = 7, k = 12, n = 9;
  auto in = lt::normal_f(t * k, 6), w = lt::normal_f(n * k, 7, 0.3), dout = lt::normal_f(t * n, 8);
  std::vector<float> out(t * n), din(t * k), dw(n * k, 0.0f);
  lm::linear_forward(in.data(), w.data(), t, k, n, out.data(), false, 2);
  lm::linear_backward(dout.data(), in.data(), w.data(), t, k, n, din.data(), false, dw.data(), 2);
  auto ref = matmul_t(lt::widen(in), lt::widen(w), t, k, n);
  lt::expect_close(out, ref, 1e-5, 1e-4, "linear out");
  std::vector<double> rdin(t * k, 0.0), rdw(n * k, 0.0);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t e = 0; e < k; ++e) {
        rdin[i * k + e] += double(dout[i * n + j]) * w[j * k + e];
        rdw[j * k + e] += double(dout[i * n + j]) * in[i * k + e];
      }
  lt::expect_close(din, rdin, 1e-5, 1e-4, "linear din");
  lt::expect_close(dw, rdw, 1e-5, 1e-4, "linear dweight");
}

TEST(ModelLayers, RopeMatchesReferenceOnGlobalPositionsAndSkipsPadding) {
  const int64_t t = 6, h = 3, d = 8;
  std::vector<int64_t> pos = {0, 1, -1, 4097, 1000000, 77};
  auto x = lt::normal_f(t * h * d, 9);
  std::vector<float> y = x;
  lm::RopeTable table(pos.data(), t, d, 10000.0);
  table.forward(y.data(), h, 2);
  auto xd = lt::widen(x);
  std::vector<double> ry(t * h * d);
  kr::rope_forward(xd.data(), pos.data(), t, h, d, 10000.0, ry.data());
  lt::expect_close(y, ry, 1e-5, 1e-5, "rope forward");
  for (int64_t i = 2 * h * d; i < 3 * h * d; ++i) EXPECT_EQ(y[i], x[i]) << "padding row rotated";
  std::vector<float> g = x;
  table.backward(g.data(), h, 1);
  std::vector<double> rg(t * h * d);
  kr::rope_backward(xd.data(), pos.data(), t, h, d, 10000.0, rg.data());
  lt::expect_close(g, rg, 1e-5, 1e-5, "rope backward");
}

TEST(ModelLayers, SwigluMatchesReference) {
  const int64_t n = 64;
  auto g = lt::normal_f(n, 10, 3.0), u = lt::normal_f(n, 11), dout = lt::normal_f(n, 12);
  std::vector<float> out(n), dg(n), du(n);
  lm::swiglu_forward(g.data(), u.data(), n, out.data());
  lm::swiglu_backward(dout.data(), g.data(), u.data(), n, dg.data(), du.data());
  auto gd = lt::widen(g), ud = lt::widen(u), dd = lt::widen(dout);
  std::vector<double> ro(n), rdg(n), rdu(n);
  kr::swiglu_forward(gd.data(), ud.data(), n, ro.data());
  kr::swiglu_backward(dd.data(), gd.data(), ud.data(), n, rdg.data(), rdu.data());
  lt::expect_close(out, ro, 1e-6, 1e-6, "swiglu out");
  lt::expect_close(dg, rdg, 1e-6, 1e-6, "swiglu dgate");
  lt::expect_close(du, rdu, 1e-6, 1e-6, "swiglu dup");
}

// The blockwise MLP against a whole-sequence fp64 composition of the reference ops, for chunk
// sizes that divide T, do not divide it, and exceed it.
TEST(ModelLayers, BlockwiseMlpMatchesReferenceForEveryChunk) {
  const int64_t t = 11, c = 8, f = 20;
  auto x = lt::normal_f(t * c, 13), wg = lt::normal_f(f * c, 14, 0.3),
       wu = lt::normal_f(f * c, 15, 0.3), wd = lt::normal_f(c * f, 16, 0.3),
       dout = lt::normal_f(t * c, 17);
  auto xd = lt::widen(x), wgd = lt::widen(wg), wud = lt::widen(wu), wdd = lt::widen(wd);
  auto g = matmul_t(xd, wgd, t, c, f), u = matmul_t(xd, wud, t, c, f);
  std::vector<double> a(t * f);
  kr::swiglu_forward(g.data(), u.data(), t * f, a.data());
  auto ref_out = matmul_t(a, wdd, t, f, c);
  // backward in fp64
  std::vector<double> da(t * f, 0.0), rdwd(c * f, 0.0);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t e = 0; e < f; ++e) {
        da[i * f + e] += double(dout[i * c + j]) * wdd[j * f + e];
        rdwd[j * f + e] += double(dout[i * c + j]) * a[i * f + e];
      }
  std::vector<double> dg(t * f), du(t * f);
  kr::swiglu_backward(da.data(), g.data(), u.data(), t * f, dg.data(), du.data());
  std::vector<double> rdx(t * c, 0.0), rdwg(f * c, 0.0), rdwu(f * c, 0.0);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t e = 0; e < f; ++e)
      for (int64_t j = 0; j < c; ++j) {
        rdx[i * c + j] += dg[i * f + e] * wgd[e * c + j] + du[i * f + e] * wud[e * c + j];
        rdwg[e * c + j] += dg[i * f + e] * xd[i * c + j];
        rdwu[e * c + j] += du[i * f + e] * xd[i * c + j];
      }
  for (int64_t chunk : {0, 1, 4, 11, 64}) {
    lm::MlpDims d{t, c, f, chunk};
    std::vector<float> ws(lm::mlp_workspace_floats(d));
    EXPECT_LE(static_cast<int64_t>(ws.size()),
              3 * std::max<int64_t>(chunk > 0 ? std::min(chunk, t) : t, 1) * f);
    std::vector<float> out(t * c, 0.5f);
    lm::mlp_forward(x.data(), wg.data(), wu.data(), wd.data(), d, out.data(), true, ws.data(), 2);
    std::vector<double> want(t * c);
    for (int64_t i = 0; i < t * c; ++i) want[i] = ref_out[i] + 0.5;
    const std::string tag = " chunk " + std::to_string(chunk);
    lt::expect_close(out, want, 1e-5, 1e-4, "mlp out" + tag);
    std::vector<float> dx(t * c), dwg(f * c, 0.0f), dwu(f * c, 0.0f), dwd(c * f, 0.0f);
    lm::mlp_backward(dout.data(), x.data(), wg.data(), wu.data(), wd.data(), d, dx.data(), false,
                     dwg.data(), dwu.data(), dwd.data(), ws.data(), 2);
    lt::expect_close(dx, rdx, 1e-5, 1e-4, "mlp dx" + tag);
    lt::expect_close(dwg, rdwg, 1e-5, 1e-4, "mlp dwgate" + tag);
    lt::expect_close(dwu, rdwu, 1e-5, 1e-4, "mlp dwup" + tag);
    lt::expect_close(dwd, rdwd, 1e-5, 1e-4, "mlp dwdown" + tag);
  }
}

}  // namespace
