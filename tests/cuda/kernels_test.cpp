// kernels/cuda row and elementwise kernels (rmsnorm, swiglu, rope, adamw, embedding, the LM head's
// bf16 path and label check) against their
// fp64 specification: kernels/ref where it exists, a plain loop here where it does not (AdamW,
// embedding). The registry's cases (kernel_cases_test.cpp in this folder) cover the shapes every
// backend shares; this file covers what is particular to the GPU: shapes past one block of 256
// threads and past the grid-stride cap, odd sizes (1 row, C = 33, D/2 = 33), aliasing, the
// accumulate modes, bitwise determinism, a non-blocking stream, and the refusal of a CPU context
// (the only test here that runs without a GPU).
//
// Tolerances (tests/README.md rule 1; inputs standard normal unless stated):
//  * Values computed from a row sum taken in fp64 (rmsnorm out, rstd, dx): the registry's rmsnorm
//    bounds, out/dx 1e-5 + 1e-5 rel, rstd 1e-6 + 1e-6 rel: the sum is exact to fp64, what is left
//    is a handful of fp32 roundings of O(1) values (a few 1e-7).
//  * Sums of n fp32 terms accumulated in fp32 (rmsnorm dweight over T rows, embedding dweight):
//    tests/kernels/gemm_test.cpp's rule for K-term products, |err| <= (1e-6 + 4e-7 (n + 2))
//    (1 + |ref|): the worst-case recursive-summation bound grows like n u with u = 6e-8 per term
//    of magnitude ~1; 4e-7 leaves room for terms up to ~6 in magnitude.
//  * SwiGLU: the registry's 1e-6 + 1e-6 rel (expf within 2 ulp, a handful of products).
//  * RoPE: the registry's 1e-5 + 1e-5 rel (angles to 1e6 rad in fp64, cos/sin rounded to fp32);
//    against the CPU kernel on the same table 1e-6 + 1e-6 rel (identical fp32 cos/sin and
//    expressions; only FMA contraction may differ: 1-2 ulp of O(1) values).
//  * AdamW (the reference takes the CPU step's fp32 hyper-parameters and bias corrections, so only
//    the fp32 arithmetic differs): m 1e-6 + 1e-6 rel (per step a few roundings of terms up to
//    0.1 |g| ~ 0.5, 3 steps: ~3e-7, m may cancel to ~0 so the bound is absolute); v 1e-12 + 1e-6
//    rel (positive terms, a few ulps per step); parameters 1e-6 + 1e-6 rel (the update is an O(1)
//    ratio with a few ulps of error times lr <= 6e-3, then one rounding of p).
//  * LM head at bf16 compute, against the fp64 twin on the bf16-rounded hidden and weight (so the
//    logits' operands are the same): loss sum within the registry's fp32 bound (the logits'
//    products of bf16 values are exact in fp32, only their fp32 sums round) plus the logits'
//    rounding to bf16, sum over counted rows of 2^-9 (max |z| + |z_label|); dhidden and dweight
//    within 2^-8 sum |terms| + the fp32 bound (dlogits rounded to bf16, relative 2^-9, before
//    its products; 2x margin for the fp32 softmax before it) plus what the logits' rounding does
//    to the softmax (a factor within exp(+-2^-8 max |z|) on each p_j), carried by the products.
//  * Embedding: the gather is a copy (exact); the backward is compared bit for bit with the
//    CPU's fp32 loop in token order (model::embedding_backward's), which the GPU kernel follows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_test_util.hpp"
#include "kernels/kernel_cases.hpp"
#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/rope.hpp"
#include "longseq/kernels/cuda/adamw.hpp"
#include "longseq/kernels/cuda/attention.hpp"
#include "longseq/kernels/cuda/device.hpp"
#include "longseq/kernels/cuda/embedding.hpp"
#include "longseq/kernels/cuda/gemm.hpp"
#include "longseq/kernels/cuda/lm_head.hpp"
#include "longseq/kernels/cuda/merge.hpp"
#include "longseq/kernels/cuda/rmsnorm.hpp"
#include "longseq/kernels/cuda/rope.hpp"
#include "longseq/kernels/cuda/swiglu.hpp"
#include "longseq/kernels/ref/cross_entropy.hpp"
#include "longseq/kernels/ref/rmsnorm.hpp"
#include "longseq/kernels/ref/rope.hpp"
#include "longseq/kernels/ref/swiglu.hpp"
#include "model/model_test_util.hpp"

