// Attention over whole sequences in one process (attention/local.hpp), and the pieces the Python
// package added to the attention library: byte-wise shard/unshard of any dimension, document ids
// from cu_seqlens offsets, and the harness writing into the caller's outputs.
#include "longseq/attention/local.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "attention_case.hpp"
#include "longseq/attention/harness.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"

namespace longseq {
namespace {

using testing::AttnCase;
using testing::kGradTol;
using testing::kOutTol;

struct LocalParam {
  const char* mask;
  int64_t n, hq, hkv;
};

class LocalAttention : public ::testing::TestWithParam<LocalParam> {};

// Sequences longer than one backward call's query rows (local.hpp: 1024 / C rows, C the kernel's
// dq chunks: 4 for Hkv = 2, 8 for Hkv = 1), so the chunked passes are what is checked; the
// kernels' own tolerances widened as the distributed tests' (attention_case.hpp).
TEST_P(LocalAttention, EqualsTheFp64ReferenceAcrossQueryChunks) {
  const LocalParam p = GetParam();
  AttnCase c(p.n, p.hq, p.hkv, 16, p.mask, 1, 17);
  c.run_reference();
  const attention::LocalDims dims{1, p.n, p.hq, p.hkv, 16};
  const attention::MaskSpec* masks[] = {c.mask.get()};
  std::vector<float> o(c.q.size()), lse(p.n * p.hq), dq(c.q.size()), dk(c.k.size()), dv(c.v.size());
  attention::local_attention_forward(c.q.data(), c.k.data(), c.v.data(), core::DType::f32, dims,
                                     masks, 0.0, 2, o.data(), lse.data());
  attention::local_attention_backward(c.dout.data(), c.q.data(), c.k.data(), c.v.data(), o.data(),
                                      lse.data(), core::DType::f32, dims, masks, 0.0, 2, dq.data(),
                                      dk.data(), dv.data());
  AttnCase::expect_close("o", o, c.ref_o, kOutTol, kOutTol);
  AttnCase::expect_close("lse", lse, c.ref_lse, kOutTol, kOutTol);
  AttnCase::expect_close("dq", dq, c.ref_dq, kGradTol, kGradTol);
  AttnCase::expect_close("dk", dk, c.ref_dk, kGradTol, kGradTol);
  AttnCase::expect_close("dv", dv, c.ref_dv, kGradTol, kGradTol);
}

INSTANTIATE_TEST_SUITE_P(Masks, LocalAttention,
                         ::testing::Values(LocalParam{"causal", 600, 4, 1},
                                           LocalParam{"full", 300, 2, 2},
                                           LocalParam{"window", 521, 4, 2},
                                           LocalParam{"document", 700, 2, 1},
                                           LocalParam{"blocks+causal", 333, 2, 2}),
                         [](const auto& i) {
                           std::string s = std::string(i.param.mask) + "_" +
                                           std::to_string(i.param.n) + "_" +
                                           std::to_string(i.param.hkv);
                           for (char& ch : s)
                             if (ch == '+') ch = '_';
                           return s;
                         });

TEST(LocalAttention, BatchRowsAreIndependentSequences) {
  AttnCase a(90, 2, 1, 8, "causal", 1, 3), b(90, 2, 1, 8, "document", 1, 4);
  a.run_reference();
  b.mask->causal = true;
  b.run_reference();
  auto cat = [](const std::vector<float>& x, const std::vector<float>& y) {
    std::vector<float> z = x;
    z.insert(z.end(), y.begin(), y.end());
    return z;
  };
  const std::vector<float> q = cat(a.q, b.q), k = cat(a.k, b.k), v = cat(a.v, b.v);
  const attention::MaskSpec* masks[] = {a.mask.get(), b.mask.get()};
  std::vector<float> o(q.size()), lse(2 * 90 * 2);
  attention::local_attention_forward(q.data(), k.data(), v.data(), core::DType::f32,
                                     {2, 90, 2, 1, 8}, masks, 0.0, 1, o.data(), lse.data());
  AttnCase::expect_close("o row 0", std::vector<float>(o.begin(), o.begin() + a.q.size()), a.ref_o,
                         kOutTol, kOutTol);
  AttnCase::expect_close("o row 1", std::vector<float>(o.begin() + a.q.size(), o.end()), b.ref_o,
                         kOutTol, kOutTol);
}

TEST(LocalAttention, RefusesWhatDoesNotFit) {
  attention::MaskSpec m;
  const attention::MaskSpec* one[] = {&m};
  const attention::MaskSpec* two[] = {&m, &m};
  float x = 0, l = 0;
  auto fwd = [&](attention::LocalDims d, attention::LocalMasks ms, double scale = 0.0) {
    attention::local_attention_forward(&x, &x, &x, core::DType::f32, d, ms, scale, 1, &x, &l);
  };
  EXPECT_THROW(fwd({1, 1, 3, 2, 1}, one), core::Error);  // Hkv does not divide Hq
  EXPECT_THROW(fwd({3, 1, 1, 1, 1}, two), core::Error);  // 2 masks for a batch of 3
  EXPECT_THROW(fwd({1, 0, 1, 1, 1}, one), core::Error);  // no tokens
  EXPECT_THROW(fwd({1, 1, 1, 1, 1}, one, -1.0), core::Error);
  attention::MaskSpec docs;
  docs.doc_ids = {0, 1};
  const attention::MaskSpec* bad[] = {&docs};
  EXPECT_THROW(fwd({1, 1, 1, 1, 1}, bad), core::Error);  // ids for 2 tokens, 1 token
  EXPECT_THROW(attention::local_attention_forward(&x, &x, &x, core::DType::f64, {1, 1, 1, 1, 1},
                                                  one, 0.0, 1, &x, &l),
               core::Error);
}

// The byte forms (which the typed ones call) against Layout::positions, row by row: every local
// row holds its global position's row in each outer slice, padding rows are zero, and unsharding
// every rank gives the global array back.
TEST(LayoutBytes, ShardAndUnshardAnyDimensionByPosition) {
  for (const char* b : {"contiguous", "zigzag", "striped", "block-striped"}) {
    const attention::Layout lay(attention::parse_balance(b), 23, 3, 6);
    const int64_t outer = 2, row = 5, n = lay.global_len(), l = lay.local_len();
    std::vector<float> global(outer * n * row);
    std::iota(global.begin(), global.end(), 1.f);
    std::vector<float> back(global.size(), -1.f);
    for (int r = 0; r < 3; ++r) {
      std::vector<float> local(outer * l * row, -7.f);
      lay.shard_bytes(global.data(), outer, row * 4, r, local.data());
      const std::vector<int64_t> pos = lay.positions(r);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < l; ++i)
          for (int64_t e = 0; e < row; ++e) {
            const float want = pos[i] < 0 || pos[i] >= n ? 0.f : global[(o * n + pos[i]) * row + e];
            ASSERT_EQ(local[(o * l + i) * row + e], want) << b << " rank " << r << " row " << i;
          }
      std::vector<float> typed(l * row, -7.f);
      lay.shard(global.data() + n * row, row, r, typed.data());  // the second slice, typed
      EXPECT_TRUE(std::equal(typed.begin(), typed.end(), local.begin() + l * row)) << b;
      lay.unshard_bytes(local.data(), outer, row * 4, r, back.data());
    }
    EXPECT_EQ(back, global) << b;
  }
}

TEST(MaskSpec, DocumentsFromCuSeqlens) {
  const std::vector<int64_t> cu = {0, 3, 3, 7};
  EXPECT_EQ(attention::MaskSpec::documents_from_offsets(cu, 7),
            (std::vector<int32_t>{0, 0, 0, 2, 2, 2, 2}));
  EXPECT_THROW(attention::MaskSpec::documents_from_offsets(std::vector<int64_t>{0, 5}, 7),
               core::Error);
  EXPECT_THROW(attention::MaskSpec::documents_from_offsets(std::vector<int64_t>{1, 7}, 7),
               core::Error);
  EXPECT_THROW(attention::MaskSpec::documents_from_offsets(std::vector<int64_t>{0, 5, 4, 7}, 7),
               core::Error);
  EXPECT_THROW(attention::MaskSpec::documents_from_offsets(std::vector<int64_t>{0}, 0),
               core::Error);
}

TEST(Harness, WritesIntoTheCallersOutputsTheBitsItReturns) {
  const attention::GlobalInputs in = attention::GlobalInputs::random(41, 4, 2, 8, 5);
  attention::AttentionSpec spec;
  spec.algo = attention::Algorithm::parse("burst");
  auto mask = std::make_shared<attention::MaskSpec>();
  mask->causal = true;
  spec.mask = mask;
  const attention::Layout layout(attention::Balance::zigzag, 41, 3);
  core::Tensor<float> o({41, 4, 8}), lse({41, 4}), dq({41, 4, 8}), dk({41, 2, 8}), dv({41, 2, 8});
  const attention::HarnessOutputs into{o.view(), lse.view(), dq.view(), dk.view(), dv.view()};
  attention::HarnessRun plain;
  comm::Options opt;
  opt.backend = "local";
  opt.world = 3;
  comm::run_local(opt, [&](comm::Group& g) {
    attention::HarnessRun a = attention::run_harness(in, spec, layout, g);
    attention::HarnessRun b = attention::run_harness(in.views(), spec, layout, g, &into);
    if (g.rank() != 0) return;
    EXPECT_EQ(b.o.shape().rank(), 0);  // written into the caller's, not allocated
    plain = std::move(a);
  });
  for (auto [got, want] : {std::pair{&o, &plain.o},
                           {&lse, &plain.lse},
                           {&dq, &plain.dq},
                           {&dk, &plain.dk},
                           {&dv, &plain.dv}})
    EXPECT_EQ(0, std::memcmp(got->data(), want->data(), got->numel() * sizeof(float)));
}

}  // namespace
}  // namespace longseq
