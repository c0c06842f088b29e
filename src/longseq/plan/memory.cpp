#include "longseq/plan/memory.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <sstream>

#include "longseq/attention/layout.hpp"
#include "longseq/attention/schedule.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/threads.hpp"
#include "longseq/kernels/cpu/attention.hpp"
#include "longseq/plan/hardware.hpp"

namespace longseq::plan {

double unfused_logits_bytes(int64_t tokens, int64_t vocab) {
  return 4.0 * static_cast<double>(tokens) * static_cast<double>(vocab);
}

std::vector<std::pair<std::string, double>> MemoryBreakdown::items() const {
  return {{"weights (ZeRO-3 shard + 2 gathered layers)", weights},
          {"gradients (fp32 shard + 1 gathered layer)", gradients},
          {"optimizer states (AdamW fp32, sharded)", optimizer},
          {"checkpointed activations", checkpoints},
          {"working set of one layer (incl. q,k,v)", working},
          {"attention communication buffers", attention_buffers},
          {"attention gathered copies (StarTrail 3(C-1)A)", attention_extra},
          {"LM head", lm_head}};
}

MemoryBreakdown memory_model(const MemoryInputs& in) {
  const model::LlamaConfig& m = in.model;
  const double p = in.world, t = static_cast<double>(in.local_tokens), e = in.act_bytes;
  const double np = static_cast<double>(m.parameters()),
               nl = static_cast<double>(m.layer_parameters());
  const double h = static_cast<double>(m.hidden), hq = static_cast<double>(m.heads),
               hkv = static_cast<double>(m.kv_heads), d = static_cast<double>(m.head_dim),
               im = static_cast<double>(m.intermediate), layers = static_cast<double>(m.layers);
  MemoryBreakdown b;
  b.activation_unit = t * h * e;
  const double a = b.activation_unit;
  b.weights = 2 * np / p + 2 * 2 * nl;
  b.gradients = 4 * np / p + 2 * nl;
  b.optimizer = 12 * np / p;
  // Saved activations of one layer (see the legend); lse is fp32.
  const double o_lse = t * hq * d * e + t * hq * 4;
  const double layer_saved = t * e * (4 * h + 2 * hq * d + 2 * hkv * d + 3 * im) + t * hq * 4;
  b.qkv = t * (hq + 2 * hkv) * d * e;
  const double inputs = (layers + 1) * a;
  switch (in.checkpoint) {
    case model::CheckpointPolicy::none:
      b.checkpoints = layers * layer_saved + a;
      break;
    case model::CheckpointPolicy::full:
      b.checkpoints = inputs;
      break;
    case model::CheckpointPolicy::selective_pp:
      b.checkpoints = inputs + layers * o_lse;
      break;
    case model::CheckpointPolicy::seq_selective:
      b.checkpoints = inputs + layers * (1 - in.seq_selective_fraction) * o_lse;
      break;
  }
  b.working = (in.checkpoint == model::CheckpointPolicy::none ? 0.0 : layer_saved) + 2 * a;
  b.attention_buffers = in.attention_buffer_bytes;
  b.attention_extra = in.attention_extra_bytes;
  if (in.loss == model::LossMode::fused)
    b.lm_head = t * 4 * 2 + 2 * 1024.0 * 8192.0 * 4;
  else
    b.lm_head = unfused_logits_bytes(in.local_tokens, m.vocab);
  return b;
}

// ---- host trainer -------------------------------------------------------------------------------

namespace {

// Measured on this machine (AMD EPYC, Debian 12, oneDNN + OpenBLAS + OpenMPI linked): `longseq
// train --preset tiny` peaks at 34 MiB, of which 16 MiB are the start-up GEMM measurement's
// buffers (freed before the first step) and ~1 MiB the model and data: the rest is the binary,
// its libraries and the runtime.
constexpr double kBaselineBytes = 18.0 * (1 << 20);
// A mapping is whole pages.
double pages(double bytes) {
  return bytes <= 0 ? 0 : std::ceil(bytes / 4096.0) * 4096.0;
}

struct Phase {
  std::string name;
  std::vector<std::pair<std::string, double>> items;
  double total() const {
    double t = 0;
    for (const auto& [n, b] : items) t += b;
    return t;
  }
};

}  // namespace

HostTrainerMemory host_trainer_memory(const HostTrainerInputs& in) {
  const model::LlamaConfig& m = in.model;
  m.validate();
  core::require(in.world >= 1 && in.dp >= 1 && in.world % in.dp == 0, "plan", "--dp ", in.dp,
                " must divide --world ", in.world);
  const int cp = in.world / in.dp;
  core::require(in.seq >= 2 * cp, "plan", "--seq ", in.seq, " must be at least 2 tokens per rank");
  attention::MaskSpec causal;
  causal.causal = true;
  const attention::MaskSpec& mask = in.mask ? *in.mask : causal;
  const attention::Layout layout(attention::parse_balance(in.balance), in.seq, cp, mask.block_size);
  const double l = static_cast<double>(layout.local_len()), n = static_cast<double>(in.seq);
  const double c = m.hidden, hq = m.heads, hkv = m.kv_heads, d = m.head_dim, f = m.intermediate,
               v = m.vocab, layers = m.layers;
  const double e = 4;                 // fp32 activations
  const double ce = in.bf16 ? 2 : 4;  // what the attention kernels and transfers read
  auto t = [&](double floats) { return pages(floats * e); };

  HostTrainerMemory r;
  r.ranks = in.world;
  r.baseline = kBaselineBytes;
  r.data = pages(4.0 * static_cast<double>(in.data_tokens));

  // ZeRO-3 (train/zero.cpp): unit sizes as model/config.cpp packs them (16-float alignment).
  auto align = [](double x) { return std::ceil(x / 16) * 16; };
  const double layer_unit = align(c) + align(hq * d * c) + 2 * align(hkv * d * c) +
                            align(c * hq * d) + align(c) + 3 * align(f * c);
  const double emb_unit = align(v * c);
  const double final_unit = align(c) + (m.tied_embeddings ? 0 : align(v * c));
  double shard_total = 0, max_unit = std::max({layer_unit, emb_unit, final_unit});
  auto shard = [&](double unit) { return align(std::ceil(unit / in.world)); };
  shard_total = layers * shard(layer_unit) + shard(emb_unit) + shard(final_unit);
  r.state = in.world * (pages(4 * 4 * shard_total) + pages(shard_total));  // 4 fp32 arrays + decay

  // Per-rank token metadata: tokens, labels (int32), positions (int64), RoPE cos/sin [L, D/2].
  const double docs = in.document_mask || !mask.doc_ids.empty();
  const double meta = pages(16 * l) + 2 * t(l * d / 2) + pages(l) + (docs ? 3 * pages(4 * n) : 0);
  // Gathered units in flight: the acquired one, the prefetched one (shard + gather buffer, and its
  // widened copy) and one full-size gradient with its reduce-scatter part.
  const double gathered = pages(4 * max_unit) * 3 + pages(4 * shard(max_unit)) * 2;

  // Activations (model/transformer.cpp): [L, C] tensors, q/o [L, Hq, D], k/v [L, Hkv, D], lse
  // [L, Hq], rstd [L].
  const double lc = t(l * c), lq = t(l * hq * d), lk = t(l * hkv * d), lse = t(l * hq), row = t(l);
  const double acts_qkv = lc + row + lq + 2 * lk;          // n1, rstd1, q, k, v
  const double acts = acts_qkv + lq + lse + 2 * lc + row;  // + o, lse, x1, n2, rstd2
  const int64_t split = [&] {
    // model::seq_selective_split: ceil(f L), kept in [0, L].
    const int64_t s = static_cast<int64_t>(std::ceil(in.seq_selective_fraction * l));
    return std::clamp<int64_t>(s, 0, layout.local_len());
  }();
  double saved_layer = lc;
  switch (in.checkpoint) {
    case model::CheckpointPolicy::none:
      saved_layer += acts;
      break;
    case model::CheckpointPolicy::full:
      break;
    case model::CheckpointPolicy::selective_pp:
      saved_layer += lq + lse;
      break;
    case model::CheckpointPolicy::seq_selective: {
      const double late = l - static_cast<double>(split);
      if (late > 0) saved_layer += t(late * hq * d) + t(late * hq);
      break;
    }
  }
  const double ffn = in.ffn_chunk > 0 ? std::min<double>(static_cast<double>(in.ffn_chunk), l) : l;
  const double mlp_ws = t(3 * std::max(ffn, 1.0) * f);

  // Attention internals (attention/distributed.cpp): the schedule's slots, the per-chunk partials
  // and kernel workspace, the token table (every rank's positions, and document ids).
  const attention::Algorithm algo = attention::Algorithm::parse(in.algo);
  double chunk = 0;
  for (const auto& ch : layout.chunks(0)) chunk = std::max(chunk, static_cast<double>(ch.len));
  const double table =
      pages(8 * layout.local_len() * static_cast<double>(cp)) + (docs ? pages(4 * n) : 0);
  const kernels::cpu::AttnDims cd{static_cast<int64_t>(chunk), static_cast<int64_t>(chunk), m.heads,
                                  m.kv_heads, m.head_dim};
  const double kfwd =
      t(static_cast<double>(kernels::cpu::attention_forward_workspace_floats(cd, in.threads)));
  const double kbwd =
      t(static_cast<double>(kernels::cpu::attention_backward_workspace_floats(cd, in.threads)));
  const double partial = t(chunk * hq * d) + t(chunk * hq);
  const double inputs = in.bf16 ? pages(ce * l * (hq + 2 * hkv) * d) : 0;  // rounded q, k, v
  double fwd_slots = 0, bwd_slots = 0;
  std::string slot_note;
  if (!algo.ring_family()) {
    algo.validate(cp, m.heads, m.kv_heads);
    // All-to-all staging of q, k, v (and o, dO, gradients in the backward): twice the inputs.
    fwd_slots = 2 * (lq + 2 * lk);
    bwd_slots = 2 * (2 * lq + 2 * lk);
    slot_note = " (hybrid: 2x the re-sharded tensors, approximate)";
  } else {
    const attention::PairTable pairs(layout, mask);
    const comm::Topology topo = attention::schedule_topology(
        algo, comm::Topology::declared(cp, std::max(1, in.nodes / in.dp)));
    int fd = 0, bd = 0, bg = 0;
    for (int rank = 0; rank < cp; ++rank) {
      const auto fs =
          attention::make_schedule(rank, topo, layout, pairs, algo, attention::Pass::forward);
      const auto bs =
          attention::make_schedule(rank, topo, layout, pairs, algo, attention::Pass::backward);
      // The slots the executor allocates (world 1 sends no bundle and holds none).
      fd = std::max(fd, attention::used_data_slot_count(fs, false));
      bd = std::max(bd, attention::used_data_slot_count(
                            bs, attention::bundle_is_query(algo, attention::Pass::backward)));
      bg = std::max(bg, bs.grad_slots);
    }
    const bool bq = algo.backward == attention::Backward::q;
    fwd_slots = fd * pages(ce * 2 * l * hkv * d);
    const double bundle =
        bq ? pages(ce * 2 * l * hq * d + 4 * 2 * l * hq) : pages(ce * 2 * l * hkv * d);
    const double grad = bq ? lq : 2 * lk;
    bwd_slots = bd * bundle + bg * grad + (bq ? 0 : 2 * lk);  // + ring's home dK dV
    slot_note = " (" + std::to_string(fd) + " fwd / " + std::to_string(bd) + "+" +
                std::to_string(bg) + " bwd slots)";
  }
  const double attn_fwd = fwd_slots + partial + kfwd + table + inputs;
  const double attn_bwd = bwd_slots + lse /*D*/ + lq + 2 * lk /*dq dk dv*/ + kbwd + table +
                          (in.bf16 ? inputs + pages(ce * l * hq * d) : 0);

  // LM head (model/lm_head.cpp): fused: a token tile of logits, its row statistics; unfused: the
  // logits of every local token and their statistics.
  const double tile = in.lm_tile > 0
                          ? static_cast<double>(in.lm_tile)
                          : std::clamp(std::floor((1 << 25) / std::max(v, 1.0)), 16.0, 1024.0);
  const double lm = in.loss == model::LossMode::fused
                        ? t(std::min(tile, l) * v) + pages(20 * std::min(tile, l))
                        : t(l * v) + pages(20 * l);

  const double saved_all = layers * saved_layer;
  std::vector<Phase> phases;
  // Forward of the last block (the earlier layers' saved activations held): the attention call
  // and the MLP (acts complete, workspace) are the two candidates.
  const double saved_before = (layers - 1) * saved_layer;
  phases.push_back({"forward",
                    {{"saved activations of the earlier layers", saved_before},
                     {"x and the block's input copy", 2 * lc},
                     {"block activations (n1 q k v o lse x1 n2)", acts},
                     {"larger of: attention forward internals" + slot_note + ", MLP workspace",
                      std::max(attn_fwd, mlp_ws)},
                     {"token metadata, RoPE tables, document ids", meta},
                     {"ZeRO-3 gathered units in flight", gathered}}});
  phases.push_back(
      {"lm head",
       {{"saved activations", saved_all},
        {"x, final norm output and gradient, dx", 4 * lc + row},
        {in.loss == model::LossMode::fused ? "fused LM head tile" : "unfused logits [L, V]", lm},
        {"token metadata, RoPE tables, document ids", meta},
        {"ZeRO-3 gathered units in flight", gathered}}});
  // First block backward: its own saved activations are consumed (none) or recomputed (others).
  const double recomputed = in.checkpoint == model::CheckpointPolicy::none ? 0 : acts;
  phases.push_back({"backward",
                    {{"saved activations", saved_all},
                     {"x, dx", 2 * lc},
                     {"recomputed block activations", recomputed},
                     {"MLP workspace, dn, dO", mlp_ws + lc + lq},
                     {"attention backward internals" + slot_note, attn_bwd},
                     {"token metadata, RoPE tables, document ids", meta},
                     {"ZeRO-3 gathered units in flight", gathered}}});
  if (in.save_checkpoint) {
    const double full = layers * layer_unit + emb_unit + final_unit;
    phases.push_back(
        {"checkpoint",
         {{"parameters and AdamW moments gathered in full", 3 * pages(4 * full)},
          {"the writer's file image (per rank share)", 3 * pages(4 * full) / in.world}}});
  }
  const Phase* best = &phases[0];
  for (const Phase& p : phases)
    if (p.total() > best->total()) best = &p;
  r.per_rank_peak = best->total();
  r.phase = best->name;
  r.items = best->items;
  return r;
}

// ---- device trainer ----------------------------------------------------------------------------

int64_t cuda_lm_head_token_tile(int64_t tokens, int64_t vocab, int64_t token_tile, bool bf16) {
  int64_t bs = token_tile;
  if (bs <= 0) {
    const int64_t elems = bf16 ? int64_t{1} << 28 : int64_t{1} << 26;
    bs = std::clamp<int64_t>(elems / std::max<int64_t>(vocab, 1), 64, 4096);
    if (bs >= 128) bs = bs / 128 * 128;
  }
  return std::max<int64_t>(1, std::min(bs, std::max<int64_t>(tokens, 1)));
}

double cuda_lm_head_workspace_bytes(int64_t tokens, int64_t hidden, int64_t vocab,
                                    int64_t token_tile, bool bf16) {
  // Scratch::aligned: every part of the one allocation at 256 bytes.
  const auto a = [](double b) { return std::ceil(b / 256) * 256; };
  const double bs = static_cast<double>(cuda_lm_head_token_tile(tokens, vocab, token_tile, bf16));
  const double t = static_cast<double>(tokens), v = static_cast<double>(vocab),
               c = static_cast<double>(hidden);
  // Per-token loss (double) and state (int32), the totals {double, 2 x int64}.
  double bytes = a(8 * t) + a(4 * t) + a(24);
  bytes += bf16 ? a(2 * bs * v) + a(2 * v * c) + a(2 * bs * c) : a(4 * bs * v);
  return bytes;
}

double cuda_attention_workspace_bytes(int64_t tq, int64_t tk) {
  // One 32-byte TileSummary per 64-token tile of q and of k (kernels/cuda/attention_common.cuh).
  const auto tiles = [](int64_t n) { return (std::max<int64_t>(n, 0) + 63) / 64; };
  return 32.0 * static_cast<double>(tiles(tq) + tiles(tk));
}

namespace {

// The running total of a replayed allocation sequence, and its breakdown by kind at the peak.
class Replay {
 public:
  // What the allocator counts for a request (core::detail::counted_bytes, device.cu allocate):
  // an empty buffer still takes a 64-byte line.
  int alloc(int kind, double bytes) {
    const double b = bytes > 0 ? bytes : 64;
    live_.push_back({kind, b});
    by_kind_[static_cast<size_t>(kind)] += b;
    now_ += b;
    if (now_ > peak_) {
      peak_ = now_;
      at_peak_ = by_kind_;
      phase_at_peak_ = phase_;
    }
    return static_cast<int>(live_.size()) - 1;
  }
  void free(int id) {
    if (id < 0) return;
    Live& l = live_[static_cast<size_t>(id)];
    LONGSEQ_CHECK_MSG(l.bytes >= 0, "allocation ", id, " freed twice");
    by_kind_[static_cast<size_t>(l.kind)] -= l.bytes;
    now_ -= l.bytes;
    l.bytes = -1;
  }
  void free(std::initializer_list<int> ids) {
    for (int id : ids) free(id);
  }
  // A live allocation counted under another kind from now on (a block tensor a policy keeps
  // becomes a saved activation): the total does not change.
  void retag(int id, int kind) {
    if (id < 0) return;
    Live& l = live_[static_cast<size_t>(id)];
    LONGSEQ_CHECK_MSG(l.bytes >= 0, "retag of freed allocation ", id);
    by_kind_[static_cast<size_t>(l.kind)] -= l.bytes;
    by_kind_[static_cast<size_t>(kind)] += l.bytes;
    l.kind = kind;
  }
  void phase(std::string p) { phase_ = std::move(p); }
  double peak() const { return peak_; }
  const std::string& phase_at_peak() const { return phase_at_peak_; }
  double at_peak(int kind) const { return at_peak_[static_cast<size_t>(kind)]; }