namespace {

namespace kcu = longseq::kernels::cuda;
namespace kr = longseq::kernels::ref;
namespace lt = longseq::test;
using longseq::core::Buffer;
using longseq::core::Exec;

// The bound for a sum of n fp32 terms accumulated in fp32 (header comment), as atol + rtol |ref|.
std::pair<double, double> fp32_sum_tol(int64_t n) {
  const double tol = 1e-6 + 4e-7 * static_cast<double>(n + 2);
  return {tol, tol};
}

// ---- refusals (no GPU needed) -------------------------------------------------------------------

TEST(CudaKernelExec, EveryEntryRefusesACpuContextNamingItself) {
  const Exec cpu = Exec::cpu(1);
  float* p = nullptr;
  const longseq::core::bf16* h = nullptr;
  const int64_t pos[1] = {0};
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"rmsnorm_forward", [&] { kcu::rmsnorm_forward(p, p, 1, 1, 1e-5f, p, p, cpu); }},
      {"rmsnorm_backward", [&] { kcu::rmsnorm_backward(p, p, p, p, 1, 1, p, p, false, cpu); }},
      {"swiglu_forward", [&] { kcu::swiglu_forward(p, p, 1, p, cpu); }},
      {"swiglu_backward", [&] { kcu::swiglu_backward(p, p, p, 1, p, p, cpu); }},
      {"RopeTable", [&] { kcu::RopeTable(pos, 1, 2, 1e4, cpu); }},
      {"RopeTable::forward", [&] { kcu::RopeTable().forward(p, 1, cpu); }},
      {"RopeTable::backward", [&] { kcu::RopeTable().backward(p, 1, cpu); }},
      {"gemm_f32",
       [&] { kcu::gemm_f32(cpu, false, false, 1, 1, 1, 1.0f, p, 1, p, 1, 0.0f, p, 1); }},
      {"gemm_bf16",
       [&] { kcu::gemm_bf16(cpu, false, false, 1, 1, 1, 1.0f, h, 1, h, 1, 0.0f, p, 1); }},
      {"gemm",
       [&] {
         kcu::gemm(longseq::core::DType::bf16, cpu, false, false, 1, 1, 1, 1.0f, p, 1, p, 1, 0.0f,
                   p, 1);
       }},
      {"gemm_f32_simple",
       [&] { kcu::gemm_f32_simple(cpu, false, false, 1, 1, 1, 1.0f, p, 1, p, 1, 0.0f, p, 1); }},
      {"linear_forward", [&] { kcu::linear_forward(p, p, 1, 1, 1, p, false, cpu); }},
      {"linear_backward", [&] { kcu::linear_backward(p, p, p, 1, 1, 1, p, false, p, cpu); }},
      {"adamw_step", [&] { kcu::adamw_step(p, p, p, p, nullptr, 1, kcu::AdamWStep{}, cpu); }},
      {"embedding_forward", [&] { kcu::embedding_forward(nullptr, nullptr, p, 1, 1, 1, p, cpu); }},
      {"embedding_backward",
       [&] { kcu::embedding_backward(nullptr, nullptr, p, 1, 1, 1, p, cpu); }},
      {"round_to_bf16", [&] { kcu::round_to_bf16(p, 1, nullptr, cpu); }},
      {"merge_partials", [&] { kcu::merge_partials(p, p, p, p, 1, 1, 1, cpu); }},
      {"attention_delta", [&] { kcu::attention_delta(p, p, 1, 1, 1, cpu, p); }},
      {"lm_head_ce_fused",
       [&] {
         kcu::LmHeadOptions o;
         o.exec = cpu;
         kcu::lm_head_ce_fused(p, p, nullptr, {1, 1, 1}, 1.0, p, p, o);
       }},
  };
  for (const auto& [name, call] : calls) {
    try {
      call();
      ADD_FAILURE() << name << " ran with a CPU context";
    } catch (const longseq::core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("[kernels] " + name +
                                           " is a CUDA kernel but was called "
                                           "with a cpu context"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(CudaRope, RefusesOddHeadDimAndBadThetaBeforeTouchingTheGpu) {
  const int64_t pos[1] = {0};
  for (auto [d, theta, want] : {std::tuple{int64_t{7}, 1e4, "rope head dim 7 must be even"},
                                std::tuple{int64_t{8}, 0.0, "rope theta must be > 0, got 0"}}) {
    try {
      kcu::RopeTable(pos, 1, d, theta, Exec::gpu(longseq::core::Device::cuda(0), nullptr));
      ADD_FAILURE() << "accepted d " << d << " theta " << theta;
    } catch (const longseq::core::Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[kernels]"), std::string::npos) << e.what();
    }
  }
}

// ---- RMSNorm ------------------------------------------------------------------------------------

struct RmsOut {
  std::vector<float> out, rstd, dx, dw;
};

// Forward and backward on the GPU; dx and dweight start from dx0, dw0 (accumulate) or are
// overwritten / zeroed.
RmsOut rmsnorm_gpu(const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>& dout, int64_t t, int64_t c, float eps, bool accumulate,
                   const std::vector<float>& dx0, const std::vector<float>& dw0, const Exec& ex) {
  auto dxx = lt::upload(x), dww = lt::upload(w), ddo = lt::upload(dout);
  Buffer<float> out(static_cast<size_t>(t * c), ex.device), rstd(static_cast<size_t>(t), ex.device);
  auto ddx = lt::upload(dx0), ddw = lt::upload(dw0);
  kcu::rmsnorm_forward(dxx.data(), dww.data(), t, c, eps, out.data(), rstd.data(), ex);
  kcu::rmsnorm_backward(ddo.data(), dxx.data(), dww.data(), rstd.data(), t, c, ddx.data(),
                        ddw.data(), accumulate, ex);
  return {lt::download(out, t * c), lt::download(rstd, t), lt::download(ddx, t * c),
          lt::download(ddw, c)};
}

TEST(CudaRmsNorm, MatchesTheFp64TwinOnOddAndLargeShapes) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  // 1 row; C = 33; C past one block of 256 threads; T past several 16-row groups of dweight's
  // first stage and C past 16 blocks of columns (the scalar path: C % 4 != 0). The float4 path
  // (C % 4 == 0, C <= 8192): 250 float4 (one per thread, some idle); C = 4096 (4 per thread) with
  // a ragged last group (33 = 2 x 16 + 1); 1501 float4 (8 per thread, the last ragged).
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},      {7, 33},    {3, 1000},
                                                {130, 4099}, {33, 4096}, {18, 6004}};
  uint64_t seed = 100;
  for (auto [t, c] : shapes) {
    const float eps = 1e-5f;
    auto x = lt::normal_f(t * c, seed), w = lt::normal_f(c, seed + 1),
         dout = lt::normal_f(t * c, seed + 2);
    seed += 3;
    const RmsOut g = rmsnorm_gpu(x, w, dout, t, c, eps, false, std::vector<float>(t * c, NAN),
                                 std::vector<float>(c, 0.0f), ex);
    std::vector<double> ro(t * c), rr(t), rdx(t * c), rdw(c);
    kr::rmsnorm_forward(lt::widen(x).data(), lt::widen(w).data(), t, c, eps, ro.data(), rr.data());
    kr::rmsnorm_backward(lt::widen(dout).data(), lt::widen(x).data(), lt::widen(w).data(), t, c,
                         eps, rdx.data(), rdw.data());
    const std::string at = "t" + std::to_string(t) + "_c" + std::to_string(c);
    lt::expect_close(g.out, ro, 1e-5, 1e-5, "rmsnorm out " + at);
    lt::expect_close(g.rstd, rr, 1e-6, 1e-6, "rmsnorm rstd " + at);
    lt::expect_close(g.dx, rdx, 1e-5, 1e-5, "rmsnorm dx " + at);
    const auto [atol, rtol] = fp32_sum_tol(t);
    lt::expect_close(g.dw, rdw, atol, rtol, "rmsnorm dweight " + at);
  }
}

