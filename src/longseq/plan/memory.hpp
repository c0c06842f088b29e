#pragma once
// Memory model: peak bytes one rank holds in a training step (design.md §6-7).
//
// Legend: P ranks, T = L local tokens, h hidden, e = activation bytes (bf16: 2), A = T*h*e (one
// activation of the local sub-sequence, WallFacer eq. (8)), Np parameters, Nl per layer.
//   weights      ZeRO-3: bf16 shard 2*Np/P, plus two gathered layers (current + prefetch) 2*2*Nl
//   gradients    fp32 shard 4*Np/P, plus one gathered layer's bf16 gradient 2*Nl before its
//                reduce-scatter
//   optimizer    AdamW fp32 master, m, v: 12*Np/P
//   checkpoints  by policy, over all layers:
//                  none          every layer's saved activations (x, norm1, q, k, v, o, lse, x2,
//                                norm2, gate, up, act*up)
//                  full          layer inputs: (layers + 1) A (WallFacer's "(L+1)A")
//                  selective++   full + every layer's attention output and LSE
//                  seq-selective full + the attention output and LSE of the last (1 - f) of the
//                                local tokens (BurstEngine §3.2)
//   working      one layer recomputed in the backward: its saved activations plus the gradients
//                in flight (2A); the attention inputs q, k, v (3A for MHA) are part of it
//   attention    the algorithm's communication buffers (schedule slots x part sizes), and
//                StarTrail's gathered team copies 3(C-1)A (WallFacer eq. (10))
//   lm head      fused: LSE and loss per token (fp32) plus one [1024, 8192] fp32 tile and its
//                gradient; unfused: the fp32 logits [T, V] kept for the backward (BurstEngine
//                Figure 8)
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "longseq/attention/mask_spec.hpp"
#include "longseq/core/flag_rows.hpp"
#include "longseq/model/transformer.hpp"
#include "longseq/plan/model_config.hpp"

namespace longseq::plan {

struct MemoryInputs {
  model::LlamaConfig model;
  int world = 1;
  int64_t local_tokens = 0;  ///< L (padding included)
  int act_bytes = 2;         ///< e
  model::CheckpointPolicy checkpoint = model::CheckpointPolicy::full;
  model::LossMode loss = model::LossMode::fused;
  double seq_selective_fraction = 0.5;  ///< f: share of local tokens recomputed
  double attention_buffer_bytes = 0;    ///< from AttentionCost (max of the passes)
  double attention_extra_bytes = 0;     ///< from AttentionCost (StarTrail 3(C-1)A)
};

struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0;
  double checkpoints = 0, working = 0;
  double qkv = 0;  ///< the attention inputs of the current layer (inside `working`)
  double attention_buffers = 0, attention_extra = 0;
  double lm_head = 0;
  double activation_unit = 0;  ///< A = T*h*e
  double total() const {
    return weights + gradients + optimizer + checkpoints + working + attention_buffers +
           attention_extra + lm_head;
  }
  /// (name, bytes) in print order.
  std::vector<std::pair<std::string, double>> items() const;
};

MemoryBreakdown memory_model(const MemoryInputs& in);

/// Bytes of the unfused LM head's fp32 logits for `tokens` tokens (BurstEngine Figure 8).
double unfused_logits_bytes(int64_t tokens, int64_t vocab);

