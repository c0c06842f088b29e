#pragma once
// Hardware profiles: the numbers the cost model needs, kept as data (data/hardware/<name>.json) so
// a cluster a user does not have at hand is one file away. Every field is per GPU (per rank)
// unless it says node.
//
// The alpha-beta-gamma model (design.md §7) reads three kinds of numbers:
//   alpha  latency of one message on a link class (seconds)
//   beta   bandwidth of one rank on a link class, one direction (bytes/s)
//   gamma  FLOP rate of a kind of compute (FLOP/s) = peak_flops * efficiency
// The efficiencies (and any other fudge) live apart, in `Corrections`, so that `--explain` can
// print the pure alpha-beta-gamma terms and the empirical corrections separately.
#include <string>
#include <string_view>
#include <vector>

#include "longseq/core/options.hpp"

namespace longseq::plan {

/// One link class (intra-node or inter-node), as one rank sees it.
struct Link {
  double latency_s = 0;  ///< alpha: per message
  double bandwidth_Bps =
      0;  ///< beta: one rank, one direction, when all ranks of a node send at once
};

/// Empirical corrections, labelled as such wherever they are printed. 1.0 = the pure model.
struct Corrections {
  double gemm_efficiency = 1.0;           ///< achieved / peak for the large GEMMs of linear layers
  double attention_fwd_efficiency = 1.0;  ///< achieved / peak for the attention forward kernel
  double attention_bwd_efficiency = 1.0;  ///< achieved / peak for the attention backward kernel
  double collective_efficiency = 1.0;  ///< achieved / link bandwidth for ring collectives (ZeRO-3)
  /// Cost of one computed (q, k) pair of a partial tile relative to a full tile's (the per-element
  /// mask, exp of masked scores); used only with KernelTiles.
  double partial_tile_cost_fwd = 1.0, partial_tile_cost_bwd = 1.0;
  std::string source;  ///< where the numbers come from
};

/// The attention kernels' efficiency as a function of the block length (issue "GPU II" item 6):
/// kernels lose much of their rate on short blocks, and a ring step's block is N/P (or N/2P)
/// tokens. Points (tokens, forward efficiency, backward efficiency) measured on square blocks
/// (bench/cuda_attention_bench's sweep: L x L blocks, batch keeping the work equal), tokens
/// strictly increasing. A kernel call of lq queries and lk keys runs at the efficiency of
/// L = sqrt(lq lk), interpolated linearly in log2 L between points and held at the end points
/// outside them. Empty: the constant attention_*_efficiency of Corrections.
struct BlockCurve {
  struct Point {
    double tokens = 0, fwd = 0, bwd = 0;
  };
  std::vector<Point> points;
  std::string source;  ///< the measurement (bench run, GPU, date)
  bool enabled() const { return !points.empty(); }
  /// Efficiency at a block of `tokens` (> 0) for the forward (fwd) or backward pass.
  double at(double tokens, bool fwd) const;
};

/// The block kernels' tiling (kernels/cpu/attention.hpp kForwardTile*, kBackwardTile*). When set
/// (q > 0), a work item costs the (q, k) pairs the kernels compute rather than the visible ones:
/// empty tiles skipped, full tiles whole, partial tiles over their trimmed rectangle (the same
/// classification as kernels/cpu/tiles.hpp), at partial_tile_cost x the full-tile rate. Unset:
/// visible pairs only (the GPU profiles: their corrections are FlashAttention-level efficiencies
/// of visible FLOPs).
struct KernelTiles {
  int64_t fwd_q = 0, fwd_k = 0, bwd_q = 0, bwd_k = 0;
  bool enabled() const { return fwd_q > 0; }
};

/// One GPU as `longseq calibrate --device cuda` measured it (a single-GPU profile: the
/// planner's --train prediction of `longseq train --device cuda` reads it; it has no links).
struct GpuMeasured {
  std::string name;                 ///< the runtime's device name; empty: not a GPU profile
  double gemm_bf16_flops = 0;       ///< cuBLASLt GEMM 8192^3, bf16 operands, fp32 accumulation
  double gemm_f32_flops = 0;        ///< the same in fp32
  double memory_bandwidth_Bps = 0;  ///< device-to-device copy: 2 x bytes / seconds (read + write)
};

struct Hardware {
  std::string name;
  std::string description;
  std::string source;  ///< paper section or "measured by longseq calibrate on ..."
  int gpus_per_node = 1;
  double memory_bytes = 0;  ///< device memory per GPU
  double peak_flops = 0;    ///< dense peak of the training dtype (bf16 on GPUs, f32 on CPU)
  /// Device memory bandwidth per GPU (bytes/s, the vendor's figure): the optimizer step, which
  /// streams every shard's parameters, gradients and moments, runs at it. 0: not modelled.
  double memory_bandwidth_Bps = 0;
  int dtype_bytes = 2;  ///< bytes per element of activations and messages
  Link intra, inter;    ///< inter.bandwidth_Bps is the node's inter-node bandwidth / gpus_per_node
  double inter_node_bandwidth_Bps = 0;  ///< as given in the profile, for the record
  Corrections corrections;
  /// The block-length curve of the attention efficiency (GPU profiles measured by longseq's
  /// bench); where set, it replaces corrections.attention_*_efficiency per kernel call.
  BlockCurve attention_curve;

