// kernels/cuda/attention.hpp against the fp64 twin (kernels/ref/attention.hpp) on fresh random
// inputs: odd lengths (several 64-token tiles plus a ragged one), every mask (full, causal,
// sliding window, documents, block-sparse, padding), GQA with 1, 2, 4 and 8 query heads per kv
// head, query and key blocks taken from every balance layout (contiguous, zigzag, striped,
// block-striped) at ring offsets, rows that see nothing, both paths (bf16 tensor cores at
// D = 64 and 128, with thread blocks of one and of two 64-row tiles; the generic kernels for fp32
// and odd D), bit-identical repeats (also across the block shapes), the accumulate contract and
// the errors. Every test skips without a GPU.
//
// Tolerances (stated per path; "scaled" means times max(1, max |want|) of that output):
//  * fp32 (generic kernels): o and lse 2e-5 scaled + 2e-5 rel, gradients 1e-4 scaled + 1e-4 rel.
//    The registry's bounds (tests/kernels/kernel_cases.hpp: 5e-6 for o, lse; 2e-5 for gradients,
//    D <= 24, Tk <= 37) grown for these sums: D up to 72 and up to ~200 keys per row, ~250 rows
//    per key gradient (recursive fp32 summation error grows like n u, u = 6e-8), 4x margin.
//  * bf16 (tensor cores): inputs are bf16 values, so the fp64 twin sees exactly what the kernel
//    sees; the products Q K^T and dO V^T are exact in fp32 accumulation up to ~D u_32. What is
//    lost is P (and dS) rounded to bf16 for the second product: relative error <= 2^-9 per term,
//    rms 2^-9/sqrt(3) = 1.1e-3. So the rms error of o, dq, dk, dv relative to the output's rms is
//    ~1e-3 (bounded: 5e-3 for o, 1e-2 for the gradients, which also inherit the forward's error
//    through delta = rowsum(do o)); the worst element <= 2^-9 sum |p v| <= 2^-9 max |v| ~ 1e-2
//    (bounded: 2e-2 scaled for o, 3e-2 for gradients). lse is fp32 from exact products: 1e-4.
//    A wrong mask entry, head or tile moves many elements by O(0.1 |o|): the rms bound sees it.
//  * Rows that see no key: lse exactly -inf, o and gradients exactly 0 (not within a tolerance:
//    the kernels never add anything to them).
#include "longseq/kernels/cuda/attention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/kernels/mask.hpp"
#include "longseq/kernels/ref/attention.hpp"
#include "model/model_test_util.hpp"

namespace {

namespace lt = longseq::test;
namespace core = longseq::core;
namespace kn = longseq::kernels;
namespace kcu = longseq::kernels::cuda;
using kn::ref::AttnDims;

enum class Layout { contiguous, zigzag, striped, block_striped };
enum class MaskKind { full, causal, window, docs, block_sparse, padding };

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous:
      return "contiguous";
    case Layout::zigzag:
      return "zigzag";
    case Layout::striped:
      return "striped";
    case Layout::block_striped:
      return "block_striped";
  }
  return "?";
}

const char* mask_name(MaskKind m) {
  switch (m) {
    case MaskKind::full:
      return "full";
    case MaskKind::causal:
      return "causal";
    case MaskKind::window:
      return "window";
    case MaskKind::docs:
      return "docs";
    case MaskKind::block_sparse:
      return "block_sparse";
    case MaskKind::padding:
      return "padding";
  }
  return "?";
}

// Global positions of rank `r`'s block (n tokens) of a sequence of world * n tokens under each
// balance layout: contiguous [r n, (r + 1) n); zigzag chunks r and 2 world - 1 - r (n / 2 each);
// striped r, r + world, ...; block-striped blocks of 16 tokens r, r + world, ...
std::vector<int64_t> positions(Layout l, int64_t n, int64_t world, int64_t r) {
  std::vector<int64_t> p(n);
  const int64_t total = world * n;
  for (int64_t i = 0; i < n; ++i) {
    switch (l) {
      case Layout::contiguous:
        p[i] = r * n + i;
        break;
      case Layout::zigzag: {
        const int64_t half = (n + 1) / 2, chunk = total / (2 * world);
        p[i] = i < half ? r * chunk + i : (2 * world - 1 - r) * chunk + (i - half);
        p[i] = std::min(p[i], total - 1);
        break;
      }
      case Layout::striped:
        p[i] = r + i * world;
        break;
      case Layout::block_striped: {
        const int64_t b = 16;
        p[i] = ((i / b) * world + r) * b + i % b;
        break;
      }
    }
  }
  return p;
}

