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

namespace longseq::plan {

/// One link class (intra-node or inter-node), as one rank sees it.
struct Link {
  double latency_s = 0;      ///< alpha: per message
  double bandwidth_Bps = 0;  ///< beta: one rank, one direction, when all ranks of a node send at once
};

/// Empirical corrections, labelled as such wherever they are printed. 1.0 = the pure model.
struct Corrections {
  double gemm_efficiency = 1.0;       ///< achieved / peak for the large GEMMs of linear layers
  double attention_fwd_efficiency = 1.0;  ///< achieved / peak for the attention forward kernel
  double attention_bwd_efficiency = 1.0;  ///< achieved / peak for the attention backward kernel
  double collective_efficiency = 1.0;  ///< achieved / link bandwidth for ring collectives (ZeRO-3)
  std::string source;                  ///< where the numbers come from
};

struct Hardware {
  std::string name;
  std::string description;
  std::string source;          ///< paper section or "measured by longseq calibrate on ..."
  int gpus_per_node = 1;
  double memory_bytes = 0;     ///< device memory per GPU
  double peak_flops = 0;       ///< dense peak of the training dtype (bf16 on GPUs, f32 on CPU)
  int dtype_bytes = 2;         ///< bytes per element of activations and messages
  Link intra, inter;           ///< inter.bandwidth_Bps is the node's inter-node bandwidth / gpus_per_node
  double inter_node_bandwidth_Bps = 0;  ///< as given in the profile, for the record
  Corrections corrections;

  double gemm_flops() const { return peak_flops * corrections.gemm_efficiency; }
  double attention_fwd_flops() const { return peak_flops * corrections.attention_fwd_efficiency; }
  double attention_bwd_flops() const { return peak_flops * corrections.attention_bwd_efficiency; }
};

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
/// The repository's data/ directory (compiled in; overridden by the LONGSEQ_DATA_DIR env var).
std::string data_dir();

}  // namespace longseq::plan
