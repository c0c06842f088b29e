#include "longseq/model/attention_op.hpp"

#include "longseq/comm/group.hpp"
#include "longseq/core/error.hpp"

namespace longseq::model {

AttentionAlgo AttentionAlgo::parse(const std::string& s) {
  AttentionAlgo a;
  a.hybrid = attention::HybridAlgo::parse(s);
  if (!a.hybrid) a.flat = attention::Algorithm::parse(s);
  return a;
}

std::string AttentionAlgo::name() const { return hybrid ? hybrid->name() : flat.name(); }

namespace {

class DistributedAttention final : public AttentionOp {
 public:
  DistributedAttention(const AttentionAlgo& algo, std::shared_ptr<const attention::MaskSpec> mask,
                       const attention::Layout& layout, comm::Group& group, int threads,
                       bool need_split)
      : algo_(algo), layout_(layout), group_(group) {
    spec_.algo = algo.flat;
    spec_.mask = std::move(mask);
    spec_.threads = threads;
    if (need_split)
      core::require(spec_.mask->block_mask.empty(), "model",
                    "--checkpoint seq-selective cannot be combined with a block mask (",
                    spec_.mask->describe(), "): its recomputation adds a block mask of its own");
  }

  attention::AttentionSaved forward(core::View<const float> q, core::View<const float> k,
                                    core::View<const float> v) override {
    return run_forward(q, k, v, spec_);
  }

  attention::AttentionSaved forward_before(core::View<const float> q, core::View<const float> k,
                                           core::View<const float> v, int64_t split) override {
    // Two blocks split at `split`: early queries see every key (the user's mask still applies),
    // late queries see nothing, so every chunk pair of a late query chunk classifies as empty and
    // costs neither compute nor transfers.
    const int64_t n = layout_.global_len();
    LONGSEQ_CHECK(split > 0 && split < n);
    if (!split_spec_ || split_ != split) {
      auto m = std::make_shared<attention::MaskSpec>(*spec_.mask);
      m->block_size = split;
      m->num_blocks = (n + split - 1) / split;
      LONGSEQ_CHECK_MSG(m->num_blocks == 2, "split ", split, " of ", n);
      m->block_mask = {1, 1, 0, 0};
      split_spec_ = spec_;
      split_spec_->mask = std::move(m);
      split_ = split;
    }
    return run_forward(q, k, v, *split_spec_);
  }

  attention::AttentionGrads backward(core::View<const float> dout,
                                     const attention::AttentionSaved& saved) override {
    attention::AttentionStats st;
    attention::AttentionGrads g =
        algo_.hybrid ? attention::hybrid_backward(*algo_.hybrid, dout, saved, spec_, layout_, group_, &st)
                     : attention::distributed_attention_backward(dout, saved, spec_, layout_, group_, &st);
    add(st);
    return g;
  }

  const AttentionTimes& times() const override { return times_; }

 private:
  attention::AttentionSaved run_forward(core::View<const float> q, core::View<const float> k,
                                        core::View<const float> v,
                                        const attention::AttentionSpec& spec) {
    attention::AttentionStats st;
    attention::AttentionSaved s =
        algo_.hybrid ? attention::hybrid_forward(*algo_.hybrid, q, k, v, spec, layout_, group_, &st)
                     : attention::distributed_attention_forward(q, k, v, spec, layout_, group_, &st);
    add(st);
    return s;
  }
  void add(const attention::AttentionStats& st) {
    times_.compute_s += st.compute_s;
    times_.wait_s += st.wait_s;
  }

  AttentionAlgo algo_;
  attention::Layout layout_;
  comm::Group& group_;
  attention::AttentionSpec spec_;
  std::optional<attention::AttentionSpec> split_spec_;
  int64_t split_ = -1;
  AttentionTimes times_;
};

}  // namespace

std::unique_ptr<AttentionOp> make_distributed_attention(
    const AttentionAlgo& algo, std::shared_ptr<const attention::MaskSpec> mask,
    const attention::Layout& layout, comm::Group& group, int threads, bool need_split) {
  return std::make_unique<DistributedAttention>(algo, std::move(mask), layout, group, threads,
                                                need_split);
}

}  // namespace longseq::model