// accumulate: dx += and dweight += on top of what they held; the forward may write over x.
TEST(CudaRmsNorm, AccumulateAddsAndOutMayAliasX) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  const int64_t t = 5, c = 300;
  auto x = lt::normal_f(t * c, 7), w = lt::normal_f(c, 8), dout = lt::normal_f(t * c, 9);
  auto dx0 = lt::normal_f(t * c, 10), dw0 = lt::normal_f(c, 11);
  const RmsOut plain = rmsnorm_gpu(x, w, dout, t, c, 1e-5f, false, std::vector<float>(t * c),
                                   std::vector<float>(c, 0.0f), ex);
  const RmsOut acc = rmsnorm_gpu(x, w, dout, t, c, 1e-5f, true, dx0, dw0, ex);
  std::vector<double> want_dx(t * c), want_dw(c);
  for (int64_t i = 0; i < t * c; ++i) want_dx[i] = double(dx0[i]) + plain.dx[i];
  for (int64_t j = 0; j < c; ++j) want_dw[j] = double(dw0[j]) + plain.dw[j];
  // One fp32 addition on top of the same values: half an ulp of the sum.
  lt::expect_close(acc.dx, want_dx, 1e-6, 1e-6, "rmsnorm dx accumulate");
  lt::expect_close(acc.dw, want_dw, 1e-6, 1e-6, "rmsnorm dweight accumulate");

  auto d = lt::upload(x), dw = lt::upload(w);
  Buffer<float> rstd(t, ex.device);
  kcu::rmsnorm_forward(d.data(), dw.data(), t, c, 1e-5f, d.data(), rstd.data(), ex);
  EXPECT_EQ(lt::download(d, t * c), plain.out) << "in place differs from out of place";
}

// Same inputs, same bits: every reduction has a fixed order (no atomics), on any stream.
TEST(CudaRmsNorm, BitwiseReproducibleOnAnyStream) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  const int64_t t = 200, c = 777;
  auto x = lt::normal_f(t * c, 20), w = lt::normal_f(c, 21), dout = lt::normal_f(t * c, 22);
  const std::vector<float> dx0(t * c), dw0(c, 0.0f);
  const RmsOut a = rmsnorm_gpu(x, w, dout, t, c, 1e-6f, false, dx0, dw0, ex);
  const RmsOut b = rmsnorm_gpu(x, w, dout, t, c, 1e-6f, false, dx0, dw0, ex);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.rstd, b.rstd);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.dw, b.dw);

  // The same work on a non-blocking stream: the kernels are queued there, and the stream is
  // synchronised before the (legacy-stream) copies read the results back.
  kcu::Stream stream;
  const Exec on_stream = Exec::gpu(ex.device, stream.get());
  auto dxx = lt::upload(x), dww = lt::upload(w), ddo = lt::upload(dout);
  Buffer<float> out(t * c, ex.device), rstd(t, ex.device), ddx(t * c, ex.device), ddw(c, ex.device);
  kcu::rmsnorm_forward(dxx.data(), dww.data(), t, c, 1e-6f, out.data(), rstd.data(), on_stream);
  kcu::rmsnorm_backward(ddo.data(), dxx.data(), dww.data(), rstd.data(), t, c, ddx.data(),
                        ddw.data(), false, on_stream);
  stream.synchronize();
  EXPECT_EQ(lt::download(out, t * c), a.out);
  EXPECT_EQ(lt::download(ddx, t * c), a.dx);
  EXPECT_EQ(lt::download(ddw, c), a.dw);
}

// ---- SwiGLU -------------------------------------------------------------------------------------

