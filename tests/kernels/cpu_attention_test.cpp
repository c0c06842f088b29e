// kernels/cpu attention block kernels against the fp64 specification (kernels/ref). The fp32
// causal and full-mask comparison on every backend (odd lengths, GQA, ring offsets) is the
// attention cases of kernel_cases.hpp; this file keeps what is particular to the CPU kernels.
//
// Legend: Tq query tokens, Tk key tokens, Hq query heads, Hkv kv heads, D head dim; q [Tq, Hq, D],
// k/v [Tk, Hkv, D], o [Tq, Hq, D], lse [Tq, Hq]. Positions are global; blocks sit at arbitrary
// offsets (queries late and keys early, the reverse, striped, padded), as on a ring.
//
// Tolerances (design.md §9, |x - ref| <= atol + rtol * |ref|), fp32 kernels vs fp64:
//   o, lse           atol 5e-6, rtol 5e-6   inputs N(0, 1), scale 1/sqrt(D): |o| <~ 3, |lse| <~ 10
//   dq, dk, dv       atol 2e-5, rtol 2e-5   gradients of sum(o * do), do N(0, 1)
// bf16 inputs: the max abs error of each output against fp64 on the same (bf16) inputs is at
// most 2x that of a naive bf16 attention (every intermediate (S, P, dP, dS) rounded to bf16, fp32
// accumulation inside products: what a framework does with bf16 tensors), FlashAttention-3's rule.
// The naive baseline keeps its outputs and gradients in fp32, as the kernels do: rounding them to
// bf16 would add 2^-9 relative error to the baseline only and flatter the kernels' ratio.
// Thread counts 1, 2 and 3 must give identical bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "longseq/core/dtype.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/kernels/cpu/attention.hpp"
#include "longseq/kernels/ref/attention.hpp"

namespace {

using longseq::core::bf16;
using longseq::kernels::Mask;
using longseq::kernels::Tokens;
namespace kc = longseq::kernels::cpu;
namespace kr = longseq::kernels::ref;
namespace core = longseq::core;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();

// ---- problems ---------------------------------------------------------------------------------

// Token metadata of one block: global positions (negative = padding) and document ids.
struct Block {
  std::vector<int64_t> pos;
  std::vector<int32_t> doc;
  Tokens tokens() const { return {pos.data(), doc.empty() ? nullptr : doc.data()}; }
};

// Positions start, start + stride, ...; `pad` trailing padding tokens.
Block block(int64_t n, int64_t start, int64_t stride = 1, int64_t pad = 0) {
  Block b;
  for (int64_t i = 0; i < n; ++i) b.pos.push_back(i < n - pad ? start + i * stride : -1);
  return b;
}

// Documents of the whole sequence: boundaries every `len` positions, shifted so that documents
// start mid-tile.
int32_t doc_of(int64_t pos, int64_t len) {
  return static_cast<int32_t>((pos + 17) / len);
}
void add_docs(Block& b, int64_t len) {
  b.doc.resize(b.pos.size());
  for (size_t i = 0; i < b.pos.size(); ++i) b.doc[i] = b.pos[i] < 0 ? -7 : doc_of(b.pos[i], len);
}

struct MaskCase {
  std::string name;
  bool causal = false;
  int64_t window = 0;
  int64_t doc_len = 0;     // > 0: document mask with documents of this many positions
  int64_t block_size = 0;  // > 0: block mask (a seeded pattern with local + global blocks)
};

struct Problem {
  kc::AttnDims dm;
  float scale = 0;
  Block qb, kb;
  Mask mask;
  std::vector<uint8_t> blocks;
  std::vector<float> q, k, v, dout;

