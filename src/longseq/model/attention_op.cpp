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
                       core::DType precision)
      : algo_(algo), layout_(layout), group_(group) {
    spec_.algo = algo.flat;
    spec_.mask = std::move(mask);
    spec_.threads = threads;
    spec_.precision = precision;
    attention::validate_precision(precision);
  }

  attention::AttentionSaved forward(core::View<const float> q, core::View<const float> k,
                                    core::View<const float> v) override {
    return run_forward(q, k, v, spec_);
  }

  attention::AttentionSaved forward_prefix(core::View<const float> q, core::View<const float> k,
                                           core::View<const float> v, int64_t rows) override {
    attention::AttentionSpec s = spec_;
    s.query_rows = rows;
    return run_forward(q, k, v, s);
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
  AttentionTimes times_;
};

}  // namespace

std::unique_ptr<AttentionOp> make_distributed_attention(
    const AttentionAlgo& algo, std::shared_ptr<const attention::MaskSpec> mask,
    const attention::Layout& layout, comm::Group& group, int threads, core::DType precision) {
  return std::make_unique<DistributedAttention>(algo, std::move(mask), layout, group, threads,
                                                precision);
}

}  // namespace longseq::model