struct Case {
  std::string name;
  core::DType dtype = core::DType::f32;
  int64_t tq = 0, tk = 0, hq = 1, hkv = 1, d = 64;
  MaskKind mask = MaskKind::causal;
  Layout layout = Layout::contiguous;
  int64_t world = 4, qrank = 2, krank = 1;  // which blocks of the layout meet
  uint64_t seed = 1;
};

// gtest prints a parameter with this (its name), not as bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
};

struct Problem {
  Case c;
  std::vector<int64_t> qpos, kpos;
  std::vector<int32_t> qdoc, kdoc;
  std::vector<uint8_t> blocks;
  kn::Mask mask;
  std::vector<float> q, k, v, dout;  // bf16-representable when c.dtype is bf16
};

Problem make_problem(const Case& c) {
  Problem p;
  p.c = c;
  p.qpos = positions(c.layout, c.tq, c.world, c.qrank);
  p.kpos = positions(c.layout, c.tk, c.world, c.krank);
  const int64_t total = c.world * std::max(c.tq, c.tk) + 64;
  switch (c.mask) {
    case MaskKind::full:
      break;
    case MaskKind::causal:
      p.mask.causal = true;
      break;
    case MaskKind::window:
      p.mask.window = 45;
      break;
    case MaskKind::docs: {
      p.mask.docs = true;
      p.mask.causal = true;
      // Documents of irregular lengths over the global positions (37, 74, 111, ... boundaries).
      auto doc_of = [](int64_t pos) { return static_cast<int32_t>(pos / 37 + (pos % 91 == 0)); };
      for (int64_t x : p.qpos) p.qdoc.push_back(doc_of(x));
      for (int64_t x : p.kpos) p.kdoc.push_back(doc_of(x));
      break;
    }
    case MaskKind::block_sparse: {
      const int64_t bs = 32, nb = (total + bs - 1) / bs;
      p.blocks.resize(nb * nb);
      for (int64_t i = 0; i < nb; ++i)
        for (int64_t j = 0; j < nb; ++j)
          p.blocks[i * nb + j] = (j <= i && ((i * 7 + j * 3) % 5 != 0 || i == j)) ? 1 : 0;
      p.mask.block_mask = p.blocks.data();
      p.mask.block_size = bs;
      p.mask.num_blocks = nb;
      p.mask.causal = true;
      break;
    }
    case MaskKind::padding:
      p.mask.causal = true;
      // Padding at both ends and in the middle (pos < 0): sees nothing and is seen by nobody.
      for (int64_t i = 0; i < c.tq; ++i)
        if (i % 29 == 3 || i >= c.tq - 5) p.qpos[i] = -1;
      for (int64_t j = 0; j < c.tk; ++j)
        if (j % 31 == 7 || j < 3) p.kpos[j] = -1;
      break;
  }
  const int64_t nq = c.tq * c.hq * c.d, nk = c.tk * c.hkv * c.d;
  p.q.resize(nq);
  p.k.resize(nk);
  p.v.resize(nk);
  p.dout.resize(nq);
  core::fill_normal(p.q.data(), nq, c.seed, 0);
  core::fill_normal(p.k.data(), nk, c.seed + 1, 0);
  core::fill_normal(p.v.data(), nk, c.seed + 2, 0);
  core::fill_normal(p.dout.data(), nq, c.seed + 3, 0);
  if (c.dtype == core::DType::bf16)
    for (auto* vec : {&p.q, &p.k, &p.v, &p.dout})
      for (float& x : *vec) x = core::round_bf16(x);
  return p;
}