  static constexpr int kKinds = 9;

 private:
  struct Live {
    int kind;
    double bytes;
  };
  std::vector<Live> live_;
  std::array<double, kKinds> by_kind_{}, at_peak_{};
  double now_ = 0, peak_ = 0;
  std::string phase_, phase_at_peak_;
};

enum Kind : int {
  kParams,
  kGrads,
  kOptimizer,
  kSaved,
  kResidual,
  kBlock,
  kAttention,
  kLmHead,
  kTokens,
};
const char* const kKindNames[Replay::kKinds] = {
    "parameters (fp32)",
    "gradients (fp32)",
    "AdamW m, v (fp32) and decay mask",
    "saved activations (block inputs + policy)",
    "residual stream x, dx",
    "block working set (n1 q k v x1 n2, MLP, dn dO)",
    "attention (o lse, tile summaries, bf16 copies, dq dk dv)",
    "LM head (final norm tensors, fused-loss scratch)",
    "batch ids and positions, attention token table",
};

}  // namespace

DeviceTrainerMemory device_trainer_memory(const DeviceTrainerInputs& in) {
  const model::LlamaConfig& m = in.model;
  m.validate();
  core::require(!in.cuda || in.loss == model::LossMode::fused, "plan",
                "--loss unfused has no kernel on a GPU (the fused LM head is the GPU's)");
  core::require(in.seq >= 1, "plan", "--seq ", in.seq, " must be at least 1 token");
  const attention::Layout layout(attention::parse_balance(in.balance), in.seq, 1, in.mask_block);
  const int64_t l = layout.local_len();
  const double L = static_cast<double>(l), c = static_cast<double>(m.hidden),
               hq = static_cast<double>(m.heads), hkv = static_cast<double>(m.kv_heads),
               d = static_cast<double>(m.head_dim), f = static_cast<double>(m.intermediate);
  const int64_t split = model::seq_selective_split(l, in.seq_selective_fraction);
  const model::CheckpointPolicy policy = in.checkpoint;
  const bool cuda = in.cuda, bf16 = in.bf16;
  const double lc = 4 * L * c, row = 4 * L, lq = 4 * L * hq * d, lk = 4 * L * hkv * d,
               lse = 4 * L * hq;
  const int64_t chunk = in.ffn_chunk > 0 ? std::min(in.ffn_chunk, l) : l;
  const double mlp_ws = 4.0 * 3 * static_cast<double>(std::max<int64_t>(chunk, 1)) * f;

  Replay r;
  // State (model::DeviceReplica, train::DeviceOptimizer): units at kParamAlign floats.
  const model::ParamLayout pl(m);
  double n = 0;
  for (const model::ParamUnit& u : pl.units())
    n += static_cast<double>((u.size + model::kParamAlign - 1) / model::kParamAlign *
                             model::kParamAlign);
  r.phase("state");
  r.alloc(kParams, 4 * n);
  r.alloc(kGrads, 4 * n);
  r.alloc(kOptimizer, 4 * n);
  r.alloc(kOptimizer, 4 * n);
  r.alloc(kOptimizer, n);
  // The attention operator (built once; rebuilt per step for document masks, after the last one
  // is gone): positions, document ids, a block mask.
  if (cuda) {
    r.alloc(kTokens, 8 * L);
    if (in.document_mask) r.alloc(kTokens, 4 * L);
    if (in.block_mask_bytes > 0) r.alloc(kTokens, static_cast<double>(in.block_mask_bytes));
  }
  DeviceTrainerMemory out;
  out.state = r.peak();

  // LocalAttention's calls; the attention outputs of the CPU's operator are host memory.
  struct Out {
    int o = -1, lse = -1;
  };
  auto attn_forward = [&](int64_t rows) {
    Out o;
    if (!cuda) return o;
    o.o = r.alloc(kAttention, lq);
    o.lse = r.alloc(kAttention, lse);
    const int ws = r.alloc(kAttention, cuda_attention_workspace_bytes(rows, l));
    std::vector<int> rounded;
    if (rows > 0 && bf16)
      for (double b : {lq, lk, lk}) rounded.push_back(r.alloc(kAttention, b / 2));
    for (int id : rounded) r.free(id);
    r.free(ws);
    return o;
  };
  auto attn_backward = [&] {
    std::vector<int> g;
    if (!cuda) return g;
    for (double b : {lq, lk, lk}) g.push_back(r.alloc(kAttention, b));
    const int delta = r.alloc(kAttention, lse);
    const int ws = r.alloc(kAttention, cuda_attention_workspace_bytes(l, l));
    std::vector<int> rounded;
    if (bf16)
      for (double b : {lq, lk, lk, lq}) rounded.push_back(r.alloc(kAttention, b / 2));
    for (int id : rounded) r.free(id);
    r.free({ws, delta});
    return g;
  };
  // compute_qkv / compute_x1_n2.
  struct Acts {
    int n1 = -1, rstd1 = -1, q = -1, k = -1, v = -1, x1 = -1, n2 = -1, rstd2 = -1;
    Out att;
    void free(Replay& r) const { r.free({n1, rstd1, q, k, v, x1, n2, rstd2, att.o, att.lse}); }
    void retag(Replay& r, int kind) const {
      for (int id : {n1, rstd1, q, k, v, x1, n2, rstd2, att.o, att.lse}) r.retag(id, kind);
    }
  };
  auto qkv = [&](Acts& a, int kind) {
    a.n1 = r.alloc(kind, lc);
    a.rstd1 = r.alloc(kind, row);
    a.q = r.alloc(kind, lq);
    a.k = r.alloc(kind, lk);
    a.v = r.alloc(kind, lk);
  };
  auto x1n2 = [&](Acts& a, int kind) {
    a.x1 = r.alloc(kind, lc);
    a.n2 = r.alloc(kind, lc);
    a.rstd2 = r.alloc(kind, row);
  };
  struct Saved {
    int x = -1, o_late = -1, lse_late = -1;
    Acts acts;  // none: all; selective++: att only
  };

  // forward_backward
  int batch[3] = {-1, -1, -1};
  if (cuda) {
    batch[0] = r.alloc(kTokens, 4 * L);
    batch[1] = r.alloc(kTokens, 4 * L);
    batch[2] = r.alloc(kTokens, 8 * L);
  }
  const int x = r.alloc(kResidual, lc);
  std::vector<Saved> saved(static_cast<size_t>(m.layers));
  // Offload (DeviceTrainerInputs::offload, model/cuda/kernels_cuda.cpp park / fetch / take):
  // parked layers, the device copies still waiting for their copy out, the fetched inputs.
  std::vector<bool> parked(static_cast<size_t>(m.layers), false);
  std::vector<int> outbound, fetched(static_cast<size_t>(m.layers), -1);
  auto park = [&](int64_t i) {
    Saved& s = saved[static_cast<size_t>(i)];
    parked[static_cast<size_t>(i)] = true;
    if (cuda) {
      while (outbound.size() > 1) {  // settle(kMaxOutbound - 1), worst case: none done early
        r.free(outbound.front());
        outbound.erase(outbound.begin());
      }
      outbound.push_back(s.x);
    } else {
      r.free(s.x);  // the CPU's park copies to the host at once
    }
    s.x = -1;
  };
  auto fetch = [&](int64_t i) {
    if (i < 0 || !parked[static_cast<size_t>(i)] || !cuda) return;  // the CPU fetches in take
    for (int id : outbound) r.free(id);                             // settle(0)
    outbound.clear();
    if (fetched[static_cast<size_t>(i)] < 0) fetched[static_cast<size_t>(i)] = r.alloc(kSaved, lc);
  };
  auto take = [&](int64_t i) {
    if (!parked[static_cast<size_t>(i)]) return;
    fetch(i);
    saved[static_cast<size_t>(i)].x = cuda ? fetched[static_cast<size_t>(i)] : r.alloc(kSaved, lc);
  };
  for (int64_t i = 0; i < m.layers; ++i) {
    r.phase(core::cat("forward, layer ", i));
    Saved& s = saved[static_cast<size_t>(i)];
    s.x = r.alloc(kSaved, lc);
    Acts a;
    // The block's tensors are working set until the policy keeps them.
    qkv(a, kBlock);
    a.att = attn_forward(l);
    x1n2(a, kBlock);
    const int ws = r.alloc(kBlock, mlp_ws);
    if (policy == model::CheckpointPolicy::seq_selective && l - split > 0) {
      s.o_late = r.alloc(kSaved, 4 * static_cast<double>(l - split) * hq * d);
      s.lse_late = r.alloc(kSaved, 4 * static_cast<double>(l - split) * hq);
    }
    r.free(ws);
    if (policy == model::CheckpointPolicy::none) {
      s.acts = a;
      a.retag(r, kSaved);
    } else if (policy == model::CheckpointPolicy::selective_pp) {
      s.acts.att = a.att;
      r.retag(a.att.o, kSaved);
      r.retag(a.att.lse, kSaved);
      a.att = {};
      a.free(r);
    } else {
      a.free(r);
    }
    if (in.offload && i + 1 < m.layers) park(i);
  }

  r.phase("lm head");
  if (in.offload) fetch(m.layers - 2);  // the first input the backward takes, during the head
  const int dx = r.alloc(kResidual, lc);
  {
    const int hf = r.alloc(kLmHead, lc), rstdf = r.alloc(kLmHead, row), dhf = r.alloc(kLmHead, lc);
    if (cuda) {
      const int ws =
          r.alloc(kLmHead, cuda_lm_head_workspace_bytes(l, m.hidden, m.vocab, in.lm_tile, bf16));
      r.free(ws);
    }
    r.free({hf, rstdf, dhf});
  }

  for (int64_t i = m.layers - 1; i >= 0; --i) {
    r.phase(core::cat("backward, layer ", i));
    Saved& s = saved[static_cast<size_t>(i)];
    if (in.offload) {
      take(i);
      fetch(i - 1);  // the next block's input travels during this block
    }
    Acts a;
    if (policy == model::CheckpointPolicy::none) {
      a = s.acts;
      s.acts = {};
      a.retag(r, kBlock);
    } else {
      qkv(a, kBlock);
      if (policy == model::CheckpointPolicy::selective_pp) {
        a.att = s.acts.att;
        s.acts.att = {};
        r.retag(a.att.o, kAttention);
        r.retag(a.att.lse, kAttention);
      } else if (policy == model::CheckpointPolicy::seq_selective && split < l) {
        a.att = attn_forward(split);
      } else {
        a.att = attn_forward(l);
      }
      x1n2(a, kBlock);
    }
    const int ws = r.alloc(kBlock, mlp_ws);
    const int dn = r.alloc(kBlock, lc);
    const int dout = r.alloc(kBlock, lq);
    const std::vector<int> grads = attn_backward();
    for (int id : grads) r.free(id);
    r.free({dout, dn, ws});
    a.free(r);
    r.free({s.x, s.o_late, s.lse_late});
  }
  r.phase("embedding backward");
  r.free({x, dx, batch[0], batch[1], batch[2]});

  out.peak = r.peak();
  out.phase = r.phase_at_peak();
  for (int k = 0; k < Replay::kKinds; ++k)
    if (r.at_peak(k) > 0 || k <= kOptimizer) out.items.emplace_back(kKindNames[k], r.at_peak(k));
  return out;
}

nlohmann::json this_host() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown";
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  return {{"cpu_model", model}, {"cores", core::hardware_threads()}};
}