// ---- this host: the peak RSS of `longseq train`
// ---------------------------------------------------
//
// The GPU model above counts what a device holds; the host trainer is one process whose ranks are
// threads (comm local backend), all in fp32 (bf16 only adds rounded copies), so its peak RSS is
//   baseline + token file + ranks x (ZeRO-3 state + the largest phase of one rank)
// because the ranks run the same layer at the same time (their attention exchanges keep them in
// step). The phases of one rank (model/transformer.cpp, attention/distributed.cpp):
//   forward    the saved activations of the earlier layers + this block's: x, n1, q, k, v, the
//              attention output and its internals (data slots of the schedule, the kernel's
//              per-chunk partials and workspace, token table), then x1, n2 and the MLP workspace
//   lm head    every layer's saved activations + x, the final norm's output and gradient, the
//              fused loss's tile (or the unfused logits [L, V])
//   backward   the first layer backward (the saved activations shrink from there): the saved
//              activations + x, dx, the recomputed block, dn, dO, and the attention backward's
//              internals (D, data and gradient slots, dq/dk/dv, the kernel workspace)
//   checkpoint every unit gathered in full three times (parameters and AdamW moments) + the file
//              image the writer builds
// Window and document masks enter through the schedule (empty chunk pairs skipped: fewer data
// slots) and the document ids (int32 per token, copies held by the loader, the mask and the
// attention's token table). Assumes mallopt(M_MMAP_THRESHOLD, 1 MiB) as train() sets it: every
// tensor is its own mapping, returned at free, so RSS follows the live bytes.
struct HostTrainerInputs {
  model::LlamaConfig model;  ///< tied_embeddings included
  int64_t seq = 0;
  int world = 1;  ///< all ranks (dp x cp)
  int dp = 1;
  int nodes = 1;
  std::string algo = core::rows::algo.text;
  std::string balance = core::rows::balance.text;
  std::shared_ptr<const attention::MaskSpec> mask;  ///< causal when null
  bool document_mask = false;                       ///< document ids per step (--mask document)
  model::CheckpointPolicy checkpoint = model::CheckpointPolicy::seq_selective;
  model::LossMode loss = model::LossMode::fused;
  double seq_selective_fraction = 0.5;
  int64_t ffn_chunk = 1024;
  int64_t lm_tile = 0;
  int threads = 1;          ///< per rank
  bool bf16 = false;        ///< --precision bf16
  int64_t data_tokens = 0;  ///< tokens of the token file (held as uint32)
  bool save_checkpoint = true;
};

struct HostTrainerMemory {
  double baseline = 0;  ///< the binary, its libraries and the runtime (measured, see memory.cpp)
  double data = 0;      ///< the token file
  double state =
      0;  ///< ZeRO-3 shards (parameters, gradients, AdamW m and v, decay mask), all ranks
  double per_rank_peak = 0;  ///< the largest phase of one rank (beyond its state)
  std::string phase;         ///< which: "forward", "lm head", "backward" or "checkpoint"
  /// (name, bytes per rank) of the peak phase, in print order.
  std::vector<std::pair<std::string, double>> items;
  int ranks = 1;
  double total() const { return baseline + data + state + ranks * per_rank_peak; }
};

/// Throws core::Error("[plan] ...") naming the values (world not divisible by dp, unknown algo).
HostTrainerMemory host_trainer_memory(const HostTrainerInputs& in);

