#pragma once
// The CUDA backend of the kernel registry (tests/kernels/kernel_cases.hpp): kernels/cuda behind
// KernelBackend, so that every registry case runs on the GPU against the fp64 reference
// (kernel_cases_test.cpp in this folder). Kept in its own file: the registry grows virtuals
// (attention, linear, LM head) that this backend then implements here.
//
// Implements every op of the registry: rmsnorm, swiglu, rope, linear, attention (forward and
// backward; the registry's attention cases are fp32, so they run the generic kernels of
// kernels/cuda/attention.hpp), lm_head_ce (forward and backward), merge_partials and
// attention_delta. Each call copies its inputs to GPU 0, runs the kernel on the legacy default
// stream and copies the outputs back (blocking copies on the same stream: ordered). Outputs the
// contract overwrites start as NaN on the device, so a value the kernel did not write fails its
// case. The GPU is activated on first use, never at construction, so a build without a GPU can
// still list the cases (they skip).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.hpp"
#include "kernels/kernel_cases.hpp"
#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/attention.hpp"
#include "longseq/kernels/cuda/gemm.hpp"
#include "longseq/kernels/cuda/lm_head.hpp"
#include "longseq/kernels/cuda/merge.hpp"
#include "longseq/kernels/cuda/rmsnorm.hpp"
#include "longseq/kernels/cuda/rope.hpp"
#include "longseq/kernels/cuda/swiglu.hpp"

namespace longseq::test {

class CudaBackend final : public KernelBackend {
 public:
  std::string name() const override { return "cuda"; }
  bool supports(const std::string&) const override { return true; }