  Problem(const kc::AttnDims& dims, Block qb_, Block kb_, const MaskCase& mc, uint64_t seed)
      : dm(dims), qb(std::move(qb_)), kb(std::move(kb_)) {
    scale = 1.0f / std::sqrt(static_cast<float>(dm.d));
    q.resize(dm.tq * dm.hq * dm.d);
    k.resize(dm.tk * dm.hkv * dm.d);
    v.resize(dm.tk * dm.hkv * dm.d);
    dout.resize(dm.tq * dm.hq * dm.d);
    core::fill_normal(q.data(), q.size(), core::derive_seed(seed, 1));
    core::fill_normal(k.data(), k.size(), core::derive_seed(seed, 2));
    core::fill_normal(v.data(), v.size(), core::derive_seed(seed, 3));
    core::fill_normal(dout.data(), dout.size(), core::derive_seed(seed, 4));
    mask.causal = mc.causal;
    mask.window = mc.window;
    if (mc.doc_len > 0) {
      mask.docs = true;
      add_docs(qb, mc.doc_len);
      add_docs(kb, mc.doc_len);
    }
    if (mc.block_size > 0) {
      int64_t maxpos = 0;
      for (int64_t p : qb.pos) maxpos = std::max(maxpos, p);
      for (int64_t p : kb.pos) maxpos = std::max(maxpos, p);
      const int64_t nb = maxpos / mc.block_size + 1;
      blocks.resize(nb * nb);
      for (int64_t i = 0; i < nb; ++i)
        for (int64_t j = 0; j < nb; ++j)
          blocks[i * nb + j] =
              (j == 0 || std::abs(i - j) <= 1 || core::uniform01(seed, 77 + i * nb + j) < 0.3) ? 1
                                                                                               : 0;
      mask.block_mask = blocks.data();
      mask.block_size = mc.block_size;
      mask.num_blocks = nb;
    }
  }
  Problem(const Problem&) = delete;
};

std::vector<double> to_f64(const std::vector<float>& x) {
  return {x.begin(), x.end()};
}

struct RefOut {
  std::vector<double> o, lse, dq, dk, dv;
};

RefOut run_ref(const Problem& p) {
  RefOut r;
  r.o.resize(p.q.size());
  r.lse.resize(p.dm.tq * p.dm.hq);
  r.dq.resize(p.q.size());
  r.dk.resize(p.k.size());
  r.dv.resize(p.v.size());
  const auto q = to_f64(p.q), k = to_f64(p.k), v = to_f64(p.v), d = to_f64(p.dout);
  kr::attention_forward(q.data(), k.data(), v.data(), p.qb.tokens(), p.kb.tokens(), p.mask, p.scale,
                        p.dm, r.o.data(), r.lse.data());
  kr::attention_backward(q.data(), k.data(), v.data(), d.data(), p.qb.tokens(), p.kb.tokens(),
                         p.mask, p.scale, p.dm, r.dq.data(), r.dk.data(), r.dv.data());
  return r;
}

// Workspace filled with NaN: a kernel that read scratch before writing it would show it.
std::vector<float> workspace(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

struct CpuOut {
  std::vector<float> o, lse, delta, dq, dk, dv;
};

constexpr float kGradInit = 0.5f;  // gradients accumulate: start from a known non-zero value

template <class T>
CpuOut run_cpu(const Problem& p, int threads, const std::vector<T>& q, const std::vector<T>& k,
               const std::vector<T>& v, const std::vector<T>& dout) {
  CpuOut c;
  c.o.assign(p.q.size(), std::numeric_limits<float>::quiet_NaN());  // overwritten
  c.lse.assign(p.dm.tq * p.dm.hq, std::numeric_limits<float>::quiet_NaN());
  auto ws = workspace(kc::attention_forward_workspace_floats(p.dm, threads));
  kc::attention_block_forward(q.data(), k.data(), v.data(), p.qb.tokens(), p.kb.tokens(), p.mask,
                              p.scale, p.dm, threads, ws, c.o.data(), c.lse.data());
  c.delta.resize(c.lse.size());
  kc::attention_delta(dout.data(), c.o.data(), p.dm.tq, p.dm.hq, p.dm.d, threads, c.delta.data());
  c.dq.assign(p.q.size(), kGradInit);
  c.dk.assign(p.k.size(), kGradInit);
  c.dv.assign(p.v.size(), kGradInit);
  auto wb = workspace(kc::attention_backward_workspace_floats(p.dm, threads));
  kc::attention_block_backward(q.data(), k.data(), v.data(), dout.data(), c.lse.data(),
                               c.delta.data(), p.qb.tokens(), p.kb.tokens(), p.mask, p.scale, p.dm,
                               threads, wb, c.dq.data(), c.dk.data(), c.dv.data());
  for (auto* g : {&c.dq, &c.dk, &c.dv})
    for (float& x : *g) x -= kGradInit;
  return c;
}

CpuOut run_cpu_f32(const Problem& p, int threads) {
  return run_cpu(p, threads, p.q, p.k, p.v, p.dout);
}

// ---- comparison -------------------------------------------------------------------------------

struct Tol {
  double atol, rtol;
};
constexpr Tol kTolOut{5e-6, 5e-6};
constexpr Tol kTolGrad{2e-5, 2e-5};

// Every element within atol + rtol * |ref|; -inf must match -inf exactly; no NaN anywhere.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, Tol tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isinf(w) || std::isinf(g) || std::isnan(g)) {
      if (!(g == w)) {
        if (bad++ < 3) ADD_FAILURE() << what << "[" << i << "] = " << g << ", want " << w;
      }
      continue;
    }
    const double err = std::fabs(g - w), lim = tol.atol + tol.rtol * std::fabs(w);
    if (err > lim) ++bad;
    if (err / lim > worst) {
      worst = err / lim;
      worst_i = i;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size()
                    << " elements out of tolerance; worst [" << worst_i << "] got " << got[worst_i]
                    << " want " << want[worst_i];
}

void expect_matches_ref(const Problem& p, const std::string& what, int threads = 2) {
  const RefOut r = run_ref(p);
  const CpuOut c = run_cpu_f32(p, threads);
  expect_close(c.o, r.o, kTolOut, what + " o");
  expect_close(c.lse, r.lse, kTolOut, what + " lse");
  expect_close(c.dq, r.dq, kTolGrad, what + " dq");
  expect_close(c.dk, r.dk, kTolGrad, what + " dk");
  expect_close(c.dv, r.dv, kTolGrad, what + " dv");
}

const std::vector<MaskCase>& mask_cases() {
  static const std::vector<MaskCase> cases = {
      {"full"},
      {"causal", true},
      {"window", true, 37},
      {"window-edge", true, 187},
      {"docs", false, 0, 90},
      {"docs+causal", true, 0, 90},
      {"blocks", false, 0, 0, 32},
      {"blocks+causal", true, 0, 0, 32},
      {"window+docs+blocks", true, 150, 110, 48},
  };
  return cases;
}

// ---- fp32 against the reference ----------------------------------------------------------------

// Every mask kind, with the query block late and the key block early, the reverse, and both
// covering the same positions; Tq != Tk, neither a multiple of any tile, and both spanning
// several tiles (forward 256 x 512, backward 256 x 256).
TEST(CpuAttention, EveryMaskAtRingOffsets) {
  const kc::AttnDims dm{300, 600, 2, 1, 64};
  static_assert(kc::kForwardTileQ < 300 && kc::kForwardTileK < 600 && kc::kBackwardTileK < 300);
  struct Offsets {
    const char* name;
    int64_t q0, k0;
  };
  // "straddle": the second forward key tile starts 3 positions before the first query tile ends.
  // "edge": the last (query, key) tile pair spans exactly the 187-token window of "window-edge"
  // (forward and backward tiles alike), so a classification off by one calls it full.
  for (const Offsets& off :
       {Offsets{"same", 0, 0}, Offsets{"q-late", 700, 250}, Offsets{"q-early", 40, 130},
        Offsets{"straddle", 600, 341}, Offsets{"edge", 1200, 800}}) {
    for (const MaskCase& mc : mask_cases()) {
      const Problem p(dm, block(dm.tq, off.q0), block(dm.tk, off.k0), mc, 11);
      expect_matches_ref(p, std::string(off.name) + "/" + mc.name);
    }
  }
}

TEST(CpuAttention, GqaGroupsAndHeadDims) {
  for (int64_t g : {1, 2, 4, 8}) {
    for (int64_t d : {64, 80, 128}) {
      const kc::AttnDims dm{140, 530, 8, 8 / g, d};
      const Problem p(dm, block(dm.tq, 300), block(dm.tk, 100), {"causal", true}, 20 + g + d);
      expect_matches_ref(p, "g=" + std::to_string(g) + " d=" + std::to_string(d));
    }
  }
}

// Striped and reversed positions (non-monotonic tiles, as a striped or zigzag layout gives), with
// padding tokens: classification must stay conservative and the per-element mask exact.
TEST(CpuAttention, StripedReversedAndPaddedPositions) {
  const kc::AttnDims dm{290, 560, 2, 1, 64};
  Block q = block(dm.tq, 3, 4, 9);  // rank 3 of 4 in a striped layout, 9 padding tokens
  Block k = block(dm.tk, 0, 3, 0);
  std::reverse(k.pos.begin(), k.pos.end());
  for (int64_t i = 0; i < dm.tk; i += 29) k.pos[i] = -1;  // padding scattered among keys
  for (const MaskCase& mc : mask_cases()) {
    const Problem p(dm, q, k, mc, 31);
    expect_matches_ref(p, "striped/" + mc.name);
  }
}

// Rows that see nothing: causal with every key after every query (the whole block is empty), a
// window that excludes everything, and only-padding blocks. o = 0, lse = -inf, gradients 0.
TEST(CpuAttention, RowsThatSeeNothing) {
  const kc::AttnDims dm{140, 300, 2, 2, 64};
  {
    const Problem p(dm, block(dm.tq, 0), block(dm.tk, 500), {"causal", true}, 41);
    expect_matches_ref(p, "keys-after-queries");
    const CpuOut c = run_cpu_f32(p, 2);
    for (float x : c.lse) EXPECT_EQ(x, -kInfF);
    for (float x : c.o) EXPECT_EQ(x, 0.0f);
    for (float x : c.dk) EXPECT_EQ(x, 0.0f);
  }
  {
    const Problem p(dm, block(dm.tq, 1000), block(dm.tk, 0), {"window", true, 50}, 42);
    expect_matches_ref(p, "window-too-far");
  }
  {
    // Keys 200..499 against queries 0..139 shifted so that the first query rows see nothing
    // and later ones see a few keys.
    const Problem p(dm, block(dm.tq, 130), block(dm.tk, 200), {"causal", true}, 43);
    expect_matches_ref(p, "first-rows-empty");
  }
  {
    const Problem p(dm, block(dm.tq, 0, 1, dm.tq), block(dm.tk, 0), {"full"}, 44);
    expect_matches_ref(p, "all-query-padding");
  }
  {
    const Problem p(dm, block(dm.tq, 0), block(dm.tk, 0, 1, dm.tk), {"full"}, 45);
    expect_matches_ref(p, "all-key-padding");
  }
}

// A ring: the keys of one sequence split into blocks held by different ranks (contiguous chunks
// and a striped split), each block's forward merged with merge_partials, then each block's
// backward with the final lse and delta; the sum must be the reference on the whole sequence.
TEST(CpuAttention, RingOfBlocksMergesToTheWholeSequence) {
  const int64_t n = 333, hq = 4, hkv = 2, d = 64;
  for (const MaskCase& mc :
       {MaskCase{"causal", true}, MaskCase{"docs+causal", true, 0, 70}, MaskCase{"full"}}) {
    for (bool striped : {false, true}) {
      const int world = 3;
      const kc::AttnDims whole{n, n, hq, hkv, d};
      const Problem p(whole, block(n, 0), block(n, 0), mc, 51);
      const RefOut r = run_ref(p);
      std::vector<float> o(p.q.size()), lse(n * hq), delta(n * hq);
      std::vector<float> dq(p.q.size(), 0.0f), dk(p.k.size(), 0.0f), dv(p.v.size(), 0.0f);
      // Key positions of each rank.
      std::vector<std::vector<int64_t>> owned(world);
      for (int64_t i = 0; i < n; ++i)
        owned[striped ? i % world : std::min<int64_t>(i / ((n + world - 1) / world), world - 1)]
            .push_back(i);
      auto gather = [&](const std::vector<float>& src, const std::vector<int64_t>& rows) {
        std::vector<float> out;
        for (int64_t t : rows)
          out.insert(out.end(), src.begin() + t * hkv * d, src.begin() + (t + 1) * hkv * d);
        return out;
      };
      // Ring order: the home block last, as a ring visits it at step 0 in practice (order must
      // not matter beyond rounding).
      for (int step = 0; step < world; ++step) {
        const auto& rows = owned[(step + 1) % world];
        Block kb;
        kb.pos = rows;
        if (!p.kb.doc.empty())
          for (int64_t t : rows) kb.doc.push_back(p.kb.doc[t]);
        const kc::AttnDims dm{n, static_cast<int64_t>(rows.size()), hq, hkv, d};
        const auto kk = gather(p.k, rows), vv = gather(p.v, rows);
        std::vector<float> bo(p.q.size()), blse(n * hq);
        auto ws = workspace(kc::attention_forward_workspace_floats(dm, 2));
        kc::attention_block_forward(p.q.data(), kk.data(), vv.data(), p.qb.tokens(), kb.tokens(),
                                    p.mask, p.scale, dm, 2, ws, bo.data(), blse.data());
        if (step == 0) {
          o = bo;
          lse = blse;
        } else {
          kc::merge_partials(o.data(), lse.data(), bo.data(), blse.data(), n, hq, d, 2);
        }
      }
      const std::string what = mc.name + (striped ? "/striped" : "/contiguous");
      expect_close(o, r.o, kTolOut, what + " merged o");
      expect_close(lse, r.lse, kTolOut, what + " merged lse");
      kc::attention_delta(p.dout.data(), o.data(), n, hq, d, 2, delta.data());
      for (int rank = 0; rank < world; ++rank) {
        const auto& rows = owned[rank];
        Block kb;
        kb.pos = rows;
        if (!p.kb.doc.empty())
          for (int64_t t : rows) kb.doc.push_back(p.kb.doc[t]);
        const kc::AttnDims dm{n, static_cast<int64_t>(rows.size()), hq, hkv, d};
        const auto kk = gather(p.k, rows), vv = gather(p.v, rows);
        std::vector<float> bdk(kk.size(), 0.0f), bdv(vv.size(), 0.0f);
        auto ws = workspace(kc::attention_backward_workspace_floats(dm, 2));
        kc::attention_block_backward(p.q.data(), kk.data(), vv.data(), p.dout.data(), lse.data(),
                                     delta.data(), p.qb.tokens(), kb.tokens(), p.mask, p.scale, dm,
                                     2, ws, dq.data(), bdk.data(), bdv.data());
        for (size_t i = 0; i < rows.size(); ++i)
          for (int64_t x = 0; x < hkv * d; ++x) {
            dk[rows[i] * hkv * d + x] = bdk[i * hkv * d + x];
            dv[rows[i] * hkv * d + x] = bdv[i * hkv * d + x];
          }
      }
      expect_close(dq, r.dq, kTolGrad, what + " ring dq");
      expect_close(dk, r.dk, kTolGrad, what + " ring dk");
      expect_close(dv, r.dv, kTolGrad, what + " ring dv");
    }
  }
}

// ---- determinism ------------------------------------------------------------------------------

template <class T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(T)), 0) << what;
}