// ---- a device: what `longseq train --device cuda` holds on its GPU ------------------------
//
// World 1 (the device path, train/device.hpp): one rank holds the whole sequence and the whole
// model. What kernels::cuda::memory_stats counts (every core::Buffer / core::Tensor on the GPU:
// the trainer's device_peak_mib) is predicted by replaying the allocations the step makes, in the
// order it makes them, from the code that makes them:
//   state        model::DeviceReplica: parameters and gradients (fp32, units at kParamAlign
//                floats); train::DeviceOptimizer: AdamW m and v (fp32), the decay mask (1 byte)
//   step         model/transformer.cpp forward_backward: the batch's ids and positions, the
//                residual stream x, per layer the block input and by policy its saved tensors, the
//                block's n1 q k v x1 n2 (rstd rows), the MLP workspace 3 x chunk x F; the final
//                norm's output, its gradient and dx; in the backward the recomputed block, dn,
//                dO, and the attention's gradients
//   attention    model/cuda LocalAttention: positions (and document ids) of the sequence; per call
//                o, lse, the tile summaries (32 bytes per 64-token tile of q and k), at bf16 the
//                rounded q k v (and dO); the backward's dq dk dv and delta
//   LM head      kernels/cuda lm_head_ce_fused's scratch (lm_head_workspace_bytes: the logits tile
//                and per-token loss and state; at bf16 the rounded weight and hidden tile)
// The peak is the largest running total; its breakdown is the total by kind at that moment.
// Not counted by the allocator, so not predicted here (they add to what cudaMemGetInfo sees): the
// CUDA context, the RoPE table (cudaMalloc, 2 x L x D/2 floats + L bytes), cuBLASLt's 32 MiB
// workspace, the stream-ordered scratch of the bf16 GEMM operands, the norm and embedding
// backward and the gradient norm (cudaMallocAsync).
//
// kernels = cpu predicts the same path run with the CPU as its device (attach_device_state with
// core::Device::cpu(), tests/plan/device_memory_test.cpp), where only the model's and the state's
// tensors are made on the device (core::cpu_device_memory_stats counts them): the CPU attention
// and LM head allocate host memory of their own, and the batch stays where it is.
struct DeviceTrainerInputs {
  model::LlamaConfig model;  ///< tied_embeddings included
  int64_t seq = 0;           ///< the sequence's tokens (world 1)
  std::string balance = core::rows::balance.text;
  bool document_mask = false;    ///< document ids per step (--mask document)
  int64_t mask_block = 0;        ///< a blocks:FILE:B mask's B (the layout's block), else 0
  int64_t block_mask_bytes = 0;  ///< that mask's bytes (the attention copies it)
  model::CheckpointPolicy checkpoint = model::CheckpointPolicy::seq_selective;
  model::LossMode loss = model::LossMode::fused;  ///< a GPU has only the fused head
  double seq_selective_fraction = 0.5;
  int64_t ffn_chunk = 1024;
  int64_t lm_tile = 0;
  bool bf16 = false;  ///< --precision bf16
  bool cuda = true;   ///< the CUDA kernels (else the CPU's, see above)
  /// --offload (model::ModelOptions::offload): every block input but the last parked off the
  /// device after its forward. On a GPU the device copy lives until its copy out is waited for:
  /// at most two wait at a time (the third park waits for the oldest; counted so, the worst
  /// case), and the backward's first fetch waits for them all. Each input comes back (a fresh
  /// device tensor) one block ahead of its backward; on the CPU at its own backward.
  bool offload = false;
};

struct DeviceTrainerMemory {
  double state = 0;   ///< parameters, gradients, AdamW m and v, decay mask
  double peak = 0;    ///< the predicted peak (state included)
  std::string phase;  ///< where: "forward layer i", "lm head", "backward layer i", ...
  /// (kind, bytes) held at the peak, in print order; they sum to `peak`.
  std::vector<std::pair<std::string, double>> items;
};

/// Throws core::Error("[plan] ...") for an unfused loss on CUDA (no kernel) or a bad fraction.
DeviceTrainerMemory device_trainer_memory(const DeviceTrainerInputs& in);

/// kernels/cuda lm_head_ce_fused's token tile and scratch bytes (lm_head_token_tile,
/// lm_head_workspace_bytes), restated here for a build without CUDA; tests/cuda holds them equal.
int64_t cuda_lm_head_token_tile(int64_t tokens, int64_t vocab, int64_t token_tile, bool bf16);
double cuda_lm_head_workspace_bytes(int64_t tokens, int64_t hidden, int64_t vocab,
                                    int64_t token_tile, bool bf16);
/// kernels/cuda attention_workspace_bytes for tq queries and tk keys (the tile summaries).
double cuda_attention_workspace_bytes(int64_t tq, int64_t tk);

/// This machine as `longseq calibrate` records it in a profile's measurements.host:
/// {"cpu_model": /proc/cpuinfo's model name, "cores": hardware threads}.
nlohmann::json this_host();
/// Empty when the host profile `name_or_file` (data/hardware/NAME.json or a file) was measured on
/// a CPU of this machine's model with as many cores; otherwise one sentence naming both (or
/// saying the profile does not record its CPU), for `plan` to print: a profile from another
/// machine mispredicts step times (the shipped local.json predicted 24.9 s for a 53-62 s step).
std::string host_profile_mismatch(const std::string& name_or_file);

}  // namespace longseq::plan