TEST(CudaSwiglu, MatchesTheFp64TwinPastTheGridCap) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  // 2^24 + 37 values: more than the 2^16 blocks x 256 threads of one grid, so the grid-stride
  // loop's second round runs for the scalar loops (the float4 ones take 4 values per thread and
  // reach it at 2^26); 37 and 2^24 + 37 leave one value past the last float4.
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{4099}, (int64_t{1} << 24) + 37}) {
    auto g = lt::normal_f(n, 50, 3.0), u = lt::normal_f(n, 51), dout = lt::normal_f(n, 52);
    if (n >= 4) {  // the tails: exp overflows to inf (sigmoid 0), or sigmoid rounds to 1
      g[0] = -100.0f;
      g[1] = 100.0f;
      g[2] = -88.0f;
      g[3] = 0.0f;
    }
    auto dg = lt::upload(g), du = lt::upload(u), dd = lt::upload(dout);
    Buffer<float> out(n, ex.device), dgate(n, ex.device), dup(n, ex.device);
    kcu::swiglu_forward(dg.data(), du.data(), n, out.data(), ex);
    kcu::swiglu_backward(dd.data(), dg.data(), du.data(), n, dgate.data(), dup.data(), ex);
    std::vector<double> ro(n), rdg(n), rdu(n);
    kr::swiglu_forward(lt::widen(g).data(), lt::widen(u).data(), n, ro.data());
    kr::swiglu_backward(lt::widen(dout).data(), lt::widen(g).data(), lt::widen(u).data(), n,
                        rdg.data(), rdu.data());
    const std::string at = "n" + std::to_string(n);
    lt::expect_close(lt::download(out, n), ro, 1e-6, 1e-6, "swiglu out " + at);
    lt::expect_close(lt::download(dgate, n), rdg, 1e-6, 1e-6, "swiglu dgate " + at);
    lt::expect_close(lt::download(dup, n), rdu, 1e-6, 1e-6, "swiglu dup " + at);
  }
}

// out may alias gate; dgate may alias gate and dup may alias up (the MLP's in-place backward).
TEST(CudaSwiglu, OutputsMayOverwriteTheirInputs) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  const int64_t n = 1000;
  auto g = lt::normal_f(n, 60, 3.0), u = lt::normal_f(n, 61), dout = lt::normal_f(n, 62);
  auto dg = lt::upload(g), du = lt::upload(u), dd = lt::upload(dout);
  Buffer<float> out(n, ex.device), dgate(n, ex.device), dup(n, ex.device);
  kcu::swiglu_forward(dg.data(), du.data(), n, out.data(), ex);
  kcu::swiglu_backward(dd.data(), dg.data(), du.data(), n, dgate.data(), dup.data(), ex);
  const auto want_out = lt::download(out, n), want_dg = lt::download(dgate, n),
             want_du = lt::download(dup, n);
  auto g2 = lt::upload(g);
  kcu::swiglu_forward(g2.data(), du.data(), n, g2.data(), ex);
  EXPECT_EQ(lt::download(g2, n), want_out);
  auto g3 = lt::upload(g), u3 = lt::upload(u);
  kcu::swiglu_backward(dd.data(), g3.data(), u3.data(), n, g3.data(), u3.data(), ex);
  EXPECT_EQ(lt::download(g3, n), want_dg);
  EXPECT_EQ(lt::download(u3, n), want_du);

  // Pointers one float past 16-byte alignment take the scalar loops: the same expressions as the
  // float4 loops (only FMA contraction could differ between the two: 1-2 ulp of O(1) values).
  Buffer<float> out1(n, ex.device), dg1(n, ex.device), du1(n, ex.device);
  kcu::swiglu_forward(dg.data() + 1, du.data() + 1, n - 1, out1.data() + 1, ex);
  kcu::swiglu_backward(dd.data() + 1, dg.data() + 1, du.data() + 1, n - 1, dg1.data() + 1,
                       du1.data() + 1, ex);
  const auto tail = [](const std::vector<float>& v) {
    return std::vector<float>(v.begin() + 1, v.end());
  };
  const auto wide = [&](const std::vector<float>& v) { return lt::widen(tail(v)); };
  lt::expect_close(tail(lt::download(out1, n)), wide(want_out), 1e-6, 1e-6, "swiglu out unaligned");
  lt::expect_close(tail(lt::download(dg1, n)), wide(want_dg), 1e-6, 1e-6, "swiglu dgate unaligned");
  lt::expect_close(tail(lt::download(du1, n)), wide(want_du), 1e-6, 1e-6, "swiglu dup unaligned");
}

// ---- RoPE ---------------------------------------------------------------------------------------