std::vector<core::bf16> to_bf16(const std::vector<float>& x) {
  std::vector<core::bf16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = core::to_bf16(x[i]);
  return out;
}

// Runs forward, delta and backward on the GPU. Gradients start at `grad_init` (the backward
// accumulates).
Outputs run_gpu(const Problem& p, float grad_init = 0.0f) {
  const Case& c = p.c;
  const core::Exec ex = lt::gpu_exec();
  const AttnDims dm{c.tq, c.tk, c.hq, c.hkv, c.d};
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  const int64_t nq = c.tq * c.hq * c.d, nk = c.tk * c.hkv * c.d, rows = c.tq * c.hq;
  auto qpos = lt::upload(p.qpos, "qpos"), kpos = lt::upload(p.kpos, "kpos");
  auto qdoc = lt::upload(p.qdoc, "qdoc"), kdoc = lt::upload(p.kdoc, "kdoc");
  auto blocks = lt::upload(p.blocks, "blocks");
  const kn::Tokens qt{qpos.data(), p.mask.docs ? qdoc.data() : nullptr};
  const kn::Tokens kt{kpos.data(), p.mask.docs ? kdoc.data() : nullptr};
  kn::Mask mask = p.mask;
  if (mask.block_mask) mask.block_mask = blocks.data();
  const size_t wsb = kcu::attention_workspace_bytes(dm);
  core::Buffer<uint8_t> ws(std::max<size_t>(wsb, 16), ex.device, core::Uninit{}, "ws");
  // Outputs poisoned (NaN) so that an element the forward never wrote shows.
  auto o = lt::upload(std::vector<float>(std::max<int64_t>(nq, 1), NAN), "o");
  auto lse = lt::upload(std::vector<float>(std::max<int64_t>(rows, 1), NAN), "lse");
  auto delta = lt::upload(std::vector<float>(std::max<int64_t>(rows, 1), NAN), "delta");
  auto dq = lt::upload(std::vector<float>(std::max<int64_t>(nq, 1), grad_init), "dq");
  auto dk = lt::upload(std::vector<float>(std::max<int64_t>(nk, 1), grad_init), "dk");
  auto dv = lt::upload(std::vector<float>(std::max<int64_t>(nk, 1), grad_init), "dv");
  if (c.dtype == core::DType::bf16) {
    auto q = lt::upload(to_bf16(p.q), "q"), k = lt::upload(to_bf16(p.k), "k"),
         v = lt::upload(to_bf16(p.v), "v"), g = lt::upload(to_bf16(p.dout), "do");
    kcu::attention_block_forward(q.data(), k.data(), v.data(), qt, kt, mask, scale, dm, ex,
                                 ws.data(), ws.size(), o.data(), lse.data());
    kcu::attention_delta(g.data(), o.data(), c.tq, c.hq, c.d, ex, delta.data());
    kcu::attention_block_backward(q.data(), k.data(), v.data(), g.data(), lse.data(), delta.data(),
                                  qt, kt, mask, scale, dm, ex, ws.data(), ws.size(), dq.data(),
                                  dk.data(), dv.data());
  } else {
    auto q = lt::upload(p.q, "q"), k = lt::upload(p.k, "k"), v = lt::upload(p.v, "v"),
         g = lt::upload(p.dout, "do");
    kcu::attention_block_forward(q.data(), k.data(), v.data(), qt, kt, mask, scale, dm, ex,
                                 ws.data(), ws.size(), o.data(), lse.data());
    kcu::attention_delta(g.data(), o.data(), c.tq, c.hq, c.d, ex, delta.data());
    kcu::attention_block_backward(q.data(), k.data(), v.data(), g.data(), lse.data(), delta.data(),
                                  qt, kt, mask, scale, dm, ex, ws.data(), ws.size(), dq.data(),
                                  dk.data(), dv.data());
  }
  Outputs r;
  r.o = lt::download(o, nq);
  r.lse = lt::download(lse, rows);
  r.dq = lt::download(dq, nq);
  r.dk = lt::download(dk, nk);
  r.dv = lt::download(dv, nk);
  return r;
}

struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};

Reference run_ref(const Problem& p) {
  const Case& c = p.c;
  const AttnDims dm{c.tq, c.tk, c.hq, c.hkv, c.d};
  const double scale = static_cast<double>(1.0f / std::sqrt(static_cast<float>(c.d)));
  auto wide = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const auto q = wide(p.q), k = wide(p.k), v = wide(p.v), g = wide(p.dout);
  const kn::Tokens qt{p.qpos.data(), p.mask.docs ? p.qdoc.data() : nullptr};
  const kn::Tokens kt{p.kpos.data(), p.mask.docs ? p.kdoc.data() : nullptr};
  Reference r;
  r.o.resize(q.size());
  r.lse.resize(c.tq * c.hq);
  r.dq.resize(q.size());
  r.dk.resize(k.size());
  r.dv.resize(v.size());
  kn::ref::attention_forward(q.data(), k.data(), v.data(), qt, kt, p.mask, scale, dm, r.o.data(),
                             r.lse.data());
  kn::ref::attention_backward(q.data(), k.data(), v.data(), g.data(), qt, kt, p.mask, scale, dm,
                              r.dq.data(), r.dk.data(), r.dv.data());
  return r;
}

// max-error and rms-error bounds; see the header comment.
void expect_near(const std::vector<float>& got, const std::vector<double>& want, double scaled,
                 double rel, double rms_rel, const std::string& what, float offset = 0.0f) {
  ASSERT_EQ(got.size(), want.size()) << what;
  // The error of the kernel itself (not of an accumulation test's offset sum) is recorded.
  if (offset == 0.0f) lt::record_error(got, want, what.substr(what.rfind(' ') + 1));
  double maxw = 1.0, se = 0, sw = 0, worst = 0;
  size_t worst_i = 0, bad = 0;
  for (double w : want) maxw = std::max(maxw, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]) - offset, w = want[i];
    const double err = std::abs(g - w);
    if (!(err <= scaled * maxw + rel * std::abs(w))) {  // NaN fails too
      if (bad++ == 0 || err > worst) {
        worst = std::isnan(err) ? INFINITY : err;
        worst_i = i;
      }
    }
    se += (g - w) * (g - w);
    sw += w * w;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements out of bounds, worst at " << worst_i << ": got "
                     << got[worst_i] - offset << " want " << want[worst_i];
  if (rms_rel > 0 && sw > 0) {
    EXPECT_LE(std::sqrt(se / sw), rms_rel) << what << ": rms error relative to rms";
  }
}