void expect_deterministic(const CpuOut& a, const CpuOut& b, const std::string& what) {
  expect_same_bits(a.o, b.o, what + " o");
  expect_same_bits(a.lse, b.lse, what + " lse");
  expect_same_bits(a.delta, b.delta, what + " delta");
  expect_same_bits(a.dq, b.dq, what + " dq");
  expect_same_bits(a.dk, b.dk, what + " dk");
  expect_same_bits(a.dv, b.dv, what + " dv");
}

std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> y(x.size());
  core::f32_to_bf16(x.data(), y.data(), x.size());
  return y;
}

// Hkv = 1 and 2 split the backward into several key chunks (per-chunk dq buffers); Hkv = 8 does
// not. Both must give the same bits for 1, 2 and 3 threads, in fp32 and bf16.
TEST(CpuAttention, IdenticalBitsForEveryThreadCount) {
  for (int64_t hkv : {1, 2, 8}) {
    const kc::AttnDims dm{300, 1100, 8, hkv, 64};
    const Problem p(dm, block(dm.tq, 400), block(dm.tk, 0), {"causal", true}, 61);
    ASSERT_EQ(kc::attention_backward_chunks(dm) > 1, hkv < 8);
    const CpuOut one = run_cpu_f32(p, 1);
    for (int t : {2, 3})
      expect_deterministic(one, run_cpu_f32(p, t),
                           "f32 hkv=" + std::to_string(hkv) + " threads=" + std::to_string(t));
    const auto q = to_bf16(p.q), k = to_bf16(p.k), v = to_bf16(p.v), d = to_bf16(p.dout);
    const CpuOut b1 = run_cpu(p, 1, q, k, v, d);
    expect_deterministic(b1, run_cpu(p, 2, q, k, v, d), "bf16 hkv=" + std::to_string(hkv));
  }
}

