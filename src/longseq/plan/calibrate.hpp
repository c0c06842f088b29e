#pragma once
// Measures this machine into a hardware profile (hardware.hpp), for `longseq plan --hardware
// local` and bench/plan_calibration_bench; `longseq calibrate` (cli/cmd_calibrate.cpp) writes it.
//
// Measured, each with the real part that the executor runs:
//   gemm     kernels::single_thread_gemm_flops (f32 1024^3 on one thread): the profile's "peak"
//            (gemm_efficiency 1 by definition). The trainer's MFU peak is the same measurement.
//            The profile is per thread whatever --threads is: a rank of the planner's `local`
//            profile computes on one core (Hardware::compute_share), so rates measured on
//            --threads threads enter it divided by the threads (docs/planner.md).
//   attention  kernels::cpu attention_block_forward / backward, --block x --block, 8 heads, D 128,
//            full mask, FLOPs counted as 4 and 10 per (q, k) pair and head-dim element (the
//            planner's convention), each copy on --threads threads (default: every hardware thread,
//            core::default_threads). Timed twice: alone, and with cores / threads copies running at
//            once (every core busy, the regime of a distributed run). The profile's efficiencies
//            are the all-cores-busy rates per thread over the GEMM peak (a labelled correction).
//   local link  comm::run(backend "local", world 2): ping-pong of isend/irecv from 1 KiB to 64 MiB
//            (x4 steps); one-way time = half the round trip. alpha = one-way time of 1 KiB, beta
//            from the 64 MiB point. Written as intra, inter (one host) and wait_copy (the local
//            backend copies at the wait: hardware.hpp).
//   mpi link  the same ping-pong between ranks 0 and 1 through the MPI backend, only when launched
//            by mpirun (`mpirun -np 2 longseq calibrate`; rank 0 measures the rest and writes the
//            profile); otherwise the profile says "not measured".
//   cores    std::thread::hardware_concurrency(): host_cores (ranks beyond it time-share cores).
// Kernel rates are timed on the thread CPU clock (core::thread_cpu_seconds, best of --repeats),
// the ping-pong on the wall clock (its waits sleep); the 1-minute load average is recorded next
// to them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "longseq/core/device.hpp"
#include "longseq/core/flag_rows.hpp"
#include "longseq/plan/attention_cost.hpp"
#include "longseq/plan/hardware.hpp"

namespace longseq::plan {

struct CalibrateOptions {
  /// compute threads per rank (the executor's AttentionSpec::threads); 0: the host's hardware
  /// threads (core::default_threads, as every command's --threads)
  int threads = core::rows::threads.number;
  int repeats = 5;           ///< timed repetitions per kernel measurement (best is kept)
  int64_t block = 1024;      ///< attention block size (tokens) of the kernel measurement
  double memory_gib = 0;     ///< memory per rank in GiB (0: physical memory / 2)
  double pingpong_s = 0.05;  ///< target seconds per ping-pong size
  /// Throws core::Error("[calibrate] --flag value ...") when out of range.
  void validate() const;
};

/// One ping-pong size: one-way seconds (half the best round trip).
struct PingPoint {
  size_t bytes = 0;
  int iters = 0;
  double one_way_s = 0;
};

/// Attention kernel rates with some ranks computing at once.
struct AttnRates {
  double fwd = 0, bwd = 0;      ///< FLOP/s per rank, per computed (q, k) pair x 4 (10) x Hq x D
                                ///< (per thread: divided by Calibration::threads)
  double fwd_s = 0, bwd_s = 0;  ///< slowest rank's best time of one call
  TileWork fwd_work, bwd_work;
};

/// Everything measured, and the profile made of it.
struct Calibration {
  Hardware hw;
  int cores = 1, busy = 1;  ///< hardware threads; ranks computing at once in the busy timing
  int threads = 1;          ///< threads per rank of the kernel timings (--threads resolved)
  double gemm_flops = 0;    ///< one thread
  AttnRates alone, all, strided;
  double partial_cost_fwd = 1, partial_cost_bwd = 1;
  std::vector<PingPoint> local_pts, mpi_pts;
  Link local;
  std::string mpi_note;
};

/// Runs every measurement (minutes on a small machine). Under mpirun every process calls it; only
/// rank 0 gets a value (the others take part in the MPI ping-pong and get nullopt).
std::optional<Calibration> calibrate(const CalibrateOptions& options);
/// The profile as written to a file: hardware_to_json plus a "measurements" object.
std::string calibration_json(const Calibration& c);
/// What was measured, a few lines for the terminal.
std::string calibration_summary(const Calibration& c, int64_t block);

// ---- one GPU: `longseq calibrate --device cuda[:N]` ------------------------------------------
//
// Measured with what `train --device cuda` runs (train/device.hpp):
//   gemm      model::cuda::gemm_peak_gflops (cuBLASLt 8192^3, best of 3 runs of 5) in bf16 and
//             fp32: gpu.gemm_bf16_flops (also the profile's peak_flops) and gpu.gemm_f32_flops,
//             the trainer's MFU denominators
//   memory    the runtime's total device memory: memory_bytes
//   bandwidth a blocking device-to-device copy of 1 GiB (2 x bytes / seconds, best of 5):
//             gpu.memory_bandwidth_Bps
// The profile has no links (hardware.hpp GpuMeasured): `plan --train PRESET --hardware FILE`
// reads it; the cluster planner refuses it.

/// Measures GPU `device` (cuda:N) into a single-GPU profile named `name`. Throws
/// core::Error("[calibrate] --device ...") naming the device in a build without CUDA, and the
/// runtime's error where it sees no such GPU.
Hardware calibrate_gpu(core::Device device, const std::string& name);
/// The profile as written to a file: hardware_to_json plus "measurements" {device, host}.
std::string gpu_calibration_json(const Hardware& hw, core::Device device);
/// The measured numbers, a few lines for the terminal.
std::string gpu_calibration_summary(const Hardware& hw);

}  // namespace longseq::plan
