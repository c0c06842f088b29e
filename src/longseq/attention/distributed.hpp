#pragma once
// Distributed attention: one call per pass on every rank of a group (design.md §5).
//
// Legend (per rank): L = layout.local_len() tokens in the layout's local order (padding included),
// Hq query heads, Hkv key/value heads (Hq = g * Hkv), D head dim.
//   q [L, Hq, D], k and v [L, Hkv, D], o and do [L, Hq, D], lse [L, Hq] (natural log).
// All ranks call with the same spec and layout; the call blocks until this rank's part is done
// (it communicates with the other ranks of `group` through the schedule of spec.algo).
// Rows of padding tokens, and rows that see no key, get o = 0, lse = -inf, zero gradients.
// Every tensor out is fp32 whatever spec.precision is, and so is every view in, except that the
// `_into` forms also take q, k, v, dO and the saved o in bf16; the precision decides what the
// kernels read and what the transfers carry.
#include <memory>
#include <string>
#include <string_view>

#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/attention/schedule.hpp"
#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/tensor.hpp"

namespace longseq::comm {
class Group;
}

namespace longseq::attention {

struct AttentionSpec {
  /// Any --algo (algorithm.hpp); every one runs its make_schedule plan (schedule.hpp) on the one
  /// executor.
  Algorithm algo;
  std::shared_ptr<const MaskSpec> mask = std::make_shared<MaskSpec>();
  double scale = 0.0;  ///< 0: 1/sqrt(D)
  int threads = 1;     ///< compute threads of this rank (ranks may share a host's cores)
  /// Precision of q, k, v (and dO in the backward) in the block kernels and on the wire: f32 or
  /// bf16; validate() refuses any other dtype. The API is fp32 either way (fp32 views in, fp32
  /// o, lse and gradients out). bf16: q, k, v and dO are rounded to bf16 once at entry
  /// (round-to-nearest-even), every block kernel runs its bf16 overload, and the ring family
  /// ships bf16 q, k, v and dO (in the ring and in the collective steps); accumulation, o, lse,
  /// D = rowsum(dO * O) and every gradient, including the gradient partials on the wire, stay
  /// fp32 (design.md §2), for every algorithm.
  /// The backward re-rounds the saved fp32 q, k, v, so it needs nothing extra from the forward.
  core::DType precision = core::DType::f32;
  /// Forward only: compute this rank's local query rows [0, query_rows) and nothing for the
  /// rows after them, whose o and lse are then unspecified (the ring family leaves o = 0,
  /// lse = -inf; StarTrail, Ulysses and USP compute them anyway). -1: every row. Transfers do not
  /// change, so ranks may pass different values. Local rows are in increasing global position
  /// under every layout, so a prefix is the rank's earliest tokens: sequence-level selective
  /// checkpointing recomputes exactly those (model/transformer.hpp).
  int64_t query_rows = -1;
  /// Ulysses over the whole group: run the all-to-alls as head-group transfers that overlap the
  /// compute of the previous group (schedule.hpp, "Ulysses head groups"). false: one blocking
  /// all-to-all before and after the compute. The outputs are bit-identical either way.
  bool head_groups = true;
  /// Where this rank computes (design.md §10): the CPU, or a GPU whose memory q, k, v, dO and
  /// the saved o, lse are in (device pointers; contiguous), and where o, lse and the gradients
  /// are returned. The schedule, the transfers and the results' layout are the same on every
  /// device; on a GPU the block kernels are kernels/cuda's (the same contracts; bits within
  /// their stated tolerance of the CPU's) on a stream of the rank's own, the transfers between
  /// ranks of one process device-to-device copies (comm's local backend), between processes
  /// NCCL's (the nccl backend, one GPU per process), and the call still
  /// returns once its outputs are complete. Needs the GPU's executor backend registered
  /// (attention::cuda::register_exec_device, done by train::device_attention).
  core::Device device;
};

/// Per-rank timings of one pass, for stats.json and the trainer's metrics.
struct AttentionStats {
  double compute_s = 0;  ///< kernels (including merges and gradient adds)
  double wait_s = 0;     ///< blocked in waits for transfers
  int steps = 0;
  int pairs = 0;  ///< chunk pairs computed
};

/// What the backward needs from the forward. q, k, v are borrowed (the caller keeps them alive
/// and unchanged until the backward); o and lse are owned.
struct AttentionSaved {
  core::View<const float> q, k, v;
  core::Tensor<float> o;    ///< [L, Hq, D]
  core::Tensor<float> lse;  ///< [L, Hq]
};

struct AttentionGrads {
  core::Tensor<float> dq, dk, dv;
};

/// Throws core::Error naming the dtype unless `precision` is f32 or bf16
/// (AttentionSpec::precision).
void validate_precision(core::DType precision);

/// Checks the precision, shapes and the algorithm/layout/mask/topology combination; throws
/// core::Error naming the values (e.g. a head count that does not divide, a world that does not
/// match the layout).
void validate(const AttentionSpec& spec, const Layout& layout, const comm::Topology& topo,
              int64_t hq, int64_t hkv, int64_t d);
/// The part of validate() that needs neither tensors nor the mask: the precision, the threads,
/// and whether the algorithm and the layout fit the group (its world and, for double rings, its
/// nodes). For callers that know the group long before the first call (the Python package's
/// ContextParallel refuses at construction what no tensor could make work).
void validate_group(const AttentionSpec& spec, const Layout& layout, const comm::Topology& topo);

/// Collective over `group`: builds (and caches) this rank's schedules of both passes and the
/// sub-groups their collective steps use: what the first forward would do otherwise. Optional;
/// byte counters reset after it see only the passes themselves.
void prepare(const AttentionSpec& spec, const Layout& layout, comm::Group& group);

AttentionSaved distributed_attention_forward(core::View<const float> q, core::View<const float> k,
                                             core::View<const float> v, const AttentionSpec& spec,
                                             const Layout& layout, comm::Group& group,
                                             AttentionStats* stats = nullptr);

AttentionGrads distributed_attention_backward(core::View<const float> dout,
                                              const AttentionSaved& saved,
                                              const AttentionSpec& spec, const Layout& layout,
                                              comm::Group& group, AttentionStats* stats = nullptr);

/// The two passes into caller-owned memory, for callers whose framework allocates the outputs
/// (the Python package hands in its tensors: design.md §11). Same schedules, kernels and bits as
/// the allocating forms above, which call these.
///   forward:  o [L, Hq, D] and lse [L, Hq] are overwritten whole.
///   backward: reads q, k, v and the forward's o, lse (unchanged since the forward); dq [L, Hq,
///             D], dk and dv [L, Hkv, D] are overwritten whole. `dlse` [L, Hq], when given, is the
///             loss's gradient with respect to lse (for losses that use the lse as well as o):
///             it enters as D - dlse (attention/local.hpp); host memory, CPU executor only.
/// Every output view is fp32, contiguous, in spec.device's memory, and overlaps no input and no
/// other output. Throws core::Error naming the tensor and the shapes for a wrong shape or a
/// non-contiguous output (before any communication, so every rank throws alike when all hold the
/// same shapes).
void distributed_attention_forward_into(core::View<const float> q, core::View<const float> k,
                                        core::View<const float> v, const AttentionSpec& spec,
                                        const Layout& layout, comm::Group& group,
                                        core::View<float> o, core::View<float> lse,
                                        AttentionStats* stats = nullptr);
void distributed_attention_backward_into(core::View<const float> dout, core::View<const float> q,
                                         core::View<const float> k, core::View<const float> v,
                                         core::View<const float> o, core::View<const float> lse,
                                         const AttentionSpec& spec, const Layout& layout,
                                         comm::Group& group, core::View<float> dq,
                                         core::View<float> dk, core::View<float> dv,
                                         AttentionStats* stats = nullptr,
                                         core::View<const float> dlse = {});

/// The two passes on bf16 inputs (q, k, v, dO and the saved o; lse, dlse and every output stay
/// fp32, as the accumulation does), for callers that hold bf16 activations (the Python package's
/// bf16 tensors). With spec.precision bf16 the kernels and the transfers read q, k, v and dO where
/// they lie: no widened copy and no rounded one, where the fp32 forms round their inputs once;
/// the bits are those of the fp32 forms given the same values widened. The backward widens o once
/// (D = rowsum(dO * O) is fp32). With precision f32 the inputs are widened (exact) and the pass is
/// the fp32 one. Host memory, CPU executor only: a spec.device other than the CPU is refused.
void distributed_attention_forward_into(core::View<const core::bf16> q,
                                        core::View<const core::bf16> k,
                                        core::View<const core::bf16> v, const AttentionSpec& spec,
                                        const Layout& layout, comm::Group& group,
                                        core::View<float> o, core::View<float> lse,
                                        AttentionStats* stats = nullptr);
void distributed_attention_backward_into(
    core::View<const core::bf16> dout, core::View<const core::bf16> q,
    core::View<const core::bf16> k, core::View<const core::bf16> v, core::View<const core::bf16> o,
    core::View<const float> lse, const AttentionSpec& spec, const Layout& layout,
    comm::Group& group, core::View<float> dq, core::View<float> dk, core::View<float> dv,
    AttentionStats* stats = nullptr, core::View<const float> dlse = {});

}  // namespace longseq::attention
