#include "longseq/model/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/op_account.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/model/kernels.hpp"
#include "longseq/model/layers.hpp"

namespace longseq::model {

CheckpointPolicy parse_checkpoint_policy(std::string_view s) {
  if (s == "none") return CheckpointPolicy::none;
  if (s == "full") return CheckpointPolicy::full;
  if (s == "selective++") return CheckpointPolicy::selective_pp;
  if (s == "seq-selective") return CheckpointPolicy::seq_selective;
  core::fail("model", "--checkpoint '", s, "': expected none | full | selective++ | seq-selective");
}

int64_t seq_selective_split(int64_t l, double fraction) {
  core::require(fraction > 0.0 && fraction < 1.0, "model", "--seq-selective-fraction ", fraction,
                " must be in (0, 1)");
  // f = 0.5 is exact in binary, so the default split is ceil(L / 2) for every L.
  const int64_t s = static_cast<int64_t>(std::ceil(fraction * static_cast<double>(l)));
  return std::clamp<int64_t>(s, 1, std::max<int64_t>(l, 1));
}

std::string_view checkpoint_policy_name(CheckpointPolicy p) {
  switch (p) {
    case CheckpointPolicy::none:
      return "none";
    case CheckpointPolicy::full:
      return "full";
    case CheckpointPolicy::selective_pp:
      return "selective++";
    case CheckpointPolicy::seq_selective:
      return "seq-selective";
  }
  return "?";
}

LossMode parse_loss_mode(std::string_view s) {
  if (s == "fused") return LossMode::fused;
  if (s == "unfused") return LossMode::unfused;
  core::fail("model", "--loss '", s, "': expected fused | unfused");
}

std::string_view loss_mode_name(LossMode l) {
  return l == LossMode::fused ? "fused" : "unfused";
}

namespace {

using core::Shape;
using core::Tensor;
using core::View;

struct Dims {
  int64_t l, c, hq, hkv, d, f;
  float eps;
  int64_t ffn_chunk;
  core::DType compute;  // precision of the matrix products
  int64_t split;        // seq-selective: first local row whose (o, lse) is kept
};

// Floats a tensor holds (a default-constructed Tensor has the scalar shape but no buffer).
int64_t held(const Tensor<float>& t) {
  return t.data() ? t.numel() : 0;
}

// Activations of one block that its backward reads.
struct Acts {
  Tensor<float> n1, rstd1, q, k, v, x1, n2, rstd2;
  attention::AttentionSaved att;
  int64_t floats() const {
    return held(n1) + held(rstd1) + held(q) + held(k) + held(v) + held(x1) + held(n2) +
           held(rstd2) + held(att.o) + held(att.lse);
  }
};

// What a block keeps between forward and backward (by policy).
struct Saved {
  Tensor<float> x;                 // block input, every policy
  Acts acts;                       // none: everything; selective++: att.o / att.lse only
  Tensor<float> o_late, lse_late;  // seq-selective: rows [split, L): [rows, Hq, D], [rows, Hq]
  int64_t floats() const { return held(x) + acts.floats() + held(o_late) + held(lse_late); }
};

View<const float> cview(const Tensor<float>& t) {
  return t.view();
}

// A tensor on the kernels' device: zeroed, or (Uninit) for one the caller overwrites whole.
Tensor<float> zeros(const Kernels& k, Shape shape, const char* name) {
  return Tensor<float>(shape, k.device(), name);
}
Tensor<float> uninit(const Kernels& k, Shape shape, const char* name) {
  return Tensor<float>(shape, k.device(), core::Uninit{}, name);
}

// The per-op account (core/op_account.hpp): the block's pointwise work (norms, RoPE, SwiGLU,
// residual adds) runs in a norm_rope_swiglu scope and the GEMMs inside it take their time over
// (kernels/gemm.cpp). An attention call is charged to `op`, less the communication waits the
// operator measured inside it, which go to comm_wait.
template <class F>
auto timed_attention(AttentionOp& attn, core::Op op, F&& f) {
  const double w0 = attn.times().wait_s;
  core::OpScope scope(op);
  auto r = f();
  core::op_transfer(op, core::Op::comm_wait, attn.times().wait_s - w0);
  return r;
}
using core::Op;
using core::OpScope;

void compute_qkv(const float* x, const float* w, const LayerOffsets& o, const Dims& dm,
                 const Kernels& k, const Rope& rope, Acts& a) {
  OpScope scope(Op::norm_rope_swiglu);
  a.n1 = uninit(k, Shape{dm.l, dm.c}, "n1");
  a.rstd1 = uninit(k, Shape{dm.l}, "rstd1");
  k.rmsnorm_forward(x, w + o.attn_norm, dm.l, dm.c, dm.eps, a.n1.data(), a.rstd1.data());
  a.q = uninit(k, Shape{dm.l, dm.hq, dm.d}, "q");
  a.k = uninit(k, Shape{dm.l, dm.hkv, dm.d}, "k");
  a.v = uninit(k, Shape{dm.l, dm.hkv, dm.d}, "v");
  k.linear_forward(a.n1.data(), w + o.wq, dm.l, dm.c, dm.hq * dm.d, a.q.data(), false, dm.compute);
  k.linear_forward(a.n1.data(), w + o.wk, dm.l, dm.c, dm.hkv * dm.d, a.k.data(), false, dm.compute);
  k.linear_forward(a.n1.data(), w + o.wv, dm.l, dm.c, dm.hkv * dm.d, a.v.data(), false, dm.compute);
  rope.forward(a.q.data(), dm.hq);
  rope.forward(a.k.data(), dm.hkv);
}

// x1 = x + o Wo^T, n2 = rmsnorm(x1).
void compute_x1_n2(const float* x, const float* w, const LayerOffsets& o, const Dims& dm,
                   const Kernels& k, Acts& a) {
  OpScope scope(Op::norm_rope_swiglu);
  a.x1 = uninit(k, Shape{dm.l, dm.c}, "x1");
  k.copy(a.x1.data(), x, dm.l * dm.c);
  k.linear_forward(a.att.o.data(), w + o.wo, dm.l, dm.hq * dm.d, dm.c, a.x1.data(), true,
                   dm.compute);
  a.n2 = uninit(k, Shape{dm.l, dm.c}, "n2");
  a.rstd2 = uninit(k, Shape{dm.l}, "rstd2");
  k.rmsnorm_forward(a.x1.data(), w + o.mlp_norm, dm.l, dm.c, dm.eps, a.n2.data(), a.rstd2.data());
}

MlpDims mlp_dims(const Dims& dm) {
  return {dm.l, dm.c, dm.f, dm.ffn_chunk, dm.compute};
}

// The block's computation, x [L, C] in place: block input -> block output. Returns every
// activation the backward could read; what is kept of them is the caller's choice (training:
// by policy; the forward alone: nothing, once the KV sink has seen k and v).
Acts block_compute(float* x, const float* w, const LayerOffsets& o, const Dims& dm,
                   const Kernels& k, const Rope& rope, AttentionOp& attn) {
  OpScope scope(Op::norm_rope_swiglu);  // attention and GEMMs take their parts over
  Acts a;
  compute_qkv(x, w, o, dm, k, rope, a);
  a.att = timed_attention(attn, Op::attn_forward,
                          [&] { return attn.forward(cview(a.q), cview(a.k), cview(a.v)); });
  compute_x1_n2(x, w, o, dm, k, a);
  k.copy(x, a.x1.data(), dm.l * dm.c);
  core::Buffer<float> ws(static_cast<size_t>(mlp_workspace_floats(mlp_dims(dm))), k.device(),
                         "mlp workspace");
  mlp_forward(a.n2.data(), w + o.wgate, w + o.wup, w + o.wdown, mlp_dims(dm), x, true, ws.data(),
              k);
  return a;
}

// x [L, C] in place: block input -> block output, keeping what `policy` keeps.
Saved block_forward(float* x, const float* w, const LayerOffsets& o, const Dims& dm,
                    const Kernels& k, const Rope& rope, AttentionOp& attn,
                    CheckpointPolicy policy) {
  OpScope scope(Op::norm_rope_swiglu);
  Saved s;
  s.x = uninit(k, Shape{dm.l, dm.c}, "block input");
  k.copy(s.x.data(), x, dm.l * dm.c);
  Acts a = block_compute(x, w, o, dm, k, rope, attn);
  switch (policy) {
    case CheckpointPolicy::none:
      s.acts = std::move(a);
      break;
    case CheckpointPolicy::selective_pp:
      s.acts.att.o = std::move(a.att.o);
      s.acts.att.lse = std::move(a.att.lse);
      break;
    case CheckpointPolicy::seq_selective: {
      // The later rows are one contiguous block: local rows run in increasing global position.
      const int64_t n = dm.l - dm.split;
      if (n <= 0) break;  // nothing kept: the backward recomputes all rows
      s.o_late = uninit(k, Shape{n, dm.hq, dm.d}, "saved attention output");
      s.lse_late = uninit(k, Shape{n, dm.hq}, "saved attention lse");
      k.copy(s.o_late.data(), a.att.o.data() + dm.split * dm.hq * dm.d, n * dm.hq * dm.d);
      k.copy(s.lse_late.data(), a.att.lse.data() + dm.split * dm.hq, n * dm.hq);
      break;
    }
    case CheckpointPolicy::full:
      break;
  }
  return s;
}

// dx [L, C] in place: gradient of the block output -> gradient of the block input.
void block_backward(float* dx, Saved& s, const float* w, float* g, const LayerOffsets& o,
                    const Dims& dm, const Kernels& k, const Rope& rope, AttentionOp& attn,
                    CheckpointPolicy policy) {
  OpScope scope(Op::norm_rope_swiglu);  // attention and GEMMs take their parts over
  Acts a;
  const float* x = s.x.data();
  if (policy == CheckpointPolicy::none) {
    a = std::move(s.acts);
  } else {
    compute_qkv(x, w, o, dm, k, rope, a);
    if (policy == CheckpointPolicy::selective_pp ||
        (policy == CheckpointPolicy::seq_selective && dm.split >= dm.l)) {
      if (policy == CheckpointPolicy::selective_pp) {
        a.att.o = std::move(s.acts.att.o);
        a.att.lse = std::move(s.acts.att.lse);
      } else {
        a.att = timed_attention(attn, Op::attn_recompute,
                                [&] { return attn.forward(cview(a.q), cview(a.k), cview(a.v)); });
      }
      a.att.q = cview(a.q);
      a.att.k = cview(a.k);
      a.att.v = cview(a.v);
    } else if (policy == CheckpointPolicy::seq_selective) {
      a.att = timed_attention(attn, Op::attn_recompute, [&] {
        return attn.forward_prefix(cview(a.q), cview(a.k), cview(a.v), dm.split);
      });
      const int64_t n = dm.l - dm.split;
      k.copy(a.att.o.data() + dm.split * dm.hq * dm.d, s.o_late.data(), n * dm.hq * dm.d);
      k.copy(a.att.lse.data() + dm.split * dm.hq, s.lse_late.data(), n * dm.hq);
    } else {
      a.att = timed_attention(attn, Op::attn_recompute,
                              [&] { return attn.forward(cview(a.q), cview(a.k), cview(a.v)); });
    }
    compute_x1_n2(x, w, o, dm, k, a);
  }
  // MLP and its norm: dx += rmsnorm'(mlp'(dx)).
  core::Buffer<float> ws(static_cast<size_t>(mlp_workspace_floats(mlp_dims(dm))), k.device(),
                         "mlp workspace");
  Tensor<float> dn = uninit(k, Shape{dm.l, dm.c}, "dn");  // overwritten by mlp_backward
  mlp_backward(dx, a.n2.data(), w + o.wgate, w + o.wup, w + o.wdown, mlp_dims(dm), dn.data(), false,
               g + o.wgate, g + o.wup, g + o.wdown, ws.data(), k);
  k.rmsnorm_backward(dn.data(), a.x1.data(), w + o.mlp_norm, a.rstd2.data(), dm.l, dm.c, dx,
                     g + o.mlp_norm, true);
  // Output projection and attention.
  Tensor<float> dout = uninit(k, Shape{dm.l, dm.hq, dm.d}, "attention dout");  // overwritten
  k.linear_backward(dx, a.att.o.data(), w + o.wo, dm.l, dm.hq * dm.d, dm.c, dout.data(), false,
                    g + o.wo, dm.compute);
  attention::AttentionGrads ag =
      timed_attention(attn, Op::attn_backward, [&] { return attn.backward(cview(dout), a.att); });
  rope.backward(ag.dq.data(), dm.hq);
  rope.backward(ag.dk.data(), dm.hkv);
  k.linear_backward(ag.dq.data(), a.n1.data(), w + o.wq, dm.l, dm.c, dm.hq * dm.d, dn.data(), false,
                    g + o.wq, dm.compute);
  k.linear_backward(ag.dk.data(), a.n1.data(), w + o.wk, dm.l, dm.c, dm.hkv * dm.d, dn.data(), true,
                    g + o.wk, dm.compute);
  k.linear_backward(ag.dv.data(), a.n1.data(), w + o.wv, dm.l, dm.c, dm.hkv * dm.d, dn.data(), true,
                    g + o.wv, dm.compute);
  k.rmsnorm_backward(dn.data(), x, w + o.attn_norm, a.rstd1.data(), dm.l, dm.c, dx, g + o.attn_norm,
                     true);
}

// The batch's token ids, labels and positions where the kernels read them: the caller's host
// arrays on a CPU, copies on a device.
struct BatchOnDevice {
  const int32_t* tokens;
  const int32_t* labels;
  const int64_t* pos;
  core::Buffer<int32_t> tokens_copy, labels_copy;
  core::Buffer<int64_t> pos_copy;
  BatchOnDevice(const StepBatch& b, core::Device device)
      : tokens(b.tokens), labels(b.labels), pos(b.pos) {
    if (device.is_cpu()) return;
    const auto n = static_cast<size_t>(b.len);
    tokens_copy = core::Buffer<int32_t>(n, device, core::Uninit{}, "batch tokens");
    pos_copy = core::Buffer<int64_t>(n, device, core::Uninit{}, "batch positions");
    core::copy_bytes(tokens_copy.data(), device, b.tokens, core::Device::cpu(), n * 4);
    core::copy_bytes(pos_copy.data(), device, b.pos, core::Device::cpu(), n * 8);
    tokens = tokens_copy.data();
    pos = pos_copy.data();
    if (b.labels) {  // a forward alone has none
      labels_copy = core::Buffer<int32_t>(n, device, core::Uninit{}, "batch labels");
      core::copy_bytes(labels_copy.data(), device, b.labels, core::Device::cpu(), n * 4);
      labels = labels_copy.data();
    }
  }
};

Dims dims_of(const LlamaConfig& cfg, const StepBatch& b, const ModelOptions& opt) {
  return Dims{b.len,
              cfg.hidden,
              cfg.heads,
              cfg.kv_heads,
              cfg.head_dim,
              cfg.intermediate,
              static_cast<float>(cfg.norm_eps),
              opt.ffn_chunk,
              opt.precision,
              seq_selective_split(b.len, opt.seq_selective_fraction)};
}

// The sequence length of dynamic RoPE scaling (StepBatch::seq_len).
int64_t seq_len_of(const StepBatch& b) {
  int64_t seq_len = b.seq_len;
  if (seq_len == 0)
    for (int64_t i = 0; i < b.len; ++i) seq_len = std::max(seq_len, b.pos[i] + 1);
  return seq_len;
}

// The residual stream after the embedding: [L, C] on the kernels' device, padding rows zero.
Tensor<float> embed(const ParamLayout& layout, ParamSource& params, const BatchOnDevice& db,
                    const Dims& dm, const Kernels& k) {
  Tensor<float> x = zeros(k, Shape{dm.l, dm.c}, "residual stream");
  const int emb = layout.embedding_unit();
  if (layout.config().layers > 0) params.prefetch(layout.layer_unit(0));
  {
    const float* we = params.acquire(emb);
    OpScope scope(Op::norm_rope_swiglu);
    k.embedding_forward(db.tokens, db.pos, we, dm.l, dm.c, layout.config().vocab, x.data());
  }
  params.release(emb);
  return x;
}

// The next unit's parameters travel while block `l` computes.
void prefetch_after(const ParamLayout& layout, ParamSource& params, int64_t l) {
  params.prefetch(l + 1 < layout.config().layers ? layout.layer_unit(l + 1) : layout.final_unit());
}

}  // namespace

StepResult forward_backward(const ParamLayout& layout, ParamSource& params, AttentionOp& attn,
                            const StepBatch& b, double grad_scale, const ModelOptions& opt) {
  return forward_backward(layout, params, attn, b, grad_scale, opt, CpuKernels(opt.threads));
}

StepResult forward_backward(const ParamLayout& layout, ParamSource& params, AttentionOp& attn,
                            const StepBatch& b, double grad_scale, const ModelOptions& opt,
                            const Kernels& k) {
  const LlamaConfig& cfg = layout.config();
  const Dims dm = dims_of(cfg, b, opt);
  const LayerOffsets& lo = layout.layer_offsets();
  StepResult res;
  const AttentionTimes t0 = attn.times();
  const std::unique_ptr<Rope> rope = k.rope(b.pos, dm.l, cfg.rope(seq_len_of(b)));
  const BatchOnDevice db(b, k.device());
  const int emb = layout.embedding_unit();
  Tensor<float> x = embed(layout, params, db, dm, k);

  std::vector<Saved> saved(static_cast<size_t>(cfg.layers));
  // Offload: the block inputs parked off the device (ModelOptions::offload), by layer.
  std::vector<std::unique_ptr<Parked>> parked(static_cast<size_t>(cfg.layers));
  int64_t saved_floats = 0;
  for (int64_t l = 0; l < cfg.layers; ++l) {
    const int u = layout.layer_unit(l);
    prefetch_after(layout, params, l);
    saved[l] = block_forward(x.data(), params.acquire(u), lo, dm, k, *rope, attn, opt.policy);
    params.release(u);
    if (opt.offload && l + 1 < cfg.layers) parked[l] = k.park(std::move(saved[l].x));
    saved_floats += saved[l].floats();  // what stays on the device
  }
  res.saved_floats_peak = saved_floats;

  // The first block input the backward reads from the host travels during the LM head.
  if (cfg.layers >= 2 && parked[cfg.layers - 2]) k.fetch(*parked[cfg.layers - 2]);

  // Final norm + LM head + loss, forward and backward together.
  const int fin = layout.final_unit();
  const float* wf = params.acquire(fin);
  const bool tied = cfg.tied_embeddings;
  const float* whead = tied ? params.acquire(emb) : wf + layout.lm_head_offset();
  float* gf = params.acquire_grad(fin);
  float* ghead = tied ? params.acquire_grad(emb) : gf + layout.lm_head_offset();
  Tensor<float> dx = zeros(k, Shape{dm.l, dm.c}, "residual gradient");
  {
    OpScope lm_scope(Op::lm_head_loss);
    Tensor<float> hf = zeros(k, Shape{dm.l, dm.c}, "final norm output");
    Tensor<float> rstdf = zeros(k, Shape{dm.l}, "final norm rstd");
    Tensor<float> dhf = zeros(k, Shape{dm.l, dm.c}, "final norm output gradient");
    k.rmsnorm_forward(x.data(), wf + layout.final_norm_offset(), dm.l, dm.c, dm.eps, hf.data(),
                      rstdf.data());
    LmHeadOptions lmo = opt.lm;
    lmo.compute = dm.compute;
    const LmHeadDims ld{dm.l, dm.c, cfg.vocab};
    const LossPart lp = k.lm_head(opt.fused_loss, hf.data(), whead, db.labels, ld, grad_scale,
                                  dhf.data(), ghead, lmo);
    res.loss_sum = lp.sum;
    res.count = lp.count;
    k.rmsnorm_backward(dhf.data(), x.data(), wf + layout.final_norm_offset(), rstdf.data(), dm.l,
                       dm.c, dx.data(), gf + layout.final_norm_offset(), false);
  }
  if (tied) params.release_grad(emb);
  params.release_grad(fin);
  if (tied) params.release(emb);
  params.release(fin);

  for (int64_t l = cfg.layers - 1; l >= 0; --l) {
    const int u = layout.layer_unit(l);
    const float* w = params.acquire(u);
    // (The embedding's backward needs its gradient only, not its parameters: no prefetch at 0.)
    if (l > 0) params.prefetch(layout.layer_unit(l - 1));
    float* g = params.acquire_grad(u);
    if (parked[l]) {
      saved[l].x = k.take(*parked[l]);
      parked[l].reset();
    }
    // The next block's input comes back while this block computes.
    if (l > 0 && parked[l - 1]) k.fetch(*parked[l - 1]);
    block_backward(dx.data(), saved[l], w, g, lo, dm, k, *rope, attn, opt.policy);
    params.release_grad(u);
    params.release(u);
    saved[l] = Saved{};
  }

  float* ge = params.acquire_grad(emb);
  {
    OpScope scope(Op::norm_rope_swiglu);
    k.embedding_backward(db.tokens, db.pos, dx.data(), dm.l, dm.c, cfg.vocab, ge);
  }
  params.release_grad(emb);
  // A gradient released above may be read by its source on the host next (a replica's optimizer
  // step): everything handed to the device must have run.
  k.synchronize();

  res.attn_compute_s = attn.times().compute_s - t0.compute_s;
  res.attn_wait_s = attn.times().wait_s - t0.wait_s;
  return res;
}

Tensor<float> forward_hidden(const ParamLayout& layout, ParamSource& params, AttentionOp& attn,
                             const StepBatch& b, const ModelOptions& opt, const Kernels& k,
                             const KvSink& kv) {
  const LlamaConfig& cfg = layout.config();
  const Dims dm = dims_of(cfg, b, opt);
  const LayerOffsets& lo = layout.layer_offsets();
  const std::unique_ptr<Rope> rope = k.rope(b.pos, dm.l, cfg.rope(seq_len_of(b)));
  const BatchOnDevice db(b, k.device());
  Tensor<float> x = embed(layout, params, db, dm, k);
  for (int64_t l = 0; l < cfg.layers; ++l) {
    const int u = layout.layer_unit(l);
    prefetch_after(layout, params, l);
    const Acts a = block_compute(x.data(), params.acquire(u), lo, dm, k, *rope, attn);
    if (kv) kv(l, a.k.data(), a.v.data());
    params.release(u);
  }
  const int fin = layout.final_unit();
  Tensor<float> h = uninit(k, Shape{dm.l, dm.c}, "final norm output");
  Tensor<float> rstd = uninit(k, Shape{dm.l}, "final norm rstd");
  {
    OpScope scope(Op::norm_rope_swiglu);
    k.rmsnorm_forward(x.data(), params.acquire(fin) + layout.final_norm_offset(), dm.l, dm.c,
                      dm.eps, h.data(), rstd.data());
  }
  params.release(fin);
  k.synchronize();
  return h;
}

}  // namespace longseq::model