  void rmsnorm_forward(const float* x, const float* w, int64_t t, int64_t c, float eps, float* out,
                       float* rstd) override {
    const core::Exec ex = gpu_exec();
    auto dx = up(x, t * c), dw = up(w, c);
    core::Buffer<float> dout(n_or_1(t * c), ex.device), dr(n_or_1(t), ex.device);
    kernels::cuda::rmsnorm_forward(dx.data(), dw.data(), t, c, eps, dout.data(), dr.data(), ex);
    down(dout, out, t * c);
    down(dr, rstd, t);
  }
  void rmsnorm_backward(const float* dout, const float* x, const float* w, const float* rstd,
                        int64_t t, int64_t c, float, float* dx, float* dw) override {
    const core::Exec ex = gpu_exec();
    auto dd = up(dout, t * c), dxx = up(x, t * c), dww = up(w, c), dr = up(rstd, t);
    // dweight accumulates: it starts from zero (a new device buffer is zeroed).
    core::Buffer<float> gx(n_or_1(t * c), ex.device), gw(n_or_1(c), ex.device);
    kernels::cuda::rmsnorm_backward(dd.data(), dxx.data(), dww.data(), dr.data(), t, c, gx.data(),
                                    gw.data(), false, ex);
    down(gx, dx, t * c);
    down(gw, dw, c);
  }
  void swiglu_forward(const float* g, const float* u, int64_t n, float* out) override {
    const core::Exec ex = gpu_exec();
    auto dg = up(g, n), du = up(u, n);
    core::Buffer<float> o(n_or_1(n), ex.device);
    kernels::cuda::swiglu_forward(dg.data(), du.data(), n, o.data(), ex);
    down(o, out, n);
  }
  void swiglu_backward(const float* dout, const float* g, const float* u, int64_t n, float* dg,
                       float* du) override {
    const core::Exec ex = gpu_exec();
    auto dd = up(dout, n), dgg = up(g, n), duu = up(u, n);
    core::Buffer<float> a(n_or_1(n), ex.device), b(n_or_1(n), ex.device);
    kernels::cuda::swiglu_backward(dd.data(), dgg.data(), duu.data(), n, a.data(), b.data(), ex);
    down(a, dg, n);
    down(b, du, n);
  }
  void rope_forward(const float* x, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                    double theta, float* y) override {
    const core::Exec ex = gpu_exec();
    auto dy = up(x, t * h * d);
    kernels::cuda::RopeTable(pos, t, d, theta, ex).forward(dy.data(), h, ex);
    down(dy, y, t * h * d);
  }
  void rope_backward(const float* dy, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                     double theta, float* dx) override {
    const core::Exec ex = gpu_exec();
    auto g = up(dy, t * h * d);
    kernels::cuda::RopeTable(pos, t, d, theta, ex).backward(g.data(), h, ex);
    down(g, dx, t * h * d);
  }
  void linear_forward(const float* x, const float* w, int64_t t, int64_t k, int64_t n,
                      float* y) override {
    const core::Exec ex = gpu_exec();
    auto dx = up(x, t * k), dw = up(w, n * k);
    core::Buffer<float> dy(n_or_1(t * n), ex.device);
    kernels::cuda::linear_forward(dx.data(), dw.data(), t, k, n, dy.data(), false, ex);
    down(dy, y, t * n);
  }
  void linear_backward(const float* dy, const float* x, const float* w, int64_t t, int64_t k,
                       int64_t n, float* dx, float* dw) override {
    const core::Exec ex = gpu_exec();
    auto ddy = up(dy, t * n), ddx = up(x, t * k), ddw = up(w, n * k);
    // dweight accumulates: it starts from zero (a new device buffer is zeroed).
    core::Buffer<float> gx(n_or_1(t * k), ex.device), gw(n_or_1(n * k), ex.device);
    kernels::cuda::linear_backward(ddy.data(), ddx.data(), ddw.data(), t, k, n, gx.data(), false,
                                   gw.data(), ex);
    down(gx, dx, t * k);
    down(gw, dw, n * k);
  }
  // Token positions, doc ids and the block mask go to the device (the GPU kernels read them
  // there); dq, dk, dv start from zero because the block backward accumulates.
  void attention_forward(const float* q, const float* k, const float* v, const kernels::Tokens& qt,
                         const kernels::Tokens& kt, const kernels::Mask& mask, float scale,
                         const kernels::ref::AttnDims& dm, float* o, float* lse) override {
    const core::Exec ex = gpu_exec();
    auto dq = up(q, dm.tq * dm.hq * dm.d), dk = up(k, dm.tk * dm.hkv * dm.d),
         dv = up(v, dm.tk * dm.hkv * dm.d);
    DeviceTokens dqt(qt, dm.tq), dkt(kt, dm.tk);
    DeviceMask dmask(mask);
    auto dout = poisoned(dm.tq * dm.hq * dm.d), dlse = poisoned(dm.tq * dm.hq);
    const size_t wsb = kernels::cuda::attention_workspace_bytes(dm);
    core::Buffer<float> ws(n_or_1(static_cast<int64_t>(wsb / 4 + 1)), ex.device);
    kernels::cuda::attention_block_forward(dq.data(), dk.data(), dv.data(), dqt.tokens(),
                                           dkt.tokens(), dmask.mask, scale, dm, ex, ws.data(),
                                           ws.size() * 4, dout.data(), dlse.data());
    down(dout, o, dm.tq * dm.hq * dm.d);
    down(dlse, lse, dm.tq * dm.hq);
  }
  void attention_backward(const float* q, const float* k, const float* v, const float* o,
                          const float* lse, const float* dout, const kernels::Tokens& qt,
                          const kernels::Tokens& kt, const kernels::Mask& mask, float scale,
                          const kernels::ref::AttnDims& dm, float* dq, float* dk,
                          float* dv) override {
    const core::Exec ex = gpu_exec();
    const int64_t nq = dm.tq * dm.hq * dm.d, nk = dm.tk * dm.hkv * dm.d, rows = dm.tq * dm.hq;
    auto gq = up(q, nq), gk = up(k, nk), gv = up(v, nk), go = up(o, nq), gl = up(lse, rows),
         gd = up(dout, nq);
    DeviceTokens dqt(qt, dm.tq), dkt(kt, dm.tk);
    DeviceMask dmask(mask);
    core::Buffer<float> delta(n_or_1(rows), ex.device), rq(n_or_1(nq), ex.device),
        rk(n_or_1(nk), ex.device), rv(n_or_1(nk), ex.device);
    kernels::cuda::attention_delta(gd.data(), go.data(), dm.tq, dm.hq, dm.d, ex, delta.data());
    const size_t wsb = kernels::cuda::attention_workspace_bytes(dm);
    core::Buffer<float> ws(n_or_1(static_cast<int64_t>(wsb / 4 + 1)), ex.device);
    kernels::cuda::attention_block_backward(gq.data(), gk.data(), gv.data(), gd.data(), gl.data(),
                                            delta.data(), dqt.tokens(), dkt.tokens(), dmask.mask,
                                            scale, dm, ex, ws.data(), ws.size() * 4, rq.data(),
                                            rk.data(), rv.data());
    down(rq, dq, nq);
    down(rk, dk, nk);
    down(rv, dv, nk);
  }
  // vocab_tile is the CPU's online-logsumexp step; the GPU kernel takes a row in one block and
  // has none (kernels/cuda/lm_head.hpp), so only token_tile reaches it.
  void lm_head_ce(const float* hidden, const float* weight, const int32_t* labels, int64_t t,
                  int64_t c, int64_t v, int32_t ignore_index, double grad_scale, int64_t token_tile,
                  int64_t, double* loss_sum, int64_t* count, float* dhidden,
                  float* dweight) override {
    const core::Exec ex = gpu_exec();
    auto dh_in = up(hidden, t * c), dw_in = up(weight, v * c);
    auto dl = upload(std::vector<int32_t>(labels, labels + t), "labels");
    auto dh = poisoned(t * c);
    // dweight accumulates: it starts from zero (a new device buffer is zeroed).
    core::Buffer<float> dw(n_or_1(v * c), ex.device);
    kernels::cuda::LmHeadOptions o;
    o.token_tile = token_tile;
    o.ignore_index = ignore_index;
    o.exec = ex;
    const kernels::cuda::LossPart r = kernels::cuda::lm_head_ce_fused(
        dh_in.data(), dw_in.data(), dl.data(), {t, c, v}, grad_scale, dh.data(), dw.data(), o);
    *loss_sum = r.sum;
    *count = r.count;
    down(dh, dhidden, t * c);
    down(dw, dweight, v * c);
  }
  void merge_partials(float* o, float* lse, const float* o_other, const float* lse_other, int64_t t,
                      int64_t h, int64_t d) override {
    const core::Exec ex = gpu_exec();
    auto a = up(o, t * h * d), la = up(lse, t * h), b = up(o_other, t * h * d),
         lb = up(lse_other, t * h);
    kernels::cuda::merge_partials(a.data(), la.data(), b.data(), lb.data(), t, h, d, ex);
    down(a, o, t * h * d);
    down(la, lse, t * h);
  }
  void attention_delta(const float* dout, const float* o, int64_t t, int64_t h, int64_t d,
                       float* delta) override {
    const core::Exec ex = gpu_exec();
    auto a = up(dout, t * h * d), b = up(o, t * h * d);
    auto r = poisoned(t * h);
    kernels::cuda::attention_delta(a.data(), b.data(), t, h, d, ex, r.data());
    down(r, delta, t * h);
  }