// ---- bf16 against a naive bf16 attention ------------------------------------------------------

float rb(double x) {
  return core::round_bf16(static_cast<float>(x));
}

// Naive bf16 attention, every intermediate stored in bf16 (products accumulate in fp32): the
// forward and autograd backward of softmax(q k^T * scale + mask) v as a bf16 framework runs it,
// with fp32 outputs and gradients (the kernels' contract).
struct NaiveBf16 {
  std::vector<double> o, lse, dq, dk, dv;
};

NaiveBf16 naive_bf16(const Problem& p, const std::vector<float>& q, const std::vector<float>& k,
                     const std::vector<float>& v, const std::vector<float>& dout) {
  const auto& dm = p.dm;
  const int64_t g = dm.hq / dm.hkv, d = dm.d;
  NaiveBf16 r;
  r.o.assign(q.size(), 0.0);
  r.lse.assign(dm.tq * dm.hq, -kInf);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  std::vector<float> dkf(k.size(), 0.0f), dvf(v.size(), 0.0f);
  std::vector<float> s(dm.tk), pr(dm.tk), dp(dm.tk);
  const Tokens qt = p.qb.tokens(), kt = p.kb.tokens();
  for (int64_t i = 0; i < dm.tq; ++i)
    for (int64_t h = 0; h < dm.hq; ++h) {
      const float* qi = &q[(i * dm.hq + h) * d];
      const float* gi = &dout[(i * dm.hq + h) * d];
      const int64_t kh = h / g;
      float mx = -kInfF;
      for (int64_t j = 0; j < dm.tk; ++j) {
        float acc = 0;
        for (int64_t x = 0; x < d; ++x) acc += qi[x] * k[(j * dm.hkv + kh) * d + x];
        s[j] = longseq::kernels::visible(p.mask, qt, i, kt, j) ? rb(rb(acc) * p.scale) : -kInfF;
        mx = std::max(mx, s[j]);
      }
      if (mx == -kInfF) continue;
      float sum = 0;
      for (int64_t j = 0; j < dm.tk; ++j) sum += std::exp(s[j] - mx);
      r.lse[i * dm.hq + h] = mx + std::log(sum);
      for (int64_t j = 0; j < dm.tk; ++j) pr[j] = rb(std::exp(s[j] - mx) / sum);
      std::vector<float> oi(d, 0.0f);
      for (int64_t j = 0; j < dm.tk; ++j)
        for (int64_t x = 0; x < d; ++x) oi[x] += pr[j] * v[(j * dm.hkv + kh) * d + x];
      for (int64_t x = 0; x < d; ++x) r.o[(i * dm.hq + h) * d + x] = oi[x];
      // Backward: dP = dO V^T, softmax backward, dS scaled, products, each result in bf16.
      float dsum = 0;
      for (int64_t j = 0; j < dm.tk; ++j) {
        float acc = 0;
        for (int64_t x = 0; x < d; ++x) acc += gi[x] * v[(j * dm.hkv + kh) * d + x];
        dp[j] = rb(acc);
        dsum += dp[j] * pr[j];
      }
      std::vector<float> dqi(d, 0.0f);
      for (int64_t j = 0; j < dm.tk; ++j) {
        const float ds = rb(rb(pr[j] * (dp[j] - dsum)) * p.scale);
        for (int64_t x = 0; x < d; ++x) {
          dqi[x] += ds * k[(j * dm.hkv + kh) * d + x];
          dkf[(j * dm.hkv + kh) * d + x] += ds * qi[x];
          dvf[(j * dm.hkv + kh) * d + x] += pr[j] * gi[x];
        }
      }
      for (int64_t x = 0; x < d; ++x) r.dq[(i * dm.hq + h) * d + x] = dqi[x];
    }
  for (size_t i = 0; i < k.size(); ++i) {
    r.dk[i] = dkf[i];
    r.dv[i] = dvf[i];
  }
  return r;
}

