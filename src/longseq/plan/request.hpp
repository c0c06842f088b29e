#pragma once
// `longseq plan` as one library call: the command's flags as a plain struct, answered by
// run_plan(), whose to_json() is what `longseq plan --json` prints. The CLI (cli/cmd_plan.cpp)
// declares its flags into a PlanRequest and prints what comes back; the Python package binds the
// same struct and function (`longseq.plan(gpus=1024, gpus_per_node=8, seq="16M", ...)` returns
// plan_request_json's value), so both read the flags with this one code.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "longseq/core/flag_rows.hpp"
#include "longseq/plan/host_plan.hpp"
#include "longseq/plan/planner.hpp"

namespace longseq::plan {

/// --prune-gap's automatic value (docs/planner.md "Why the exact search does not reach 16K GPUs"):
/// the exact search replays every compute-bound split, quadratic in cp, which at 1024 GPUs and 16M
/// tokens takes a minute and 2 GB on 2 cores and past it does not fit; above that the default
/// prunes what could beat the top by at most 1% (the winner is within 1% of the exact one), so
/// `plan --gpus 16384` answers in seconds, while every cluster small enough for the exhaustive
/// reference stays exact.
inline constexpr int kExactUpToGpus = 1024;
inline constexpr double kAutoPruneGap = 0.01;

/// The flags of `longseq plan` that decide its answer, as the command line takes them: a field is
/// its flag without the leading "--", '-' read as '_' (--gpus-per-node is gpus_per_node), holding
/// the text or number the flag takes, with the flag's default. Output flags (--json, --explain,
/// --timeline, --svg) are the caller's, not the request's.
struct PlanRequest {
  std::string model = "llama-7b";  ///< preset (llama-7b, llama-14b) or FILE.json
  std::string seq = "1M";          ///< tokens per sequence; suffixes K, M, G (powers of 1024)
  int gpus = 32;                   ///< GPUs of the cluster (dp x cp)
  int gpus_per_node = 8;
  std::string hardware = "a800";  ///< profile name (data/hardware) or FILE.json
  double memory_limit = 0;        ///< GiB per GPU; 0: the profile's memory (train: MemTotal)
  std::string mask = core::rows::mask.text;
  std::string balance = core::rows::balance.text;
  std::string algo;        ///< comma list restricting the algorithms; empty: all
  std::string checkpoint;  ///< comma list of policies; empty: all four
  std::string loss;        ///< comma list (fused, unfused); empty: both
  double seq_selective_fraction = 0.5;
  std::string dp;  ///< comma list of data-parallel degrees to consider; empty: every divisor
  std::string cp;  ///< comma list of context-parallel degrees; empty: every divisor
  /// Sequences per optimizer step: "" (one per replica, ranked by throughput), tokens ("64M", a
  /// whole number of sequences) or sequences ("16seq").
  std::string global_batch;
  int top = 20;  ///< the exact part of the ranking (PlanOptions::top); 0: replay everything
  /// PlanOptions::prune_gap; negative: automatic, kAutoPruneGap above kExactUpToGpus GPUs and
  /// exact (0) up to them.
  double prune_gap = -1;
  bool exhaustive = false;  ///< PlanOptions::exhaustive: whole-cluster replays, nothing pruned
  // --train: the host trainer's memory instead (host_plan.hpp)
  std::string train;  ///< PRESET or FILE.json; non-empty: answer with host_plan()
  int64_t ffn_chunk = -1, data_tokens = -1;
  bool longest = false;
  std::string device = core::rows::device.text;
  /// The fields set explicitly (their names as above, e.g. "seq"). With `train`, seq, gpus
  /// (the world), mask, balance and hardware override the preset only when listed here; the
  /// cluster planner reads every field as it is.
  std::vector<std::string> given;
};

/// The answer to a request: the cluster search, or the host plan of `train`.
struct PlanReport {
  PlanRequest request;
  std::optional<PlanOptions> options;  ///< the cluster planner's (absent with `train`)
  PlanResult result;
  std::optional<HostPlan> host;       ///< with `train`
  std::vector<std::string> warnings;  ///< e.g. a host profile measured on another CPU
  /// The best feasible configuration; null when none is.
  const Evaluation* winner() const;
  /// What `longseq plan --json` prints. Cluster: {"configs": [...] (configs_json), "search":
  /// {"gpus", "gpus_per_node", "seq", "global_batch_sequences", "splits": [{"dp", "cp",
  /// "grad_accum"}], "refused_splits": [{"dp", "cp", "reason"}], "algorithms_replayed",
  /// "algorithms_pruned", "exact_top", "prune_gap", "exhaustive"}, "winner": null | {"dp", "cp",
  /// "grad_accum", "algo", "checkpoint", "loss", "step_seconds", "terms": [{"name", "seconds",
  /// "detail"}], "summary": [...], "memory": [{"name", "bytes"}]}, "warnings": [...]}.
  /// Train: HostPlan::to_json(preset) with "warnings".
  nlohmann::json to_json() const;
};

/// The cluster planner's options for `r`: every flag parsed and checked (core::Error naming the
/// flag and value), warnings (a `local` profile from another CPU) appended to `warnings`.
PlanOptions plan_options(const PlanRequest& r, std::vector<std::string>* warnings = nullptr);
/// The host plan's request for `r` (with `train`).
HostPlanRequest host_request(const PlanRequest& r);

/// Answers `r`: plan_search(plan_options(r)), or host_plan(host_request(r)) with `train`.
/// Blocking; uses every hardware thread. Throws core::Error for bad input.
PlanReport run_plan(const PlanRequest& r);
/// run_plan(r).to_json(): exactly what `longseq plan --json` prints for the same flags. The one
/// call the Python binding makes.
nlohmann::json plan_request_json(const PlanRequest& r);

/// "" -> 0; "16seq" / "16seqs" / "16sequences" -> 16; a token count ("64M") -> its sequences of
/// `seq` tokens. Throws core::Error naming --global-batch when the tokens are not a whole
/// positive number of sequences.
int64_t parse_global_batch(const std::string& text, int64_t seq);

/// The --explain report of the winner: its split, the step by kind (summary), every term with
/// its formula, the memory by term, the search. `link_split`: also replay the winner's attention
/// with the intra-node links free and with the inter-node links free, to tell what of its exposed
/// communication each link class leaves (two more replays of one group).
std::string explain_text(const PlanReport& report, bool link_split);

/// An SVG of the best `count` feasible configurations: seconds per sequence stacked by kind
/// (summary) beside the peak memory stacked by term.
std::string plan_svg(const PlanReport& report, int count = 12);

}  // namespace longseq::plan
