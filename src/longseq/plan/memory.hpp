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
#include <string>
#include <string_view>
#include <vector>

#include "longseq/plan/model_config.hpp"

namespace longseq::plan {

enum class Checkpoint : uint8_t { none, full, selective_pp, seq_selective };
enum class LossMode : uint8_t { fused, unfused };
std::string_view checkpoint_name(Checkpoint c);
std::string_view loss_name(LossMode l);
/// Throws core::Error naming the flag and value.
Checkpoint parse_checkpoint(std::string_view s);
LossMode parse_loss(std::string_view s);

struct MemoryInputs {
  ModelConfig model;
  int world = 1;
  int64_t local_tokens = 0;   ///< L (padding included)
  int act_bytes = 2;          ///< e
  Checkpoint checkpoint = Checkpoint::full;
  LossMode loss = LossMode::fused;
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

}  // namespace longseq::plan