// Forward and backward against the twin; padding rows bit for bit; backward undoes forward.
TEST(CudaRope, MatchesTheFp64TwinWithPaddingAndLargePositions) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  struct Case {
    int64_t h, d;
    std::vector<int64_t> pos;
    double theta;
  };
  // D = 66: 33 pairs per head (no multiple of 32); T x H x D/2 past one block; 1 token.
  const std::vector<Case> cases = {
      {3, 66, {0, 1, -1, 4097, 1000000, 77, -5}, 500000.0},
      {32, 128, std::vector<int64_t>(40, 0), 10000.0},
      {1, 2, {999999}, 10000.0},
  };
  uint64_t seed = 70;
  for (Case cs : cases) {
    const int64_t t = static_cast<int64_t>(cs.pos.size()), thd = t * cs.h * cs.d;
    if (cs.h == 32)
      for (int64_t i = 0; i < t; ++i) cs.pos[i] = i % 9 == 4 ? -1 : 131 * i;
    auto x = lt::normal_f(thd, seed++);
    const kcu::RopeTable table(cs.pos.data(), t, cs.d, cs.theta, ex);
    EXPECT_EQ(table.tokens(), t);
    EXPECT_EQ(table.head_dim(), cs.d);
    auto y = lt::upload(x), g = lt::upload(x);
    table.forward(y.data(), cs.h, ex);
    table.backward(g.data(), cs.h, ex);
    const auto yh = lt::download(y, thd), gh = lt::download(g, thd);
    std::vector<double> ry(thd), rg(thd);
    kr::rope_forward(lt::widen(x).data(), cs.pos.data(), t, cs.h, cs.d, cs.theta, ry.data());
    kr::rope_backward(lt::widen(x).data(), cs.pos.data(), t, cs.h, cs.d, cs.theta, rg.data());
    const std::string at =
        "t" + std::to_string(t) + "_h" + std::to_string(cs.h) + "_d" + std::to_string(cs.d);
    lt::expect_close(yh, ry, 1e-5, 1e-5, "rope forward " + at);
    lt::expect_close(gh, rg, 1e-5, 1e-5, "rope backward " + at);
    for (int64_t r = 0; r < t; ++r)
      if (cs.pos[r] < 0)
        for (int64_t j = r * cs.h * cs.d; j < (r + 1) * cs.h * cs.d; ++j) {
          ASSERT_EQ(yh[j], x[j]) << "padding row " << r << " changed (forward) " << at;
          ASSERT_EQ(gh[j], x[j]) << "padding row " << r << " changed (backward) " << at;
        }
    // backward(forward(x)) = x: a rotation and its transpose, two fp32 roundings of O(1) values.
    table.backward(y.data(), cs.h, ex);
    lt::expect_close(lt::download(y, thd), lt::widen(x), 1e-6, 1e-6, "rope round trip " + at);
  }
}

// Explicit frequencies and an attention factor: the same table as kernels/cpu's RopeTable, so the
// GPU and CPU rotations agree to an ulp or two.
TEST(CudaRope, ExplicitFrequenciesMatchTheCpuKernel) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  const int64_t t = 5, h = 4, d = 10;
  const std::vector<int64_t> pos = {3, 0, 500000, -1, 65537};
  std::vector<double> inv(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) inv[i] = 0.5 * std::pow(1e4, -2.0 * double(i) / double(d));
  auto x = lt::normal_f(t * h * d, 80);
  std::vector<float> cpu = x;
  longseq::kernels::cpu::RopeTable(pos.data(), t, inv, 1.25).forward(cpu.data(), h, 1);
  auto y = lt::upload(x);
  kcu::RopeTable(pos.data(), t, inv.data(), d / 2, 1.25, ex).forward(y.data(), h, ex);
  lt::expect_close(lt::download(y, t * h * d), lt::widen(cpu), 1e-6, 1e-6, "rope vs cpu kernel");
}

// ---- AdamW --------------------------------------------------------------------------------------

double f32(double x) {
  return static_cast<double>(static_cast<float>(x));
}

TEST(CudaAdamW, ThreeStepsMatchAnFp64Loop) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  const int64_t n = 1000003;  // past one grid-stride round of a small grid; odd
  auto p = lt::normal_f(n, 90), m = lt::normal_f(n, 91, 0.1), v = lt::normal_f(n, 92, 0.01);
  for (float& x : v) x = std::fabs(x);
  std::vector<uint8_t> decay(n);
  for (int64_t i = 0; i < n; ++i) decay[i] = i % 3 != 0;
  auto dp = lt::upload(p), dm = lt::upload(m), dv = lt::upload(v);
  auto dd = lt::upload(decay);
  std::vector<double> rp(p.begin(), p.end()), rm(m.begin(), m.end()), rv(v.begin(), v.end());
  kcu::AdamWStep s;
  s.beta1 = 0.9;
  s.beta2 = 0.95;
  s.eps = 1e-8;
  s.weight_decay = 0.1;
  for (int64_t step = 4; step < 7; ++step) {
    s.step = step;
    s.lr = 1e-3 * static_cast<double>(step);
    auto g = lt::normal_f(n, 100 + step);
    auto dg = lt::upload(g);
    kcu::adamw_step(dp.data(), dg.data(), dm.data(), dv.data(), dd.data(), n, s, ex);
    // train::adamw_step's formula in fp64, on its fp32 hyper-parameters and bias corrections.
    const double t = static_cast<double>(step + 1);
    const double b1 = f32(s.beta1), b2 = f32(s.beta2), eps = f32(s.eps);
    const double wd = f32(s.weight_decay), lr = f32(s.lr);
    const double bc1 = f32(1.0 - std::pow(s.beta1, t)), bc2 = f32(1.0 - std::pow(s.beta2, t));
    for (int64_t i = 0; i < n; ++i) {
      rm[i] = b1 * rm[i] + (1.0 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1.0 - b2) * double(g[i]) * g[i];
      double upd = (rm[i] / bc1) / (std::sqrt(rv[i] / bc2) + eps);
      if (decay[i]) upd += wd * rp[i];
      rp[i] -= lr * upd;
    }
  }
  lt::record_error(lt::download(dp, n), rp, "param");
  lt::record_error(lt::download(dm, n), rm, "m");
  lt::record_error(lt::download(dv, n), rv, "v");
  lt::expect_close(lt::download(dp, n), rp, 1e-6, 1e-6, "adamw param");
  lt::expect_close(lt::download(dm, n), rm, 1e-6, 1e-6, "adamw m");
  lt::expect_close(lt::download(dv, n), rv, 1e-12, 1e-6, "adamw v");
}

