#pragma once
// The planner: costs a whole training step for every configuration of a cluster of `gpus` GPUs
// (how they split into dp data-parallel replicas x cp context-parallel ranks, the attention
// algorithm with its ring/team/Ulysses sizes, the checkpoint policy, the loss mode), ranks the
// feasible ones and lists the infeasible ones with the reason.
//
// The trainer it models (train/trainer.hpp): world = dp x cp ranks, replica d's context group is
// ranks [d cp, (d + 1) cp); ZeRO-3 over all dp x cp ranks; K = global batch / dp micro-batches
// (gradient accumulation, --grad-accum) per replica per step, one optimizer step.
//
// Step model. One micro-batch (one sequence of N tokens over a group of cp ranks, T = N / cp
// tokens per rank), per layer:
//   forward   max( linear_fwd + attention_fwd ,  zero_ag + attention_inter_busy_fwd )
//   backward  max( recompute + linear_bwd + attention_bwd ,
//                  zero_ag + zero_rs + attention_inter_busy_bwd )
// the attention terms from cost_attention() (the executor's schedules of one group replayed per
// placement on the nodes, attention_cost.hpp), ZeRO-3's ring collectives over all dp x cp ranks
// (comm's rings: dp x cp - 1 steps at the pace of the slowest hop, the inter-node rail once the
// ring spans nodes; parameters gathered in the profile's dtype, gradients reduce-scattered in
// fp32 as zero.hpp does) prefetched under the layer's compute as model/transformer.cpp prefetches
// them, sharing the inter-node NICs with attention's transfers (attention_inter_busy = the busiest
// rank's inter-node bytes / beta). What nothing overlaps: the embedding's and the first layer's
// gathers before the forward, the last layer's before the backward, the first layer's and the
// embedding's reduce-scatters after it (the final unit's gather and reduce-scatter ride with the
// last layer's forward and backward). Then
//   micro  = exposed ZeRO-3 + sum of layers + LM head (6 T h V / gamma)
//   step   = K * micro + step all-reduces (token count, loss, gradient norm: scalar rings,
//            2 (dp cp - 1) hops each) + optimizer (AdamW streams 40 bytes per parameter of the
//            rank's shard at the profile's memory bandwidth; not modelled without one)
// Not modelled (said so in --explain): elementwise kernels (norms, RoPE, SwiGLU activation), the
// embedding lookup. TGS = K dp N / (step dp cp); MFU = 3 x forward model FLOPs (mask-aware, no
// recomputation) / (step x GPUs x peak).
//
// Ranking: by seconds per sequence (step / (dp K)): with a global batch the step time, without one
// (one sequence per replica per step) the throughput. Equal keys keep the candidate order: splits
// by cp ascending, algorithms as candidate_algos lists them, checkpoint policies, loss modes.
//
// Search at cluster scale: one group is replayed per placement (not the dp groups), data
// parallelism is priced in closed form, and a configuration is only replayed when it can still
// reach the exact part of the ranking: attention_lower_bound() gives, without schedules, a step
// time no larger than the replayed one (and the memory before the attention buffers); the
// configurations are replayed in waves (splits by cp ascending, inside a split by bound), and
// those whose bound exceeds the key of the `top`-th best replayed so far are reported as pruned
// with that bound. Waves are fixed by the order, not by threads, so the output is the same on any
// machine; the first `top` configurations are those, and in that order, with those bits, that
// replaying everything gives (tests/plan/search_test.cpp holds it against whole-cluster replays).
#include <cstdint>
#include <nlohmann/json.hpp>
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
  /// Data-parallel degrees (each dividing gpus) and context-parallel degrees (cp = gpus / dp) to
  /// consider; empty: every divisor of gpus.
  std::vector<int> dps, cps;
  /// Sequences per optimizer step; 0: one per replica (dp per step, no accumulation). A split
  /// needs dp to divide it and runs K = global_batch / dp micro-batches per replica.
  int64_t global_batch = 0;
  /// The first `top` configurations of the ranking are exact; beyond them configurations whose
  /// lower bound exceeds the top-th best key are not replayed (pruned). 0: replay everything.
  int top = 0;
  /// >= 0: prune also what cannot beat the top-th best by more than this fraction (0: exact).
  double prune_gap = 0;
  /// Replay every replica's group as one cluster and prune nothing: the reference the search is
  /// tested against (quadratic in the GPUs).
  bool exhaustive = false;
  /// Throws core::Error naming the flag and values (gpus not divisible by gpus-per-node, a --dp
  /// that does not divide --gpus, a global batch no split can run, ...).
  void validate() const;
};