std::string host_profile_mismatch(const std::string& name_or_file) {
  const bool file =
      name_or_file.size() > 5 && name_or_file.substr(name_or_file.size() - 5) == ".json";
  const std::string path = file ? name_or_file : data_dir() + "/hardware/" + name_or_file + ".json";
  std::ifstream in(path);
  if (!in) return "";  // load_hardware names a missing profile
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception&) {
    return "";  // load_hardware names a malformed one
  }
  const nlohmann::json here = this_host();
  const std::string where =
      " (run `longseq calibrate` here: predicted step times may be off by 2x)";
  if (!j.contains("measurements") || !j["measurements"].is_object() ||
      !j["measurements"].contains("host"))
    return core::cat("hardware profile ", name_or_file,
                     " does not record the CPU it was measured on; this "
                     "machine is ",
                     here["cpu_model"].get<std::string>(), " with ", here["cores"].get<int>(),
                     " cores", where);
  const nlohmann::json& h = j["measurements"]["host"];
  const std::string model = h.value("cpu_model", std::string("unknown"));
  const int cores = h.value("cores", 0);
  if (model == here["cpu_model"].get<std::string>() && cores == here["cores"].get<int>()) return "";
  return core::cat("hardware profile ", name_or_file, " was measured on ", model, " with ", cores,
                   " cores; this machine is ", here["cpu_model"].get<std::string>(), " with ",
                   here["cores"].get<int>(), " cores", where);
}

}  // namespace longseq::plan