 private:
  static size_t n_or_1(int64_t n) { return n > 0 ? static_cast<size_t>(n) : 1; }
  // Host tokens copied to the device (positions, and doc ids when present).
  struct DeviceTokens {
    core::Buffer<int64_t> pos;
    core::Buffer<int32_t> doc;
    bool has_doc;
    DeviceTokens(const kernels::Tokens& t, int64_t n)
        : pos(upload(std::vector<int64_t>(t.pos, t.pos + n), "pos")),
          doc(upload(t.doc ? std::vector<int32_t>(t.doc, t.doc + n) : std::vector<int32_t>{},
                     "doc")),
          has_doc(t.doc != nullptr) {}
    kernels::Tokens tokens() const { return {pos.data(), has_doc ? doc.data() : nullptr}; }
  };
  // The mask with its block mask (if any) on the device.
  struct DeviceMask {
    core::Buffer<uint8_t> blocks;
    kernels::Mask mask;
    explicit DeviceMask(const kernels::Mask& m)
        : blocks(upload(m.block_mask ? std::vector<uint8_t>(
                                           m.block_mask, m.block_mask + m.num_blocks * m.num_blocks)
                                     : std::vector<uint8_t>{},
                        "block_mask")),
          mask(m) {
      if (m.block_mask) mask.block_mask = blocks.data();
    }
  };
  static core::Buffer<float> up(const float* p, int64_t n) {
    return upload(std::vector<float>(p, p + n), "case");
  }
  // A device buffer of n NaNs (an output the kernel must overwrite).
  static core::Buffer<float> poisoned(int64_t n) {
    return upload(std::vector<float>(n_or_1(n), std::numeric_limits<float>::quiet_NaN()), "out");
  }
  static void down(const core::Buffer<float>& d, float* out, int64_t n) {
    const std::vector<float> h = download(d, static_cast<size_t>(n));
    std::copy(h.begin(), h.end(), out);
  }
};

}  // namespace longseq::test