// ---- embedding ----------------------------------------------------------------------------------

struct EmbeddingCase {
  int64_t t, c, v;
};

// Tokens with repeats (a small vocabulary range for part of them) and padding rows whose ids are
// garbage (-7, V + 3: padding ids are never read as rows).
void make_tokens(const EmbeddingCase& e, std::vector<int32_t>& tokens, std::vector<int64_t>& pos,
                 uint64_t seed) {
  tokens.resize(e.t);
  pos.resize(e.t);
  const auto r = lt::normal_f(e.t, seed);
  for (int64_t i = 0; i < e.t; ++i) {
    const double u = std::fabs(r[i]);
    const int64_t id = i % 4 == 0 ? static_cast<int64_t>(u * 3) % std::min<int64_t>(e.v, 5)
                                  : static_cast<int64_t>(u * 1e6 + i) % e.v;
    tokens[i] = static_cast<int32_t>(id);
    pos[i] = 1000 + i;
    if (i % 11 == 10) {
      pos[i] = -1;
      tokens[i] = i % 2 ? -7 : static_cast<int32_t>(e.v + 3);
    }
  }
}

TEST(CudaEmbedding, ForwardGathersAndBackwardEqualsTheCpuLoopBitForBit) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  // 1 token; C = 33 with a tiny vocabulary (many repeats); C past a block of 256 threads with V
  // past 2^16 (17 sort bits); T past one block of the keys kernel. C % 4 == 0 takes the
  // forward's float4 path: 300, 64, and 2052 (513 float4: a thread with three of one chunk).
  const EmbeddingCase cases[] = {
      {1, 1, 1}, {300, 33, 7}, {1000, 300, 70001}, {5000, 64, 50}, {60, 2052, 300}};
  uint64_t seed = 200;
  for (const EmbeddingCase& e : cases) {
    std::vector<int32_t> tokens;
    std::vector<int64_t> pos;
    make_tokens(e, tokens, pos, seed++);
    auto w = lt::normal_f(e.v * e.c, seed++), dout = lt::normal_f(e.t * e.c, seed++);
    auto dw0 = lt::normal_f(e.v * e.c, seed++);
    auto dt = lt::upload(tokens);
    auto dpos = lt::upload(pos);
    auto dwt = lt::upload(w), ddo = lt::upload(dout), ddw = lt::upload(dw0);
    Buffer<float> out(e.t * e.c, ex.device);
    kcu::embedding_forward(dt.data(), dpos.data(), dwt.data(), e.t, e.c, e.v, out.data(), ex);
    kcu::embedding_backward(dt.data(), dpos.data(), ddo.data(), e.t, e.c, e.v, ddw.data(), ex);
    // model::embedding_forward / embedding_backward, as plain loops.
    std::vector<float> want_out(e.t * e.c, 0.0f), want_dw = dw0;
    for (int64_t i = 0; i < e.t; ++i) {
      if (pos[i] < 0) continue;
      for (int64_t j = 0; j < e.c; ++j) {
        want_out[i * e.c + j] = w[tokens[i] * e.c + j];
        want_dw[tokens[i] * e.c + j] += dout[i * e.c + j];
      }
    }
    const std::string at =
        "t" + std::to_string(e.t) + "_c" + std::to_string(e.c) + "_v" + std::to_string(e.v);
    EXPECT_EQ(lt::download(out, e.t * e.c), want_out) << "embedding forward " << at;
    EXPECT_EQ(lt::download(ddw, e.v * e.c), want_dw) << "embedding backward " << at;
  }
}

TEST(CudaEmbedding, ForwardRefusesAnIdOutsideTheVocabularyNamingIt) {
  LONGSEQ_NEED_GPU();
  const Exec ex = lt::gpu_exec();
  const int64_t t = 6, c = 4, v = 10;
  const std::vector<int32_t> tokens = {1, 2, -4, 3, 12, 5};  // rows 2 and 4 bad: row 2 is named
  const std::vector<int64_t> pos = {0, 1, 2, 3, 4, -1};
  auto dt = lt::upload(tokens);
  auto dpos = lt::upload(pos);
  auto w = lt::upload(lt::normal_f(v * c, 300));
  Buffer<float> out(t * c, ex.device);
  try {
    kcu::embedding_forward(dt.data(), dpos.data(), w.data(), t, c, v, out.data(), ex);
    ADD_FAILURE() << "accepted token id -4";
  } catch (const longseq::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "[kernels] token id -4 at position 2 outside the vocabulary [0, 10)"),
              std::string::npos)
        << e.what();
  }
  // The device stays usable, and a padding row's id is never checked.
  const std::vector<int32_t> ok = {1, 2, 3, 4, 5, 99};
  auto dok = lt::upload(ok);
  EXPECT_NO_THROW(
      kcu::embedding_forward(dok.data(), dpos.data(), w.data(), t, c, v, out.data(), ex));
}

// ---- LM head + cross-entropy
// ----------------------------------------------------------------------

