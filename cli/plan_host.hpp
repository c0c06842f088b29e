#pragma once
// `longseq plan --train PRESET`: the host trainer's peak RSS (plan/memory.hpp host_trainer_memory).
#include <cstdint>
#include <string>
#include <vector>

#include "longseq/plan/memory.hpp"
#include "longseq/train/trainer.hpp"

namespace longseq::cli {

struct HostPlanArgs {
  std::string preset;                     ///< train preset name or FILE.json
  int64_t seq = 0;                        ///< > 0: overrides the preset's
  int world = 0;                          ///< > 0: overrides
  std::string algo, balance, loss, mask;  ///< non-empty: override
  std::vector<std::string> checkpoints;   ///< empty: all four policies
  int64_t ffn_chunk = -1;                 ///< >= 0: overrides
  int64_t data_tokens = -1;               ///< >= 0: instead of reading the preset's data file
  double memory_limit_gib = 0;            ///< 0: MemTotal
  bool longest = false, explain = false;
  bool json = false;  ///< one JSON object instead of the table
};

/// The inputs of host_trainer_memory for a training config and its --mask text.
plan::HostTrainerInputs host_inputs(const train::TrainConfig& c, const std::string& mask_text,
                                    int64_t data_tokens);

/// Prints the prediction per checkpoint policy (and the longest N with `longest`). Returns 0.
int plan_host(const HostPlanArgs& a);

}  // namespace longseq::cli
