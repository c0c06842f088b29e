#pragma once
// One rank's forward + backward of the whole LLaMA model over its local tokens (design.md §6).
//
// Legend: L local tokens (layout order, padding included), C hidden, N global sequence length.
//
// Flow: embedding -> Ly blocks -> final RMSNorm -> LM head + loss (fused: its backward runs at
// once) -> blocks backward in reverse -> embedding backward. Parameters are reached unit by unit
// through a ParamSource (ZeRO-3 gathers a unit on acquire and frees it on release; a plain replica
// hands out pointers), so a unit's full parameters exist only while it computes.
//
// Block: x1 = x + Wo attn(rope(Wq n1), rope(Wk n1), Wv n1), n1 = rmsnorm(x);
//        out = x1 + Wdown swiglu(Wgate n2, Wup n2), n2 = rmsnorm(x1)   (MLP in ffn_chunk tokens)
//
// Checkpoint policies (what a block keeps between its forward and its backward; every policy
// gives the same gradients, tests/model/transformer_test.cpp):
//   none           everything the backward reads: n1, rstd, q, k, v, attention (o, lse), x1, n2
//   full           the block input only; the backward recomputes the block, attention included
//   selective++    the block input and the attention output (o, lse); attention is never
//                  recomputed, the cheap rest is
//   seq-selective  the block input and (o, lse) of each rank's later local rows [ceil(f L), L)
//                  (f = seq_selective_fraction, 0.5 by default); the attention of the earlier
//                  rows is recomputed with AttentionOp::forward_prefix (BurstEngine §3.2: keep
//                  the segment that is costly to recompute, recompute the cheap one). Local rows
//                  run in increasing global position under every layout, so the later rows are
//                  the rank's latest tokens, and every rank keeps the same share whatever the
//                  layout (a global split would leave contiguous ranks all-or-nothing). Under a
//                  causal mask the recomputed rows see the fewest keys; under zigzag with f = 0.5
//                  they are exactly each rank's first chunk.
//
// Precision: ModelOptions::precision bf16 runs every matrix product (projections, MLP, LM head)
// with bf16 operands and fp32 accumulation, and attention at the AttentionOp's precision; the
// residual stream, norms, softmax statistics, saved activations and gradients stay fp32. The
// weights arrive from the ParamSource (ZeRO-3 gathers them in bf16 when training in bf16).
// The blockwise MLP recomputes its gate/up activations per chunk in every policy (it never holds
// [L, F]); that is part of the FFN design, not of the policy.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "longseq/core/tensor.hpp"
#include "longseq/kernels/cpu/lm_head.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/config.hpp"
#include "longseq/model/lm_head.hpp"

namespace longseq::model {

class Kernels;

enum class CheckpointPolicy { none, full, selective_pp, seq_selective };
/// "none" | "full" | "selective++" | "seq-selective"; throws core::Error naming `s` otherwise.
CheckpointPolicy parse_checkpoint_policy(std::string_view s);
std::string_view checkpoint_policy_name(CheckpointPolicy p);

/// The LM head and loss: fused (tiles over tokens and vocabulary, no [T, V] logits) or unfused.
enum class LossMode { fused, unfused };
/// "fused" | "unfused"; throws core::Error naming `s` otherwise.
LossMode parse_loss_mode(std::string_view s);
std::string_view loss_mode_name(LossMode l);

/// Parameters and gradients by unit (config.hpp). Called by one thread per rank, in order.
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  /// The unit's full parameters, valid until release(unit). May communicate (ZeRO-3 all-gather).
  virtual const float* acquire(int unit) = 0;
  /// A hint that acquire(unit) comes next: a source that communicates may start gathering it now,
  /// so that the transfer overlaps the caller's compute (ZeRO-3 prefetch). Default: nothing.
  virtual void prefetch(int unit) { (void)unit; }
  virtual void release(int unit) = 0;
  /// A zeroed full-size gradient buffer for the unit, valid until release_grad(unit).
  virtual float* acquire_grad(int unit) = 0;
  /// Adds the buffer into the unit's gradient (summed over the ranks that hold it: ZeRO-3
  /// reduce-scatter) and frees it. A unit may be acquired for gradients more than once per step
  /// (the tied embedding: LM head and embedding), the contributions add up.
  virtual void release_grad(int unit) = 0;
};