double max_err(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!std::isinf(want[i])) e = std::max(e, std::fabs(got[i] - want[i]));
  return e;
}
double max_err(const std::vector<double>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!std::isinf(want[i])) e = std::max(e, std::fabs(got[i] - want[i]));
  return e;
}

TEST(CpuAttention, Bf16WithinTwiceNaiveBf16Error) {
  for (const MaskCase& mc : {MaskCase{"full"}, MaskCase{"causal", true},
                             MaskCase{"window+docs+blocks", true, 150, 110, 48}}) {
    const kc::AttnDims dm{300, 600, 4, 2, 128};
    Problem p(dm, block(dm.tq, 360), block(dm.tk, 0), mc, 71);
    // The reference runs on the bf16-rounded inputs: the error measured is the computation's.
    for (auto* x : {&p.q, &p.k, &p.v, &p.dout})
      for (float& e : *x) e = core::round_bf16(e);
    const RefOut r = run_ref(p);
    const NaiveBf16 nv = naive_bf16(p, p.q, p.k, p.v, p.dout);
    const CpuOut c = run_cpu(p, 2, to_bf16(p.q), to_bf16(p.k), to_bf16(p.v), to_bf16(p.dout));
    struct Item {
      const char* name;
      const std::vector<float>& got;
      const std::vector<double>& naive;
      const std::vector<double>& ref;
    };
    for (const Item& it : {Item{"o", c.o, nv.o, r.o}, Item{"lse", c.lse, nv.lse, r.lse},
                           Item{"dq", c.dq, nv.dq, r.dq}, Item{"dk", c.dk, nv.dk, r.dk},
                           Item{"dv", c.dv, nv.dv, r.dv}}) {
      const double ours = max_err(it.got, it.ref), naive = max_err(it.naive, it.ref);
      std::printf("  %-20s %-4s kernel/naive bf16 error %.2f\n", mc.name.c_str(), it.name,
                  ours / naive);
      EXPECT_LE(ours, 2.0 * naive)
          << mc.name << " " << it.name << ": kernel error " << ours << " vs naive bf16 " << naive;
      EXPECT_GT(naive, 0.0) << it.name;  // the rule is only meaningful if bf16 costs something
    }
  }
}

