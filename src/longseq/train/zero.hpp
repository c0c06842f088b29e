#pragma once
// ZeRO-3 over the data x context group (design.md §6): every rank owns 1/R of every unit's
// parameters, gradients and AdamW moments; a unit's full parameters exist only between
// acquire() and release(), its full gradient only between acquire_grad() and release_grad().
//
// Legend: R ranks in the group, S_u floats of unit u (config.hpp), s_u = ceil(S_u / R) the shard
// size; rank r owns floats [r s_u, (r+1) s_u) of the unit padded to R s_u (the padding tail is
// zero and stays zero: its gradient is zero and AdamW keeps zeros at zero).
//
// Memory: one arena holds, for every unit, the parameter shard, the gradient shard and the two
// AdamW moment shards (4 * sum_u s_u floats, contiguous per kind), so sharding is slicing and
// checkpointing is a walk over units. Gathered units are separate buffers freed on release.
//
// Communication: acquire = all_gather of s_u floats; release_grad = reduce-scatter of R s_u floats
// (sum) added into the gradient shard; their time is counted as comm wait. release_grad posts its
// reduce-scatter (Group::ireduce_scatter, the ring of reduce_scatter) and returns, so the
// transfer overlaps the backward of the blocks that follow; the posted reduce-scatters complete,
// and their sums are added into the shards, when more than kPendingGrads are in flight (the
// oldest first: a bounded number of full-size gradient buffers live at once) or when the gradient
// shards are read (grads(), grad_shard(), finish_grads(): the optimizer step, the norm,
// checkpoints). prefetch(u) posts unit u's gather (Group::iall_gather) and returns; acquire(u)
// then only waits for it, so the gather overlaps the compute between the two calls (under MPI the
// progress thread moves the bytes meanwhile; the local backend copies when a rank tests or waits).
// Every call into this object first test()s what is in flight, which starts the later ring steps
// of R > 2 ranks. The values are the blocking collectives', bit for bit.
//
// Mixed precision (set_gather_dtype(bf16)): the shards stay fp32 (the master weights AdamW
// updates); acquire() rounds this rank's shard to bf16 and all-gathers bf16, half the bytes, and
// hands out the bf16 values widened to fp32 (exact), so the model computes with bf16 weights.
// Gradients are reduce-scattered and accumulated in fp32.
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "longseq/comm/group.hpp"
#include "longseq/core/arena.hpp"
#include "longseq/model/config.hpp"
#include "longseq/model/transformer.hpp"

namespace longseq::train {

/// Weight decay of unit `unit`'s elements: 1 where the element belongs to a matrix (a tensor of
/// rank 2 or more), 0 for norms; `size` >= the unit's size (the rest, padding, 0).
std::vector<uint8_t> unit_decay_mask(const model::ParamLayout& layout, int unit, int64_t size);

class ShardedState final : public model::ParamSource {
 public:
  /// Shards of every unit for this rank of `group`; parameters initialised by
  /// model::init_unit(seed) (identical whatever R is), gradients and moments zero.
  ShardedState(const model::ParamLayout& layout, comm::Group group, uint64_t seed);

  const model::ParamLayout& layout() const { return layout_; }
  int64_t shard_size(int unit) const { return shard_[unit]; }
  /// This rank's slices (shard_size(unit) floats each).
  float* param_shard(int unit) { return param_ + offset_[unit]; }
  float* grad_shard(int unit) {
    finish_grads();
    return grad_ + offset_[unit];
  }
  float* m_shard(int unit) { return m_ + offset_[unit]; }
  float* v_shard(int unit) { return v_ + offset_[unit]; }
  /// All of a kind, contiguous (total_shard() floats): for the optimizer and norms.
  float* params() { return param_; }
  float* grads() {
    finish_grads();
    return grad_;
  }
  float* exp_avg() { return m_; }
  float* exp_avg_sq() { return v_; }
  int64_t total_shard() const { return total_; }
  /// 1 where this rank's shard element is a matrix weight (weight decay applies), 0 for norms
  /// and padding.
  const std::vector<uint8_t>& decay_mask() const { return decay_; }
  /// First element (within the padded unit) that this rank owns.
  int64_t shard_begin(int unit) const { return shard_[unit] * group_.rank(); }

  /// Zeroes the gradient shards and drops any prefetch not acquired (call once per step, before
  /// the forward: its parameters would predate the optimizer step).
  void zero_grads();
  /// Completes every reduce-scatter release_grad posted (their sums land in the gradient shards).
  /// grads() and grad_shard() call it first. Collective in effect: every rank posted the same.
  void finish_grads();
  /// Reduce-scatters posted by release_grad that may be in flight at once.
  static constexpr size_t kPendingGrads = 2;

  /// f32 (default) or bf16: the precision acquire() gathers parameters in. Other dtypes are a
  /// caller bug (LONGSEQ_CHECK).
  void set_gather_dtype(core::DType dt);
  /// Bytes this rank has sent in acquire() all-gathers since construction.
  int64_t gathered_bytes_sent() const { return gather_sent_; }
  /// acquire() calls served by an earlier prefetch().
  int64_t prefetch_hits() const { return prefetch_hits_; }

  // model::ParamSource
  const float* acquire(int unit) override;
  void prefetch(int unit) override;
  void release(int unit) override;
  float* acquire_grad(int unit) override;
  void release_grad(int unit) override;

  /// The full unit (padded size R s_u) of `which` (0 params, 1 exp_avg, 2 exp_avg_sq) gathered on
  /// every rank: for checkpoints. Collective.
  std::vector<float> gather_full(int unit, int which);
  /// Sets this rank's shard of `which` from a full unit (S_u floats or more).
  void load_full(int unit, int which, const float* full);

  /// Seconds spent in collectives since construction.
  double comm_seconds() const { return comm_s_; }
  /// Bytes of the shard arena.
  size_t arena_bytes() const { return arena_.capacity(); }

 private:
  model::ParamLayout layout_;
  comm::Group group_;
  core::Arena arena_;
  std::vector<int64_t> shard_, offset_;
  int64_t total_ = 0;
  float *param_ = nullptr, *grad_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  std::vector<uint8_t> decay_;
  std::map<int, std::vector<float>> gathered_, grad_full_;
  double comm_s_ = 0;
  core::DType gather_dtype_ = core::DType::f32;
  int64_t gather_sent_ = 0, prefetch_hits_ = 0;
  // A gather in flight: the bytes of the gathered unit (f32 or bf16), this rank's shard as sent
  // (bf16: its rounded copy), the posted all-gather.
  struct Inflight {
    std::vector<unsigned char> all, mine;
    comm::Request request;
  };
  std::map<int, Inflight> inflight_;
  // A reduce-scatter in flight: this rank's full gradient, the reduced shard it yields (s_u
  // floats), the posted reduce-scatter.
  struct PendingGrad {
    int unit = 0;
    std::vector<float> full, sum;
    comm::Request request;
  };
  std::deque<PendingGrad> pending_grads_;
  // Waits for p's reduce-scatter and adds its sum into the unit's gradient shard.
  void complete(PendingGrad& p);
  // test() on every collective in flight: starts their next ring steps.
  void progress();
  // This rank's shard of `unit` as a gather sends it (gather_dtype_: the fp32 values or their
  // bf16 rounding), written to `out`.
  void outgoing(int unit, std::vector<unsigned char>& out) const;
  // Gathered bytes (gather_dtype_) -> fp32 values (exact).
  void widen(const unsigned char* all, float* out, size_t n) const;
};

}  // namespace longseq::train
