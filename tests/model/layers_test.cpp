// The model-level layers (model/layers: embedding, blockwise SwiGLU MLP) and the model config.
// The fast kernels they compose (rmsnorm, rope, swiglu, linear) are tested against their fp64 twins
// in tests/kernels/. The MLP is checked against a whole-sequence fp64 composition of kernels/ref
// and plain fp64 products. Inputs standard normal (weights 0.3 scale), shapes tiny. Tolerance
// (|out - ref| <= atol + rtol |ref|): MLP 1e-5 + 1e-4 rel (sums of C or F fp32 products, a few
// hundred fp32 ulps of the outputs' size).
#include "longseq/model/layers.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "longseq/core/error.hpp"
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
  // The config's own counts (what the planner uses) agree with the layout's, tied or not.
  EXPECT_EQ(c.layer_parameters(), per_layer);
  EXPECT_EQ(c.parameters(), p.num_parameters());
  c.tied_embeddings = true;
  EXPECT_EQ(lm::ParamLayout(c).num_parameters(), 50 * 32 + 2 * per_layer + 32);
  EXPECT_EQ(c.parameters(), lm::ParamLayout(c).num_parameters());
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