// The bf16 forward's lazy rescaling keeps a row's running maximum until a later key tile's scores
// exceed it by more than 2^64 (attention.cpp). Both sides of that bound: key tiles whose scores
// rise tile by tile by a modest step (kept maximum, P up to 2^step) and by a huge step (the exact
// path), every row against the fp64 reference on the same bf16 inputs, lse to fp32 accuracy.
TEST(CpuAttention, Bf16ForwardWhenLaterKeyTilesRaiseTheMaximum) {
  for (const double step : {3.0, 40.0, 200.0}) {  // log2 units per key tile of 512
    const kc::AttnDims dm{70, 1500, 2, 1, 16};
    Problem p(dm, block(dm.tq, 0), block(dm.tk, 0), MaskCase{"full"}, 19);
    // q = (1, 0, ...): the score of key j is scale * k[j][0], so k[j][0] sets the logits.
    for (int64_t i = 0; i < dm.tq * dm.hq; ++i) {
      std::fill(p.q.begin() + i * dm.d, p.q.begin() + (i + 1) * dm.d, 0.0f);
      p.q[i * dm.d] = 1.0f;
    }
    const double ln2 = std::log(2.0);
    for (int64_t j = 0; j < dm.tk; ++j) {
      const double tile = static_cast<double>(j / kc::kForwardTileK);
      // Rising from tile to tile, with spread inside a tile.
      const double logit = (tile * step + 2.0 * std::sin(0.37 * static_cast<double>(j))) * ln2;
      p.k[j * dm.d] = static_cast<float>(logit / p.scale);
    }
    for (auto* x : {&p.q, &p.k, &p.v, &p.dout})
      for (float& e : *x) e = core::round_bf16(e);
    const RefOut r = run_ref(p);
    const CpuOut c = run_cpu(p, 2, to_bf16(p.q), to_bf16(p.k), to_bf16(p.v), to_bf16(p.dout));
    for (size_t i = 0; i < c.lse.size(); ++i)
      ASSERT_NEAR(c.lse[i], r.lse[i], 1e-6 * std::abs(r.lse[i]) + 1e-4) << "step " << step;
    // P is rounded to bf16 for P V: 2^-8 relative per term.
    for (size_t i = 0; i < c.o.size(); ++i)
      ASSERT_NEAR(c.o[i], r.o[i], 2e-2 * (1.0 + std::abs(r.o[i]))) << "step " << step << " i " << i;
  }
}