void check_case(const Case& c) {
  const Problem p = make_problem(c);
  const Outputs g = run_gpu(p);
  const Reference r = run_ref(p);
  const bool bf = c.dtype == core::DType::bf16;
  const double o_tol = bf ? 2e-2 : 2e-5, o_rel = bf ? 0.0 : 2e-5, o_rms = bf ? 5e-3 : 0.0;
  const double g_tol = bf ? 3e-2 : 1e-4, g_rel = bf ? 0.0 : 1e-4, g_rms = bf ? 1e-2 : 0.0;
  // Rows that see nothing: exactly -inf, o exactly 0; the others within the bounds.
  std::vector<float> lse_got;
  std::vector<double> lse_want;
  int64_t empty_rows = 0;
  for (size_t i = 0; i < r.lse.size(); ++i) {
    if (std::isinf(r.lse[i]) && r.lse[i] < 0) {
      ++empty_rows;
      EXPECT_TRUE(std::isinf(g.lse[i]) && g.lse[i] < 0)
          << c.name << " row " << i << " lse " << g.lse[i];
      for (int64_t e = 0; e < c.d; ++e) {
        EXPECT_EQ(g.o[i * c.d + e], 0.0f) << c.name << " empty row " << i;
        EXPECT_EQ(g.dq[i * c.d + e], 0.0f) << c.name << " empty row " << i;
      }
    } else {
      lse_got.push_back(g.lse[i]);
      lse_want.push_back(r.lse[i]);
    }
  }
  ::testing::Test::RecordProperty("empty_rows", std::to_string(empty_rows));
  expect_near(lse_got, lse_want, bf ? 1e-4 : 2e-5, bf ? 1e-4 : 2e-5, 0, c.name + " lse");
  expect_near(g.o, r.o, o_tol, o_rel, o_rms, c.name + " o");
  expect_near(g.dq, r.dq, g_tol, g_rel, g_rms, c.name + " dq");
  expect_near(g.dk, r.dk, g_tol, g_rel, g_rms, c.name + " dk");
  expect_near(g.dv, r.dv, g_tol, g_rel, g_rms, c.name + " dv");
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  uint64_t seed = 1000;
  auto add = [&](core::DType dt, int64_t d, int64_t hq, int64_t hkv, MaskKind m, Layout l,
                 int64_t tq, int64_t tk, int64_t qr, int64_t kr) {
    Case c;
    c.dtype = dt;
    c.d = d;
    c.hq = hq;
    c.hkv = hkv;
    c.mask = m;
    c.layout = l;
    c.tq = tq;
    c.tk = tk;
    c.qrank = qr;
    c.krank = kr;
    c.seed = seed += 10;
    c.name = std::string(core::dtype_name(dt)) + "_d" + std::to_string(d) + "_hq" +
             std::to_string(hq) + "_hkv" + std::to_string(hkv) + "_" + mask_name(m) + "_" +
             layout_name(l) + "_tq" + std::to_string(tq) + "_tk" + std::to_string(tk) + "_q" +
             std::to_string(qr) + "k" + std::to_string(kr);
    out.push_back(c);
  };
  const core::DType f32 = core::DType::f32, b16 = core::DType::bf16;
  // Every mask, on both paths (bf16 at D = 64 and 128: tensor cores; fp32 at D = 24: generic).
  for (MaskKind m : {MaskKind::full, MaskKind::causal, MaskKind::window, MaskKind::docs,
                     MaskKind::block_sparse, MaskKind::padding}) {
    add(b16, 64, 4, 2, m, Layout::contiguous, 131, 197, 2, 1);
    add(b16, 128, 4, 1, m, Layout::contiguous, 197, 131, 1, 1);  // the diagonal block
    add(f32, 24, 4, 2, m, Layout::contiguous, 131, 197, 2, 1);
  }
  // Every layout, causal, at a ring offset where queries are earlier (many rows see nothing) and
  // later than the keys, both paths.
  for (Layout l : {Layout::contiguous, Layout::zigzag, Layout::striped, Layout::block_striped}) {
    add(b16, 128, 8, 2, MaskKind::causal, l, 160, 160, 1, 2);
    add(b16, 64, 8, 8, MaskKind::causal, l, 160, 160, 3, 0);
    add(f32, 64, 8, 2, MaskKind::causal, l, 160, 160, 1, 2);
    add(b16, 64, 4, 4, MaskKind::window, l, 130, 130, 2, 2);
  }
  // GQA 1, 2, 4, 8 query heads per kv head.
  for (int64_t gqa : {1, 2, 4, 8}) {
    add(b16, 128, 8, 8 / gqa, MaskKind::causal, Layout::zigzag, 97, 203, 2, 1);
    add(f32, 40, 8, 8 / gqa, MaskKind::docs, Layout::contiguous, 97, 203, 2, 1);
  }
  // Odd head dims (generic kernels, bf16 and fp32), single tokens, a ragged single tile.
  add(b16, 40, 2, 1, MaskKind::causal, Layout::contiguous, 77, 77, 0, 0);
  add(f32, 72, 3, 1, MaskKind::full, Layout::contiguous, 1, 1, 0, 0);
  add(b16, 64, 2, 2, MaskKind::full, Layout::contiguous, 1, 65, 0, 0);
  add(b16, 128, 2, 2, MaskKind::causal, Layout::contiguous, 63, 1, 0, 0);
  add(f32, 1, 1, 1, MaskKind::causal, Layout::contiguous, 5, 9, 0, 0);
  return out;
}