/// One rank's tokens of one step, in layout order (length L).
struct StepBatch {
  const int32_t* tokens = nullptr;
  const int32_t* labels = nullptr;  ///< next token or kIgnoreIndex
  const int64_t* pos = nullptr;     ///< global positions, -1 = padding
  int64_t len = 0;                  ///< L
  /// N, the whole sequence's length (every rank the same): the sequence length of dynamic RoPE
  /// scaling (rope_scaling.hpp). 0: this rank's largest position + 1 (right on one rank only).
  int64_t seq_len = 0;
};

struct ModelOptions {
  CheckpointPolicy policy = CheckpointPolicy::seq_selective;
  bool fused_loss = true;
  int64_t ffn_chunk = 1024;
  LmHeadOptions lm;
  int threads = 1;
  /// f32 or bf16: precision of the matrix products (the caller validates user input).
  core::DType precision = core::DType::f32;
  /// seq-selective: the share f of each rank's local rows (its earliest tokens) whose attention
  /// is recomputed; the later rows keep (o, lse). In (0, 1).
  double seq_selective_fraction = 0.5;
  /// Activation offload: each block's saved input (every policy keeps it) is parked off the
  /// device between its forward and its backward (Kernels::park), and fetched back one block
  /// ahead of the backward that reads it, so the copies overlap compute. The last block's input
  /// stays: its backward comes next. The gradients are the same bits either way. Meant for a GPU
  /// (pinned host memory); on a CPU it only copies.
  bool offload = false;
};

/// The seq-selective split of L local rows: ceil(f L), clamped to [1, L]. Throws core::Error
/// naming f outside (0, 1).
int64_t seq_selective_split(int64_t l, double fraction);

/// Per-rank results of one step.
struct StepResult {
  double loss_sum = 0;  ///< sum of this rank's token losses
  int64_t count = 0;    ///< this rank's non-ignored tokens
  double attn_compute_s = 0, attn_wait_s = 0;
  int64_t saved_floats_peak = 0;  ///< activations kept between forward and backward, at peak
};

/// Forward and backward of one step on this rank. grad_scale = 1 / (global count of non-ignored
/// tokens), so that the gradients summed over all ranks are those of the global mean loss.
/// Gradients are delivered through params.release_grad. Blocking; collective over the ranks of
/// the attention op and the param source.
StepResult forward_backward(const ParamLayout& layout, ParamSource& params, AttentionOp& attn,
                            const StepBatch& batch, double grad_scale, const ModelOptions& opt);
/// The same step on `kernels`' device (model/kernels.hpp): the ParamSource hands out parameter
/// and gradient pointers on that device, `attn` takes and returns tensors there, and every
/// activation lives there. The batch stays in host memory (copied to the device here). On return
/// every kernel has run. The form above is this one with CpuKernels(opt.threads).
StepResult forward_backward(const ParamLayout& layout, ParamSource& params, AttentionOp& attn,
                            const StepBatch& batch, double grad_scale, const ModelOptions& opt,
                            const Kernels& kernels);

/// Receives one layer's keys (after RoPE, times the RoPE attention factor) and values
/// [L, Hkv, D] during a forward_hidden, on the kernels' device (model/inference.hpp fills its KV
/// cache from them).
using KvSink = std::function<void(int64_t layer, const float* k, const float* v)>;

/// The forward alone (inference's prefill, evaluation; no KV cache is read): embedding -> blocks
/// -> final RMSNorm, by the very block code forward_backward's forward runs, keeping nothing
/// between blocks. Returns the final-norm hidden states [L, C] on `kernels`' device, where the
/// ParamSource's parameters and the attention op's tensors live; the batch stays on the host
/// (labels unused; padding rows have pos -1 and come out zero). Reads opt.precision and
/// opt.ffn_chunk only. `kv`, when set, is called once per layer in order. On return every kernel
/// has run. Collective over the attention op's group.
core::Tensor<float> forward_hidden(const ParamLayout& layout, ParamSource& params,
                                   AttentionOp& attn, const StepBatch& batch,
                                   const ModelOptions& opt, const Kernels& kernels,
                                   const KvSink& kv = {});

}  // namespace longseq::model