// ---- merge and delta --------------------------------------------------------------------------

TEST(CpuAttention, MergePartialsIsStableAndHandlesInfinities) {
  const int64_t d = 5;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // (lse, lse_other) per row: empty sides, large logits, very different magnitudes.
  const std::vector<std::pair<double, double>> rows = {
      {-kInf, -kInf}, {-kInf, 3.0},     {2.0, -kInf}, {1000.0, 1000.5},
      {88.0, -88.0},  {-1e4, -1e4 + 1}, {0.25, 0.25}, {30000.0, 29990.0}};
  const int64_t t = static_cast<int64_t>(rows.size());
  std::vector<float> o(t * d), oo(t * d), lse(t), lo(t);
  for (int64_t r = 0; r < t; ++r) {
    lse[r] = static_cast<float>(rows[r].first);
    lo[r] = static_cast<float>(rows[r].second);
    for (int64_t x = 0; x < d; ++x) {
      // A side with lse = -inf holds garbage (NaN) that must not leak.
      o[r * d + x] = std::isinf(rows[r].first) ? static_cast<float>(nan) : 0.1f * (x + 1);
      oo[r * d + x] = std::isinf(rows[r].second) ? static_cast<float>(nan) : -0.3f * (x + 2);
    }
  }
  std::vector<double> want_o(t * d), want_lse(t);
  for (int64_t r = 0; r < t; ++r) {
    const double a = rows[r].first, b = rows[r].second, m = std::max(a, b);
    want_lse[r] = m == -kInf ? -kInf : m + std::log(std::exp(a - m) + std::exp(b - m));
    for (int64_t x = 0; x < d; ++x) {
      double v = 0;
      if (a != -kInf) v += std::exp(a - want_lse[r]) * 0.1f * (x + 1);
      if (b != -kInf) v += std::exp(b - want_lse[r]) * -0.3f * (x + 2);
      want_o[r * d + x] = v;
    }
  }
  kc::merge_partials(o.data(), lse.data(), oo.data(), lo.data(), t, 1, d, 2);
  expect_close(o, want_o, {1e-6, 1e-6}, "merged o");
  expect_close(lse, want_lse, {1e-6, 1e-6}, "merged lse");
}