  // --- One host of threads (the comm local backend); both 0 on GPU clusters. ---------------------
  /// > 0: every rank is a thread on one host with this many cores. A rank computes at
  /// compute_share(ranks) of the single-thread rate: min(1, host_cores / ranks) (oversubscribed
  /// ranks time-share the cores). 0: every rank has its own device.
  int host_cores = 0;
  KernelTiles tiles;
  /// bandwidth_Bps > 0: the local backend moves a message with one memcpy done by a rank that
  /// waits for it, so the copy is not overlapped with compute: a wait ends no earlier than
  /// latency_s + bytes / bandwidth_Bps after the waiter arrives (on top of any link model, which
  /// runs from the post). Measured by the comm ping-pong of `longseq calibrate`.
  Link wait_copy;
  /// The MPI backend's link as measured by `longseq calibrate` under mpirun (one intra-node
  /// ping-pong); mpi_measured false and mpi_note saying why when it was not.
  Link mpi;
  bool mpi_measured = false;
  std::string mpi_note;
  /// Set (gpu.name non-empty) in a profile of one GPU written by `longseq calibrate --device
  /// cuda`: memory_bytes is its memory, peak_flops its measured bf16 GEMM rate, and the links
  /// (intra.*, inter.*), which every other profile must give, may be absent (0): the cluster
  /// planner refuses such a profile (plan/planner.cpp PlanOptions::validate).
  GpuMeasured gpu;
  bool single_gpu() const { return !gpu.name.empty(); }

  double compute_share(int ranks) const {
    return host_cores > 0 && ranks > host_cores ? static_cast<double>(host_cores) / ranks : 1.0;
  }
  double gemm_flops() const { return peak_flops * corrections.gemm_efficiency; }
  double attention_fwd_flops() const { return peak_flops * corrections.attention_fwd_efficiency; }
  double attention_bwd_flops() const { return peak_flops * corrections.attention_bwd_efficiency; }
};

/// The profile's fields, one row each (key, check, required): the file format.
const std::vector<core::Field<Hardware>>& hardware_fields();
/// Parses a profile from JSON text; throws core::Error("[plan] ...") naming `what` (a file name)
/// and the missing or bad field.
Hardware parse_hardware(const std::string& json_text, std::string_view what);
/// Serialises a profile (the format parse_hardware reads).
std::string hardware_to_json(const Hardware& hw);

/// `name_or_file`: a profile name (looked up as <data_dir>/hardware/<name>.json) or a path to a
/// .json file. Throws core::Error naming the flag value and the known names when not found.
Hardware load_hardware(std::string_view name_or_file);
/// Names of the profiles shipped in data/hardware/, sorted.
std::vector<std::string> hardware_names();
/// core::data_dir(): $LONGSEQ_DATA_DIR, an install's share/longseq, or the source tree's data/.
std::string data_dir();

}  // namespace longseq::plan
