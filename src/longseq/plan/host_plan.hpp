#pragma once
// `longseq plan --train PRESET`: the peak RSS of `longseq train --preset PRESET` on this host
// (memory.hpp host_trainer_memory) per checkpoint policy, and with `longest` the longest sequence
// each policy fits in a memory limit. With a GPU (--device cuda, or --hardware naming a profile
// of `longseq calibrate --device cuda`), also the peak GPU memory of `longseq train --device
// cuda` (memory.hpp device_trainer_memory), at world 1 as that run is. The command
// (cli/cmd_plan.cpp) only prints the result.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "longseq/plan/memory.hpp"
#include "longseq/train/config.hpp"

namespace longseq::plan {

/// What to predict: a training preset and the flags that override it.
struct HostPlanRequest {
  std::string preset;                     ///< train preset name or FILE.json
  int64_t seq = 0;                        ///< > 0: overrides the preset's
  int world = 0;                          ///< > 0: overrides
  std::string algo, balance, loss, mask;  ///< non-empty: override
  std::vector<std::string> checkpoints;   ///< empty: all four policies
  int64_t ffn_chunk = -1;                 ///< >= 0: overrides
  int64_t data_tokens = -1;               ///< >= 0: instead of reading the preset's data file
  double memory_limit_gib = 0;            ///< 0: MemTotal
  bool longest = false;                   ///< also bisect the longest N per policy
  std::string device;    ///< "cuda" / "cuda:N": also the GPU run's memory; empty or "cpu": not
  std::string hardware;  ///< a single-GPU profile (name or FILE.json): implies a GPU run
};

/// The GPU run of one request (`train --device cuda`, world 1).
struct DevicePlan {
  std::string device;      ///< "cuda:0"
  std::string hardware;    ///< the profile's name, empty without one
  std::string gpu;         ///< the profile's GPU name
  double limit_bytes = 0;  ///< the profile's memory_bytes (0: no profile, no limit)
  double gemm_flops = 0;   ///< the profile's GEMM rate at the run's precision (0: no profile)
  double step_flops = 0;   ///< model FLOPs of one step (the trainer's MFU numerator)
  std::vector<DeviceTrainerMemory> memory;  ///< one per policy
  /// step_flops / gemm_flops: a lower bound of the step time (every FLOP at the GEMM rate,
  /// recomputation not counted); 0 without a profile.
  double step_seconds_bound() const { return gemm_flops > 0 ? step_flops / gemm_flops : 0; }
};

/// The longest sequence one checkpoint policy fits in the limit.
struct Longest {
  std::string checkpoint;
  int64_t seq = 0;  ///< 0: not even one step fits
  double predicted_bytes = 0;
};

struct HostPlan {
  train::TrainConfig config;  ///< the preset with the overrides (checkpoint: the last policy)
  std::string mask;           ///< the --mask text predicted
  int64_t data_tokens = 0;
  double limit_bytes = 0;
  bool limit_given = false;  ///< --memory-limit (else MemTotal)
  std::vector<std::string> policies;
  std::vector<HostTrainerMemory> memory;  ///< one per policy
  int64_t longest_step = 0;               ///< tokens: the bisection's unit
  std::vector<Longest> longest;           ///< one per policy when requested
  std::optional<DevicePlan> device;       ///< the GPU run, when asked for

  /// One JSON object (`plan --train --json`): the settings, per policy the prediction and its
  /// items times ranks, and the longest N when requested.
  nlohmann::json to_json(const std::string& preset) const;
};

/// The inputs of host_trainer_memory for a training config and its --mask text.
HostTrainerInputs host_inputs(const train::TrainConfig& c, const std::string& mask_text,
                              int64_t data_tokens);
/// The inputs of device_trainer_memory for a training config at world 1 and its --mask text;
/// cuda: the CUDA kernels (false: the device path on the CPU). Throws core::Error("[plan] ...")
/// when c.world is not 1.
DeviceTrainerInputs device_inputs(const train::TrainConfig& c, const std::string& mask_text,
                                  bool cuda);

/// Loads the preset (and its token file unless data_tokens is given), predicts every policy, and
/// bisects the longest N when asked. Throws core::Error naming a bad preset, flag or file.
HostPlan host_plan(const HostPlanRequest& request);

/// MemTotal of /proc/meminfo in bytes (0 when unreadable).
double host_memory_bytes();

}  // namespace longseq::plan