TEST(CpuAttention, DeltaIsRowsumOfDoTimesO) {
  const int64_t t = 37, h = 3, d = 80;
  std::vector<float> dout(t * h * d), o(t * h * d), delta(t * h);
  core::fill_normal(dout.data(), dout.size(), 5);
  core::fill_normal(o.data(), o.size(), 6);
  kc::attention_delta(dout.data(), o.data(), t, h, d, 2, delta.data());
  std::vector<double> want(t * h, 0.0);
  for (int64_t r = 0; r < t * h; ++r)
    for (int64_t x = 0; x < d; ++x) want[r] += static_cast<double>(dout[r * d + x]) * o[r * d + x];
  expect_close(delta, want, {1e-5, 1e-5}, "delta");
  // bf16 dout with fp32 o: the same sums on the widened values.
  const auto db = to_bf16(dout);
  kc::attention_delta(db.data(), o.data(), t, h, d, 2, delta.data());
  for (int64_t r = 0; r < t * h; ++r) {
    want[r] = 0;
    for (int64_t x = 0; x < d; ++x)
      want[r] += static_cast<double>(core::to_f32(db[r * d + x])) * o[r * d + x];
  }
  expect_close(delta, want, {1e-5, 1e-5}, "delta bf16");
}

TEST(CpuAttention, WorkspaceQueriesAndChunks) {
  EXPECT_EQ(kc::attention_backward_chunks({1000, 4000, 8, 8, 128}), 1);
  EXPECT_EQ(kc::attention_backward_chunks({1000, 4000, 8, 2, 128}), 4);
  EXPECT_EQ(kc::attention_backward_chunks({1000, 4000, 8, 1, 128}), 8);
  EXPECT_EQ(kc::attention_backward_chunks({1000, 100, 8, 1, 128}), 1);  // one key tile
  // chunk_hkv: sized for that many kv heads, so a head group of a larger call keeps its chunks.
  EXPECT_EQ(kc::attention_backward_chunks({1000, 4000, 2, 1, 128, 4}), 2);
  EXPECT_EQ(kc::attention_backward_chunks({1000, 4000, 8, 2, 128, 8}), 1);
  EXPECT_EQ(kc::attention_backward_chunks({1000, 4000, 8, 2, 128, 0}), 4);
  // The forward needs no more with more rows: scratch is per thread, not per token.
  EXPECT_EQ(kc::attention_forward_workspace_floats({100, 100, 8, 8, 128}, 2),
            kc::attention_forward_workspace_floats({100000, 100000, 8, 8, 128}, 2));
  EXPECT_GT(kc::attention_forward_workspace_floats({1, 1, 1, 1, 64}, 4),
            kc::attention_forward_workspace_floats({1, 1, 1, 1, 64}, 2));
  // Empty blocks are legal and leave outputs alone (backward) or produce -inf (forward).
  const kc::AttnDims dm{5, 0, 1, 1, 8};
  std::vector<float> q(40, 1.0f), o(40, 7.0f), lse(5, 7.0f);
  std::vector<int64_t> pos(5, 0);
  auto ws = workspace(kc::attention_forward_workspace_floats(dm, 2));
  kc::attention_block_forward(q.data(), q.data(), q.data(), Tokens{pos.data()}, Tokens{pos.data()},
                              Mask{}, 1.0f, dm, 2, ws, o.data(), lse.data());
  for (float x : o) EXPECT_EQ(x, 0.0f);
  for (float x : lse) EXPECT_EQ(x, -kInfF);
}

}  // namespace