/// How the GPUs are used: dp replicas x cp context ranks, K micro-batches per replica per step.
struct Split {
  int dp = 1, cp = 1;
  int64_t grad_accum = 1;
};

struct PlanConfig {
  attention::Algorithm algo;
  model::CheckpointPolicy checkpoint = model::CheckpointPolicy::full;
  model::LossMode loss = model::LossMode::fused;
  Split split;
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
  /// Not replayed: its lower bound (bound_seconds) exceeds the top-th best key, or the search's
  /// gap; step_seconds etc. stay 0. feasible is false, reason says why.
  bool pruned = false;
  std::string reason;  ///< why not feasible (empty when feasible)
  double step_seconds = 0, tokens_per_sec_per_gpu = 0, mfu = 0;
  double bound_seconds = 0;  ///< lower bound of step_seconds from attention_lower_bound()
  MemoryBreakdown memory;
  double comm_bytes_intra = 0, comm_bytes_inter = 0;  ///< per rank per step, all layers
  std::vector<Term> terms;    ///< per layer and per step, with their formulas
  std::vector<Term> summary;  ///< the step by kind; the seconds add up to step_seconds
  int64_t index = 0;          ///< position in the candidate order (ties keep it)
  /// Seconds per sequence: the ranking key.
  double key() const {
    return step_seconds / static_cast<double>(config.split.dp * config.split.grad_accum);
  }
};

/// A split the search could not run, with the reason (its configurations are not listed).
struct SplitNote {
  Split split;
  std::string reason;
};

struct PlanResult {
  std::vector<Evaluation> configs;   ///< feasible by key, then pruned by bound, then infeasible
  std::vector<Split> splits;         ///< the splits searched, by cp ascending
  std::vector<SplitNote> refused;    ///< splits left out (cp above the sequence, ...)
  int64_t replayed = 0, pruned = 0;  ///< algorithms (per split) replayed / not replayed
};

/// The splits of `opt` (every dp dividing gpus, restricted by dps, cps and the global batch), by
/// cp ascending; throws core::Error naming the flags when none is left.
std::vector<Split> candidate_splits(const PlanOptions& opt);

/// The candidate algorithms for P ranks with `gpus_per_node` per node (feasibility is decided
/// later, with reasons).
std::vector<attention::Algorithm> candidate_algos(int gpus, int gpus_per_node);

/// Evaluates one configuration given its attention cost (shared by the configs of one algorithm
/// and split): the exact step when `attn` is cost_attention()'s, a lower bound of it (and of the
/// memory) when it is attention_lower_bound()'s.
Evaluation evaluate(const PlanOptions& opt, const PlanConfig& cfg, const AttentionCost& attn);

/// The search (see the file comment). Blocking; uses every hardware thread.
PlanResult plan_search(const PlanOptions& opt);
/// plan_search(opt).configs.
std::vector<Evaluation> plan(const PlanOptions& opt);

/// {"configs": [{"algo", "inner_ring", "team_c", "ulysses", "checkpoint", "loss", "dp", "cp",
/// "grad_accum", "feasible", "pruned", "reason", "step_seconds", "lower_bound_seconds",
/// "tokens_per_sec_per_gpu", "mfu", "peak_memory_bytes", "comm_bytes": {"intra", "inter"},
/// "cost_model"}, ...]}: the configurations in result order.
nlohmann::json configs_json(const std::vector<Evaluation>& evals);
/// configs_json(evals) dumped with 2 spaces and a newline.
std::string plan_json(const std::vector<Evaluation>& evals);

/// The attention problem of one layer of `split` under `opt` (a group of split.cp ranks among
/// split.dp replicas; opt.exhaustive: the whole cluster replayed).
AttnProblem attention_problem(const PlanOptions& opt, const Split& split);
/// Of the one split of dp = 1 (every GPU a context rank).
AttnProblem attention_problem(const PlanOptions& opt);

}  // namespace longseq::plan