// Forces the tensor-core kernels' tiles per thread block for a scope (the default picks by grid
// size: these small cases would only ever see blocks of one tile).
class BlockTiles {
 public:
  explicit BlockTiles(int tiles) : prev_(kcu::set_attention_block_tiles(tiles)) {}
  ~BlockTiles() { kcu::set_attention_block_tiles(prev_); }
  BlockTiles(const BlockTiles&) = delete;
  BlockTiles& operator=(const BlockTiles&) = delete;

 private:
  int prev_;
};

class CudaAttention : public ::testing::TestWithParam<Case> {};

// Both block shapes of the tensor-core kernels (one 64-row tile per block and two).
TEST_P(CudaAttention, MatchesTheFp64Twin) {
  LONGSEQ_NEED_GPU();
  for (int tiles : {1, 2}) {
    SCOPED_TRACE("block tiles " + std::to_string(tiles));
    const BlockTiles forced(tiles);
    check_case(GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaAttention, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// Every output bit for bit on a repeat (no atomics, fixed orders), on both paths.
TEST(CudaAttentionDeterminism, RepeatsAreBitIdentical) {
  LONGSEQ_NEED_GPU();
  for (core::DType dt : {core::DType::bf16, core::DType::f32}) {
    Case c;
    c.dtype = dt;
    c.d = dt == core::DType::bf16 ? 128 : 32;
    c.hq = 8;
    c.hkv = 2;
    c.tq = c.tk = 300;
    c.qrank = c.krank = 1;
    c.mask = MaskKind::docs;
    c.layout = Layout::zigzag;
    c.name = "repeat";
    const Problem p = make_problem(c);
    const Outputs a = run_gpu(p), b = run_gpu(p);
    auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
      return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * 4) == 0;
    };
    EXPECT_TRUE(same(a.o, b.o)) << core::dtype_name(dt);
    EXPECT_TRUE(same(a.lse, b.lse)) << core::dtype_name(dt);
    EXPECT_TRUE(same(a.dq, b.dq)) << core::dtype_name(dt);
    EXPECT_TRUE(same(a.dk, b.dk)) << core::dtype_name(dt);
    EXPECT_TRUE(same(a.dv, b.dv)) << core::dtype_name(dt);
    // The block shape (one or two tiles) does not move a bit either: each warp computes the same.
    for (int tiles : {1, 2}) {
      const BlockTiles forced(tiles);
      const Outputs t = run_gpu(p);
      EXPECT_TRUE(same(a.o, t.o)) << core::dtype_name(dt) << " tiles " << tiles;
      EXPECT_TRUE(same(a.lse, t.lse)) << core::dtype_name(dt) << " tiles " << tiles;
      EXPECT_TRUE(same(a.dq, t.dq)) << core::dtype_name(dt) << " tiles " << tiles;
      EXPECT_TRUE(same(a.dk, t.dk)) << core::dtype_name(dt) << " tiles " << tiles;
      EXPECT_TRUE(same(a.dv, t.dv)) << core::dtype_name(dt) << " tiles " << tiles;
    }
  }
}

// The backward accumulates into dq, dk, dv (as the CPU's: a ring adds every block's gradients).
TEST(CudaAttentionContract, BackwardAccumulates) {
  LONGSEQ_NEED_GPU();
  for (core::DType dt : {core::DType::bf16, core::DType::f32}) {
    Case c;
    c.dtype = dt;
    c.d = 64;
    c.hq = 4;
    c.hkv = 2;
    c.tq = 100;
    c.tk = 90;
    c.mask = MaskKind::causal;
    c.qrank = c.krank = 1;
    c.name = std::string("accumulate_") + std::string(core::dtype_name(dt));
    const Problem p = make_problem(c);
    const Outputs g = run_gpu(p, 0.5f);
    const Reference r = run_ref(p);
    const bool bf = dt == core::DType::bf16;
    expect_near(g.dq, r.dq, bf ? 3e-2 : 1e-4, bf ? 0 : 1e-4, bf ? 1e-2 : 0, c.name + " dq", 0.5f);
    expect_near(g.dk, r.dk, bf ? 3e-2 : 1e-4, bf ? 0 : 1e-4, bf ? 1e-2 : 0, c.name + " dk", 0.5f);
    expect_near(g.dv, r.dv, bf ? 3e-2 : 1e-4, bf ? 0 : 1e-4, bf ? 1e-2 : 0, c.name + " dv", 0.5f);
  }
}

// Tk = 0: every row sees nothing (o = 0, lse = -inf); Tq = 0: nothing to do.
TEST(CudaAttentionContract, EmptyBlocks) {
  LONGSEQ_NEED_GPU();
  const core::Exec ex = lt::gpu_exec();
  const AttnDims dm{5, 0, 2, 1, 64};
  std::vector<int64_t> pos = {0, 1, 2, 3, 4};
  auto qpos = lt::upload(pos, "qpos"), kpos = lt::upload(std::vector<int64_t>{}, "kpos");
  auto q = lt::upload(to_bf16(std::vector<float>(5 * 2 * 64, 1.0f)), "q");
  auto kv = lt::upload(to_bf16(std::vector<float>(64, 1.0f)), "kv");
  auto o = lt::upload(std::vector<float>(5 * 2 * 64, NAN), "o");
  auto lse = lt::upload(std::vector<float>(10, NAN), "lse");
  core::Buffer<uint8_t> ws(std::max<size_t>(kcu::attention_workspace_bytes(dm), 16), ex.device);
  kcu::attention_block_forward(q.data(), kv.data(), kv.data(), {qpos.data(), nullptr},
                               {kpos.data(), nullptr}, kn::Mask{}, 0.125f, dm, ex, ws.data(),
                               ws.size(), o.data(), lse.data());
  for (float x : lt::download(o, 640)) ASSERT_EQ(x, 0.0f);
  for (float x : lt::download(lse, 10)) ASSERT_TRUE(std::isinf(x) && x < 0);
}

// Bad input is a core::Error naming the component and the values.
TEST(CudaAttentionContract, RefusesBadInputByName) {
  LONGSEQ_NEED_GPU();
  const core::Exec ex = lt::gpu_exec();
  std::vector<int64_t> pos = {0, 1, 2};
  auto dpos = lt::upload(pos, "pos");
  auto x = lt::upload(std::vector<float>(3 * 4 * 512, 1.0f), "x");
  auto o = lt::upload(std::vector<float>(3 * 4 * 512, 0.0f), "o");
  core::Buffer<uint8_t> ws(4096, ex.device);
  const kn::Tokens t{dpos.data(), nullptr};
  auto fwd = [&](const AttnDims& dm, const kn::Mask& m, size_t wsb) {
    kcu::attention_block_forward(x.data(), x.data(), x.data(), t, t, m, 1.0f, dm, ex, ws.data(),
                                 wsb, o.data(), o.data());
  };
  auto expect_error = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one naming " << needle;
    } catch (const core::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("kernels.cuda.attention"), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  expect_error([&] { fwd({3, 3, 4, 4, 300}, kn::Mask{}, 4096); }, "d=300");
  expect_error([&] { fwd({3, 3, 4, 3, 64}, kn::Mask{}, 4096); }, "hkv=3");
  expect_error([&] { fwd({3, 3, 4, 4, 64}, kn::Mask{}, 8); }, "workspace");
  kn::Mask docs;
  docs.docs = true;
  expect_error([&] { fwd({3, 3, 4, 4, 64}, docs, 4096); }, "document ids");
}

// A CPU context is refused naming the kernel (no GPU needed: the check comes first).
TEST(CudaAttentionContract, RefusesACpuContext) {
  const AttnDims dm{1, 1, 1, 1, 64};
  try {
    kcu::attention_block_forward(static_cast<const float*>(nullptr), nullptr, nullptr, {}, {},
                                 kn::Mask{}, 1.0f, dm, core::Exec::cpu(1), nullptr, 0, nullptr,
                                 nullptr);
    ADD_FAILURE() << "a CPU context was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_block_forward"), std::string::npos) << e.what();
  }
}

}  // namespace