// Inputs of the LM head tests: hidden [T, C] standard normal, weight [V, C] normal(0, 0.5), labels
// uniform with every 5th token from the 4th on ignored (the registry's lm_head_case).
struct LmHeadInputs {
  int64_t t, c, v;
  std::vector<float> h, w;
  std::vector<int32_t> labels;
  int64_t count = 0;
};
LmHeadInputs lm_head_inputs(int64_t t, int64_t c, int64_t v, uint64_t seed) {
  LmHeadInputs in{t, c, v, lt::normal_f(t * c, seed), lt::normal_f(v * c, seed + 1, 0.5), {}, 0};
  in.labels.resize(t);
  longseq::core::fill_randint(in.labels.data(), t, seed + 2, static_cast<int32_t>(v));
  for (int64_t i = 0; i < t; ++i) {
    if (i % 5 == 3) in.labels[i] = kr::kIgnoreIndex;
    in.count += in.labels[i] != kr::kIgnoreIndex;
  }
  return in;
}

struct LmHeadOut {
  kcu::LossPart loss;
  std::vector<float> dh, dw;
};
LmHeadOut run_lm_head(const LmHeadInputs& in, longseq::core::DType compute, int64_t token_tile) {
  const Exec ex = lt::gpu_exec();
  auto h = lt::upload(in.h), w = lt::upload(in.w);
  auto labels = lt::upload(in.labels);
  Buffer<float> dh(in.t * in.c, ex.device), dw(in.v * in.c, ex.device);
  kcu::LmHeadOptions o;
  o.token_tile = token_tile;
  o.compute = compute;
  o.exec = ex;
  LmHeadOut out;
  out.loss = kcu::lm_head_ce_fused(h.data(), w.data(), labels.data(), {in.t, in.c, in.v},
                                   1.0 / static_cast<double>(in.count), dh.data(), dw.data(), o);
  out.dh = lt::download(dh, in.t * in.c);
  out.dw = lt::download(dw, in.v * in.c);
  return out;
}

