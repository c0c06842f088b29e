#include "longseq/plan/memory.hpp"

#include "longseq/core/error.hpp"

namespace longseq::plan {

std::string_view checkpoint_name(Checkpoint c) {
  switch (c) {
    case Checkpoint::none: return "none";
    case Checkpoint::full: return "full";
    case Checkpoint::selective_pp: return "selective++";
    case Checkpoint::seq_selective: return "seq-selective";
  }
  return "?";
}

std::string_view loss_name(LossMode l) { return l == LossMode::fused ? "fused" : "unfused"; }

Checkpoint parse_checkpoint(std::string_view s) {
  for (Checkpoint c : {Checkpoint::none, Checkpoint::full, Checkpoint::selective_pp, Checkpoint::seq_selective})
    if (s == checkpoint_name(c)) return c;
  core::fail("plan", "--checkpoint '", s, "' (expected none, full, selective++ or seq-selective)");
}

LossMode parse_loss(std::string_view s) {
  if (s == "fused") return LossMode::fused;
  if (s == "unfused") return LossMode::unfused;
  core::fail("plan", "--loss '", s, "' (expected fused or unfused)");
}

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
  const ModelConfig& m = in.model;
  const double p = in.world, t = static_cast<double>(in.local_tokens), e = in.act_bytes;
  const double np = static_cast<double>(m.params()), nl = static_cast<double>(m.params_per_layer());
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
    case Checkpoint::none: b.checkpoints = layers * layer_saved + a; break;
    case Checkpoint::full: b.checkpoints = inputs; break;
    case Checkpoint::selective_pp: b.checkpoints = inputs + layers * o_lse; break;
    case Checkpoint::seq_selective:
      b.checkpoints = inputs + layers * (1 - in.seq_selective_fraction) * o_lse;
      break;
  }
  b.working = (in.checkpoint == Checkpoint::none ? 0.0 : layer_saved) + 2 * a;
  b.attention_buffers = in.attention_buffer_bytes;
  b.attention_extra = in.attention_extra_bytes;
  if (in.loss == LossMode::fused)
    b.lm_head = t * 4 * 2 + 2 * 1024.0 * 8192.0 * 4;
  else
    b.lm_head = unfused_logits_bytes(in.local_tokens, m.vocab);
  return b;
}

}  // namespace longseq::plan
