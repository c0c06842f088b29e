#pragma once
// The planner: costs a whole training step for every configuration (attention algorithm, its
// ring/team/Ulysses sizes, checkpoint policy, loss mode), ranks the feasible ones by predicted
// step time, and lists the infeasible ones with the reason.
//
// Step model (one sequence of N tokens over all P ranks, ZeRO-3 over the same P ranks):
//   per layer, forward   max( linear_fwd + attention_fwd ,  zero3_allgather + attention_inter_busy
//   ) per layer, backward  max( recompute + linear_bwd + attention_bwd ,
//                              zero3_allgather + zero3_reduce_scatter + attention_inter_busy )
//   step = layers * (forward + backward) + lm_head
// where every term is alpha * messages + bytes / beta or flops / gamma (Hardware), the attention
// terms come from cost_attention() (the executor's schedules replayed, or the labelled formulas),
// ZeRO-3 collectives prefetch under the layer's compute (the max) but share the inter-node NICs
// with attention's inter-node transfers (attention_inter_busy = attention inter bytes / beta).
// Not modelled (stated so in --explain): elementwise kernels (norms, RoPE, SwiGLU activation),
// the optimizer step, the embedding.
// TGS = N / (step * P); MFU = 3 * forward model FLOPs (mask-aware, no recomputation) /
// (step * P * peak_flops).
#include <string>
#include <vector>

#include "longseq/plan/attention_cost.hpp"
#include "longseq/plan/hardware.hpp"
#include "longseq/plan/memory.hpp"
#include "longseq/plan/model_config.hpp"

namespace longseq::plan {

struct PlanOptions {
  NamedModel model;
  int64_t seq = 0;
  int gpus = 1;
  int gpus_per_node = 1;
  Hardware hw;
  double memory_limit_bytes = 0;  ///< 0: the profile's memory_bytes
  attention::MaskSpec mask;       ///< default causal
  attention::Balance balance = attention::Balance::zigzag;
  double seq_selective_fraction = 0.5;
  /// Restrict the search (empty: everything).
  std::vector<std::string> algos;
  std::vector<model::CheckpointPolicy> checkpoints;
  std::vector<model::LossMode> losses;
  /// Throws core::Error naming the flag and values (gpus not divisible by gpus-per-node, ...).
  void validate() const;
};

struct PlanConfig {
  attention::Algorithm algo;
  model::CheckpointPolicy checkpoint = model::CheckpointPolicy::full;
  model::LossMode loss = model::LossMode::fused;
};

/// One named term of the step time, for --explain.
struct Term {
  std::string name;
  double seconds = 0;
  std::string detail;  ///< the formula with its numbers; empirical corrections named as such
};

struct Evaluation {
  PlanConfig config;
  bool feasible = false;
  std::string reason;  ///< why not (empty when feasible)
  double step_seconds = 0, tokens_per_sec_per_gpu = 0, mfu = 0;
  MemoryBreakdown memory;
  double comm_bytes_intra = 0, comm_bytes_inter = 0;  ///< per rank per step, all layers
  std::vector<Term> terms;
};

/// The candidate algorithms for P ranks with `gpus_per_node` per node (feasibility is decided
/// later, with reasons).
std::vector<attention::Algorithm> candidate_algos(int gpus, int gpus_per_node);

/// Evaluates one configuration given its attention cost (shared by the configs of one algorithm).
Evaluation evaluate(const PlanOptions& opt, const PlanConfig& cfg, const AttentionCost& attn);

/// Every configuration, feasible ones first by step time, then the infeasible ones.
std::vector<Evaluation> plan(const PlanOptions& opt);

/// {"configs": [{"algo", "inner_ring", "team_c", "ulysses", "checkpoint", "loss", "feasible",
/// "reason", "step_seconds", "tokens_per_sec_per_gpu", "mfu", "peak_memory_bytes",
/// "comm_bytes": {"intra", "inter"}}, ...]}
std::string plan_json(const std::vector<Evaluation>& evals);

/// The attention problem of one layer under `opt`.
AttnProblem attention_problem(const PlanOptions& opt);

}  // namespace longseq::plan