// Several token tiles, the last one partial (300 = 2 x 128 + 44), V past one 512-thread block:
// V = 1500 (V % 8 != 0: the row kernel's 2-byte path) and V = 4104 (8 x 513: its 16-byte path,
// one thread with a second group).
TEST(CudaLmHead, Bf16ComputeMatchesTheFp64TwinOnRoundedOperands) {
  LONGSEQ_NEED_GPU();
  for (int64_t v : {int64_t{1500}, int64_t{4104}}) {
    const std::string at = " v" + std::to_string(v);
    const LmHeadInputs in = lm_head_inputs(300, 64, v, 400);
    const LmHeadOut got = run_lm_head(in, longseq::core::DType::bf16, 128);
    EXPECT_EQ(got.loss.count, in.count);
    std::vector<double> h(in.h.size()), w(in.w.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = longseq::core::round_bf16(in.h[i]);
    for (size_t i = 0; i < w.size(); ++i) w[i] = longseq::core::round_bf16(in.w[i]);
    const double gs = 1.0 / static_cast<double>(in.count);
    const kr::LmHeadDims d{in.t, in.c, in.v};
    const auto want = kr::lm_head_ce_forward(h.data(), w.data(), in.labels.data(), d);
    std::vector<double> rdh(h.size()), rdw(w.size());
    kr::lm_head_ce_backward(h.data(), w.data(), in.labels.data(), d, gs, rdh.data(), rdw.data());
    const lt::kernel_cases_detail::LmHeadBounds fp32 = lt::kernel_cases_detail::lm_head_bounds(
        h, w, in.labels, in.t, in.c, in.v, kr::kIgnoreIndex, gs);
    // sum |terms| of dhidden and dweight: |dlogits| times |w| or |h|, from the twin's dlogits.
    // The logits' bf16 rounding (lm_head.hpp): each logit moves by at most 2^-9 |z| beyond the
    // fp32 error, so lse by at most 2^-9 max |z| of its row and loss_t by 2^-9 (max |z| +
    // |z_label|); softmax p_j by a factor within exp(+-a_t), a_t = 2^-8 max |z|, so dlogits by at
    // most gs p_j (e^a_t - 1) (g16), which the products carry as sum g16 |w| or g16 |h|.
    std::vector<double> lse(in.t), g(in.t * in.v, 0.0), g16(in.t * in.v, 0.0), z(in.t * in.v);
    kr::lm_head_ce_forward(h.data(), w.data(), in.labels.data(), d, nullptr, lse.data());
    lt::kernel_cases_detail::linear_ref_forward(h.data(), w.data(), in.t, in.c, in.v, z.data());
    double loss16 = 0;
    for (int64_t i = 0; i < in.t; ++i) {
      if (in.labels[i] == kr::kIgnoreIndex) continue;
      double zmax = 0;
      for (int64_t j = 0; j < in.v; ++j) zmax = std::max(zmax, std::fabs(z[i * in.v + j]));
      loss16 += 0x1p-9 * (zmax + std::fabs(z[i * in.v + in.labels[i]]));
      const double grow = std::expm1(0x1p-8 * zmax);
      for (int64_t j = 0; j < in.v; ++j) {
        const double p = std::exp(z[i * in.v + j] - lse[i]);
        g[i * in.v + j] = gs * (p - (j == in.labels[i] ? 1.0 : 0.0));
        g16[i * in.v + j] = gs * p * grow;
      }
    }
    std::vector<double> a(rdh.size()), b(rdw.size()), dh_abs(rdh.size()), dw_abs(rdw.size());
    lt::kernel_cases_detail::linear_ref_backward(g.data(), h.data(), w.data(), in.t, in.c, in.v,
                                                 a.data(), b.data(), dh_abs.data(), dw_abs.data());
    std::vector<double> dh16(rdh.size()), dw16(rdw.size());
    lt::kernel_cases_detail::linear_ref_backward(g16.data(), h.data(), w.data(), in.t, in.c, in.v,
                                                 a.data(), b.data(), dh16.data(), dw16.data());
    const double r16 = 0x1p-8;
    using lt::kernel_cases_detail::max_of;
    EXPECT_NEAR(got.loss.sum, want.sum, fp32.loss + loss16) << at;
    lt::expect_close(got.dh, rdh, r16 * max_of(dh_abs) + fp32.dhidden + max_of(dh16), 0,
                     "lm_head bf16 dhidden" + at);
    lt::expect_close(got.dw, rdw, r16 * max_of(dw_abs) + fp32.dweight + max_of(dw16), 0,
                     "lm_head bf16 dweight" + at);
  }
}

// bf16 compute twice: the same bits (the bf16 row kernel's fixed order, plans fixed per shape).
TEST(CudaLmHead, Bf16ComputeIsBitwiseReproducible) {
  LONGSEQ_NEED_GPU();
  const LmHeadInputs in = lm_head_inputs(200, 40, 704, 430);
  const LmHeadOut a = run_lm_head(in, longseq::core::DType::bf16, 0);
  const LmHeadOut b = run_lm_head(in, longseq::core::DType::bf16, 0);
  EXPECT_EQ(a.loss.sum, b.loss.sum);
  EXPECT_EQ(a.dh, b.dh);
  EXPECT_EQ(a.dw, b.dw);
}

// The same call twice gives the same bits (fixed reductions, plans fixed per shape), and another
// token tile the same results up to rounding (the registry's fp32 bounds).
TEST(CudaLmHead, BitwiseReproducibleAndTileIndependentUpToRounding) {
  LONGSEQ_NEED_GPU();
  const LmHeadInputs in = lm_head_inputs(200, 40, 700, 410);
  const LmHeadOut a = run_lm_head(in, longseq::core::DType::f32, 64);
  const LmHeadOut b = run_lm_head(in, longseq::core::DType::f32, 64);
  EXPECT_EQ(a.loss.sum, b.loss.sum);
  EXPECT_EQ(a.dh, b.dh);
  EXPECT_EQ(a.dw, b.dw);
  const LmHeadOut c = run_lm_head(in, longseq::core::DType::f32, 0);
  std::vector<double> h(in.h.begin(), in.h.end()), w(in.w.begin(), in.w.end());
  const lt::kernel_cases_detail::LmHeadBounds tol = lt::kernel_cases_detail::lm_head_bounds(
      h, w, in.labels, in.t, in.c, in.v, kr::kIgnoreIndex, 1.0 / static_cast<double>(in.count));
  EXPECT_NEAR(a.loss.sum, c.loss.sum, 2 * tol.loss);
  lt::expect_close(a.dh, std::vector<double>(c.dh.begin(), c.dh.end()), 2 * tol.dhidden, 0,
                   "dhidden, tile 64 vs auto");
  lt::expect_close(a.dw, std::vector<double>(c.dw.begin(), c.dw.end()), 2 * tol.dweight, 0,
                   "dweight, tile 64 vs auto");
}

// A label outside [0, V) that is not the ignore index is named after the work ran (labels live on
// the device), with the CPU's message; the first bad row is the one named.
TEST(CudaLmHead, RefusesALabelOutsideTheVocabularyNamingIt) {
  LONGSEQ_NEED_GPU();
  // f32 and bf16 compute (their row kernels differ); V = 48 at bf16 takes its 16-byte path.
  for (auto [p, v] : {std::pair{longseq::core::DType::f32, int64_t{50}},
                      std::pair{longseq::core::DType::bf16, int64_t{48}}}) {
    LmHeadInputs in = lm_head_inputs(9, 8, v, 420);
    in.labels[4] = 52;
    in.labels[6] = -7;
    try {
      run_lm_head(in, p, 4);
      ADD_FAILURE() << "accepted label 52";
    } catch (const longseq::core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("[model] label 52 at row 4 outside the vocabulary [0, " +
                                           std::to_string(v) + ") and not the ignore index -100"),
                std::string::npos)
          << e.what();
    }
    in.labels[4] = 1;
    in.labels[6] = 2;
    EXPECT_NO_THROW(run_lm_head(in, p, 4));  // the device stays usable
  }
}

TEST(CudaLmHead, RefusesAnEmptyVocabularyNamingTheDims) {
  LONGSEQ_NEED_GPU();
  kcu::LmHeadOptions o;
  o.exec = lt::gpu_exec();
  // Checked before any pointer is touched.
  try {
    kcu::lm_head_ce_fused(nullptr, nullptr, nullptr, {4, 8, 0}, 1.0, nullptr, nullptr, o);
    ADD_FAILURE() << "accepted V = 0";
  } catch (const longseq::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[kernels] lm_head_ce t=4 c=8 v=0"), std::string::npos)
        << e.what();
  }
}

}  // namespace
