// Writes seeded inputs and the fp64 reference's outputs as .npy files, for ref_vs_torch.py to
// recompute with PyTorch autograd (float64) and compare. Usage: ref_dump <out_dir>.
//
// Layout: <out_dir>/<case>/<array>.npy, one folder per case; the folder name starts with the op
// (attn_, ce_, rmsnorm_, rope_, swiglu_). Each case's params.npy holds its scalars (float64):
//   attn:    [scale, causal, window, docs, has_block_mask, block_size, num_blocks, hkv]
//   ce:      [ignore_index]
//   rmsnorm: [eps]      rope: [theta]      swiglu: []
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "longseq/core/npy.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/kernels/ref/attention.hpp"
#include "longseq/kernels/ref/cross_entropy.hpp"
#include "longseq/kernels/ref/rmsnorm.hpp"
#include "longseq/kernels/ref/rope.hpp"
#include "longseq/kernels/ref/swiglu.hpp"

namespace {

namespace core = longseq::core;
namespace kr = longseq::kernels::ref;
using longseq::kernels::Mask;
using longseq::kernels::Tokens;
using Shape = std::vector<int64_t>;

struct Writer {
  std::filesystem::path dir;
  void f64(const std::string& n, const Shape& s, const std::vector<double>& x) const {
    core::write_npy((dir / (n + ".npy")).string(), core::DType::f64, s, x.data());
  }
  void i64(const std::string& n, const Shape& s, const std::vector<int64_t>& x) const {
    core::write_npy((dir / (n + ".npy")).string(), core::DType::i64, s, x.data());
  }
  void i32(const std::string& n, const Shape& s, const std::vector<int32_t>& x) const {
    core::write_npy((dir / (n + ".npy")).string(), core::DType::i32, s, x.data());
  }
  void u8(const std::string& n, const Shape& s, const std::vector<uint8_t>& x) const {
    core::write_npy((dir / (n + ".npy")).string(), core::DType::u8, s, x.data());
  }
};

Writer open_case(const std::filesystem::path& root, const std::string& name) {
  Writer w{root / name};
  std::filesystem::create_directories(w.dir);
  return w;
}

std::vector<double> normal(size_t n, uint64_t seed, double stddev = 1.0) {
  std::vector<double> v(n);
  core::fill_normal(v.data(), n, seed, 0, 0.0, stddev);
  return v;
}

// ---- attention
// -----------------------------------------------------------------------------------

// Queries: a striped block (40, 42, ..., 62), a query at position 1 before every key, and one
// padding token. Keys: a contiguous block 30..45 that overlaps the queries' range, then padding.
// Tq = 14 != Tk = 17, so queries and keys sit at different global offsets.
constexpr int64_t kBlockSize = 8, kNumBlocks = 8;  // block mask over positions < 64

void attention_case(const std::filesystem::path& root, const std::string& kind, int64_t group,
                    uint64_t seed) {
  const int64_t hq = 4, hkv = hq / group, d = 8;
  std::vector<int64_t> qpos, kpos;
  for (int64_t i = 0; i < 12; ++i) qpos.push_back(40 + 2 * i);
  qpos.push_back(1);
  qpos.push_back(-1);
  for (int64_t j = 0; j < 16; ++j) kpos.push_back(30 + j);
  kpos.push_back(-1);
  kr::AttnDims dm{static_cast<int64_t>(qpos.size()), static_cast<int64_t>(kpos.size()), hq, hkv, d};

  Mask mask;
  std::vector<int32_t> qdoc, kdoc;
  std::vector<uint8_t> blocks;
  const bool docs = kind.find("docs") != std::string::npos;
  const bool block = kind.find("block") != std::string::npos;
  mask.causal = kind.find("causal") != std::string::npos;
  if (kind.find("window") != std::string::npos) mask.window = 6;
  if (docs) {
    // Documents of lengths 7, 11, 5, ... so boundaries fall inside both blocks.
    auto doc = [](int64_t p) {
      return p < 0 ? 0 : static_cast<int32_t>(p < 37 ? p / 7 : 5 + (p - 37) / 11);
    };
    mask.docs = true;
    for (int64_t p : qpos) qdoc.push_back(doc(p));
    for (int64_t p : kpos) kdoc.push_back(doc(p));
  }
  if (block) {
    blocks.resize(kNumBlocks * kNumBlocks);
    for (int64_t i = 0; i < kNumBlocks * kNumBlocks; ++i)
      blocks[i] = (i / kNumBlocks != 0) && (core::random_bits(seed, i) % 3 != 0);  // row 0: empty
    mask.block_mask = blocks.data();
    mask.block_size = kBlockSize;
    mask.num_blocks = kNumBlocks;
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const auto q = normal(dm.tq * hq * d, seed), k = normal(dm.tk * hkv * d, seed + 1),
             v = normal(dm.tk * hkv * d, seed + 2), dout = normal(dm.tq * hq * d, seed + 3);
  const Tokens qt{qpos.data(), docs ? qdoc.data() : nullptr};
  const Tokens kt{kpos.data(), docs ? kdoc.data() : nullptr};
  std::vector<double> o(q.size()), lse(dm.tq * hq), dq(q.size()), dk(k.size()), dv(v.size()),
      delta(dm.tq * hq);
  kr::attention_forward(q.data(), k.data(), v.data(), qt, kt, mask, scale, dm, o.data(),
                        lse.data());
  kr::attention_backward(q.data(), k.data(), v.data(), dout.data(), qt, kt, mask, scale, dm,
                         dq.data(), dk.data(), dv.data());
  kr::attention_d(o.data(), dout.data(), dm.tq, hq, d, delta.data());

  const Writer w = open_case(root, "attn_" + kind + "_g" + std::to_string(group));
  const Shape qs{dm.tq, hq, d}, ks{dm.tk, hkv, d};
  w.f64("params", {8},
        {scale, double(mask.causal), double(mask.window), double(docs), double(block),
         double(kBlockSize), double(kNumBlocks), double(hkv)});
  w.f64("q", qs, q);
  w.f64("k", ks, k);
  w.f64("v", ks, v);
  w.f64("do", qs, dout);
  w.i64("qpos", {dm.tq}, qpos);
  w.i64("kpos", {dm.tk}, kpos);
  if (docs) {
    w.i32("qdoc", {dm.tq}, qdoc);
    w.i32("kdoc", {dm.tk}, kdoc);
  }
  if (block) w.u8("block_mask", {kNumBlocks, kNumBlocks}, blocks);
  w.f64("o", qs, o);
  w.f64("lse", {dm.tq, hq}, lse);
  w.f64("delta", {dm.tq, hq}, delta);
  w.f64("dq", qs, dq);
  w.f64("dk", ks, dk);
  w.f64("dv", ks, dv);
}

// ---- LM head + cross-entropy
// ---------------------------------------------------------------------

void ce_case(const std::filesystem::path& root, const std::string& name, int32_t ignore,
             uint64_t seed) {
  const kr::LmHeadDims dm{11, 8, 13};
  const auto hidden = normal(dm.t * dm.c, seed, 2.0), weight = normal(dm.v * dm.c, seed + 1);
  std::vector<int32_t> labels(dm.t);
  core::fill_randint(labels.data(), labels.size(), seed + 2, static_cast<int32_t>(dm.v));
  labels[1] = labels[4] = labels[10] = ignore;
  labels[5] = static_cast<int32_t>(dm.v - 1);
  labels[6] = 0;
  std::vector<double> tl(dm.t), lse(dm.t), dh(hidden.size()), dw(weight.size());
  const auto ce = kr::lm_head_ce_forward(hidden.data(), weight.data(), labels.data(), dm, tl.data(),
                                         lse.data(), ignore);
  kr::lm_head_ce_backward(hidden.data(), weight.data(), labels.data(), dm,
                          1.0 / static_cast<double>(ce.count), dh.data(), dw.data(), ignore);
  const Writer w = open_case(root, name);
  w.f64("params", {1}, {double(ignore)});
  w.f64("hidden", {dm.t, dm.c}, hidden);
  w.f64("weight", {dm.v, dm.c}, weight);
  w.i32("labels", {dm.t}, labels);
  w.f64("loss", {3}, {ce.sum, double(ce.count), ce.mean()});
  w.f64("token_loss", {dm.t}, tl);
  w.f64("lse", {dm.t}, lse);
  w.f64("dhidden", {dm.t, dm.c}, dh);
  w.f64("dweight", {dm.v, dm.c}, dw);
}

// ---- RMSNorm, RoPE, SwiGLU
// -----------------------------------------------------------------------

void rmsnorm_case(const std::filesystem::path& root, uint64_t seed) {
  const int64_t t = 7, c = 16;
  const double eps = 1e-6;
  const auto x = normal(t * c, seed), wt = normal(c, seed + 1), dout = normal(t * c, seed + 2);
  std::vector<double> y(x.size()), rstd(t), dx(x.size()), dw(c);
  kr::rmsnorm_forward(x.data(), wt.data(), t, c, eps, y.data(), rstd.data());
  kr::rmsnorm_backward(dout.data(), x.data(), wt.data(), t, c, eps, dx.data(), dw.data());
  const Writer w = open_case(root, "rmsnorm");
  w.f64("params", {1}, {eps});
  w.f64("x", {t, c}, x);
  w.f64("weight", {c}, wt);
  w.f64("do", {t, c}, dout);
  w.f64("out", {t, c}, y);
  w.f64("rstd", {t}, rstd);
  w.f64("dx", {t, c}, dx);
  w.f64("dweight", {c}, dw);
}

void rope_case(const std::filesystem::path& root, double theta, uint64_t seed) {
  const int64_t t = 6, h = 3, d = 16;
  const std::vector<int64_t> pos = {0, 1, 17, 4095, 1048575, -1};
  const auto x = normal(t * h * d, seed), dout = normal(t * h * d, seed + 1);
  std::vector<double> y(x.size()), dx(x.size());
  kr::rope_forward(x.data(), pos.data(), t, h, d, theta, y.data());
  kr::rope_backward(dout.data(), pos.data(), t, h, d, theta, dx.data());
  const Writer w = open_case(root, "rope_theta" + std::to_string(static_cast<int64_t>(theta)));
  w.f64("params", {1}, {theta});
  w.f64("x", {t, h, d}, x);
  w.i64("pos", {t}, pos);
  w.f64("do", {t, h, d}, dout);
  w.f64("out", {t, h, d}, y);
  w.f64("dx", {t, h, d}, dx);
}

void swiglu_case(const std::filesystem::path& root, uint64_t seed) {
  const int64_t t = 5, f = 12;
  auto gate = normal(t * f, seed, 4.0);
  gate[0] = 40.0;
  gate[1] = -40.0;
  gate[2] = 0.0;
  const auto up = normal(t * f, seed + 1), dout = normal(t * f, seed + 2);
  std::vector<double> y(gate.size()), dg(gate.size()), du(gate.size());
  kr::swiglu_forward(gate.data(), up.data(), t * f, y.data());
  kr::swiglu_backward(dout.data(), gate.data(), up.data(), t * f, dg.data(), du.data());
  const Writer w = open_case(root, "swiglu");
  w.f64("params", {0}, {});
  w.f64("gate", {t, f}, gate);
  w.f64("up", {t, f}, up);
  w.f64("do", {t, f}, dout);
  w.f64("out", {t, f}, y);
  w.f64("dgate", {t, f}, dg);
  w.f64("dup", {t, f}, du);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ref_dump <out_dir>\n");
    return 2;
  }
  try {
    const std::filesystem::path root = argv[1];
    uint64_t seed = 1000;
    for (const char* kind : {"full", "causal", "window", "docs", "docs_causal", "block",
                             "block_causal", "window_docs", "block_docs_causal"})
      for (int64_t group : {1, 2, 4}) attention_case(root, kind, group, seed += 10);
    ce_case(root, "ce_ignore_m100", kr::kIgnoreIndex, 7);
    ce_case(root, "ce_ignore_m1", -1, 8);
    rmsnorm_case(root, 9);
    rope_case(root, 10000.0, 10);
    rope_case(root, 500000.0, 11);
    swiglu_case(root, 12);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ref_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
