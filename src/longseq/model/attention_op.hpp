#pragma once
// The attention sub-layer as a block sees it: local q, k, v in, o (and what the backward needs)
// out. The model does not know the algorithm or the communication backend; it holds one
// AttentionOp per run (design.md §1: model must not know which comm backend runs).
//
// Legend: L local tokens (layout order, padding included), Hq/Hkv heads, D head dim;
// q [L, Hq, D], k/v [L, Hkv, D] (contiguous).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "longseq/attention/distributed.hpp"
#include "longseq/attention/hybrid.hpp"

namespace longseq::comm {
class Group;
}

namespace longseq::model {

/// Accumulated per-rank timings of every attention call.
struct AttentionTimes {
  double compute_s = 0;
  double wait_s = 0;
};

class AttentionOp {
 public:
  virtual ~AttentionOp() = default;
  /// The full forward. q, k, v are borrowed by the result (kept alive by the caller).
  virtual attention::AttentionSaved forward(core::View<const float> q, core::View<const float> k,
                                            core::View<const float> v) = 0;
  /// The forward of this rank's local query rows [0, rows) only (its earliest tokens: local rows
  /// are in increasing global position under every layout); later rows' o and lse are
  /// unspecified. Cheap for causal masks, where early queries see few keys: the recomputation of
  /// sequence-level selective checkpointing. Ranks may pass different `rows`.
  virtual attention::AttentionSaved forward_prefix(core::View<const float> q,
                                                   core::View<const float> k,
                                                   core::View<const float> v, int64_t rows) = 0;
  virtual attention::AttentionGrads backward(core::View<const float> dout,
                                             const attention::AttentionSaved& saved) = 0;
  virtual const AttentionTimes& times() const = 0;
};

/// The algorithm named by --algo: ring | burst | double-ring[:ring] (one executor) or
/// startrail:C | ulysses | usp:U (the hybrid family).
struct AttentionAlgo {
  std::optional<attention::HybridAlgo> hybrid;
  attention::Algorithm flat;
  /// Throws core::Error naming `s` when it is no algorithm.
  static AttentionAlgo parse(const std::string& s);
  std::string name() const;
};

/// Distributed attention over `group` (every rank of it calls with the same arguments). The mask
/// is over the whole sequence (layout.global_len() tokens). `precision` (f32 | bf16) is
/// attention::AttentionSpec::precision.
std::unique_ptr<AttentionOp> make_distributed_attention(const AttentionAlgo& algo,
                                                        std::shared_ptr<const attention::MaskSpec> mask,
                                                        const attention::Layout& layout,
                                                        comm::Group& group, int threads,
                                                        core::DType precision = core::DType::f32);

}  // namespace longseq::model
