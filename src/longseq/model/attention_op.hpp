#pragma once
// The attention sub-layer as a block sees it: local q, k, v in, o (and what the backward needs)
// out. The model does not know the algorithm or the communication backend; it holds one
// AttentionOp per run (design.md §1: model must not know which comm backend runs).
//
// Legend: L local tokens (layout order, padding included), Hq/Hkv heads, D head dim;
// q [L, Hq, D], k/v [L, Hkv, D] (contiguous).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "longseq/attention/distributed.hpp"

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
  /// Replaces the mask for the calls that follow (same sequence length; e.g. the next step's
  /// document ids). Every rank of the group sets the same mask before its next call.
  virtual void set_mask(std::shared_ptr<const attention::MaskSpec> mask) = 0;
};

/// The trainer's --mask: comma-separated terms, always causal (a language model predicts the
/// next token):
///   causal            (the default; may be combined with the others)
///   window:W          sliding window: a token sees itself and the W - 1 tokens before it
///   document          a token sees only its own document, the documents being delimited by the
///                     data's end-of-text tokens of each sequence (train/data.hpp document_ids)
///   document:FILE     fixed document ids of the whole sequence (int32 .npy [seq])
///   blocks:FILE:B     a block mask (uint8 .npy), as `longseq attention --mask` takes it
/// The same grammar as `attention --mask` (attention/mask_spec.hpp) plus the bare `document`;
/// `full` is refused. W >= seq is the causal mask and is kept as written.
struct TrainMask {
  std::string text = "causal";                      ///< as given (normalised: terms joined by ',')
  bool document = false;                            ///< per-sequence document ids from the data
  std::shared_ptr<const attention::MaskSpec> base;  ///< everything but the per-step document ids
  /// Throws core::Error("[train] --mask ...") naming the term (unknown, full, document twice,
  /// files of the wrong length for `seq` tokens).
  static TrainMask parse(const std::string& text, int64_t seq);
  int64_t window() const { return base ? base->window : 0; }
  /// The block mask's block size B (blocks:FILE:B), 0 without one: the block-striped layout
  /// deals out runs of B / P tokens, so it needs B.
  int64_t block() const { return base ? base->block_size : 0; }
  /// The mask of one step: `base` with `docs` (empty: none) as document ids.
  std::shared_ptr<const attention::MaskSpec> with_documents(std::vector<int32_t> docs) const;
};

/// The (query, key) pairs `mask` lets through over a sequence of n tokens (the attention FLOPs of
/// the MFU formula are 12 * layers * Hq * D times this). Exact for causal, window, documents and
/// block masks (attention::count_visible, rounded to a double: exact up to 2^53).
double visible_pairs(const attention::MaskSpec& mask, int64_t n);

/// Distributed attention over `group` with any --algo (attention/algorithm.hpp; every rank of the
/// group calls with the same arguments). The mask
/// is over the whole sequence (layout.global_len() tokens). `precision` (f32 | bf16) is
/// attention::AttentionSpec::precision, `device` its device (q, k, v, dO in that device's memory;
/// a GPU needs its executor backend registered: train::device_attention does it).
std::unique_ptr<AttentionOp> make_distributed_attention(
    const attention::Algorithm& algo, std::shared_ptr<const attention::MaskSpec> mask,
    const attention::Layout& layout, comm::Group& group, int threads,
    core::DType precision = core::DType::f32, core::Device device = core::Device::cpu());

}  // namespace longseq::model
