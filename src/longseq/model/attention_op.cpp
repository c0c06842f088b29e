#include "longseq/model/attention_op.hpp"

#include <algorithm>

#include "longseq/comm/group.hpp"
#include "longseq/core/error.hpp"

namespace longseq::model {

namespace {

class DistributedAttention final : public AttentionOp {
 public:
  DistributedAttention(const attention::Algorithm& algo,
                       std::shared_ptr<const attention::MaskSpec> mask,
                       const attention::Layout& layout, comm::Group& group, int threads,
                       core::DType precision, core::Device device)
      : layout_(layout), group_(group) {
    spec_.device = device;
    spec_.algo = algo;
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
        attention::distributed_attention_backward(dout, saved, spec_, layout_, group_, &st);
    add(st);
    return g;
  }

  const AttentionTimes& times() const override { return times_; }

  void set_mask(std::shared_ptr<const attention::MaskSpec> mask) override {
    LONGSEQ_CHECK(mask != nullptr);
    spec_.mask = std::move(mask);
  }

 private:
  attention::AttentionSaved run_forward(core::View<const float> q, core::View<const float> k,
                                        core::View<const float> v,
                                        const attention::AttentionSpec& spec) {
    attention::AttentionStats st;
    attention::AttentionSaved s =
        attention::distributed_attention_forward(q, k, v, spec, layout_, group_, &st);
    add(st);
    return s;
  }
  void add(const attention::AttentionStats& st) {
    times_.compute_s += st.compute_s;
    times_.wait_s += st.wait_s;
  }

  attention::Layout layout_;
  comm::Group& group_;
  attention::AttentionSpec spec_;
  AttentionTimes times_;
};

}  // namespace

std::unique_ptr<AttentionOp> make_distributed_attention(
    const attention::Algorithm& algo, std::shared_ptr<const attention::MaskSpec> mask,
    const attention::Layout& layout, comm::Group& group, int threads, core::DType precision,
    core::Device device) {
  return std::make_unique<DistributedAttention>(algo, std::move(mask), layout, group, threads,
                                                precision, device);
}

TrainMask TrainMask::parse(const std::string& text, int64_t seq) {
  TrainMask t;
  std::string rest;  // the terms attention::MaskSpec::parse takes
  size_t start = 0;
  while (true) {
    const size_t i = text.find(',', start);
    const std::string term =
        text.substr(start, i == std::string::npos ? std::string::npos : i - start);
    if (term == "document") {
      core::require(!t.document, "train", "--mask '", text, "': document given twice");
      t.document = true;
    } else if (term == "full") {
      core::fail("train", "--mask '", text,
                 "': full is not a language model's mask (causal, window:W, document, "
                 "document:FILE or blocks:FILE:B; always causal)");
    } else if (term.empty()) {
      core::fail("train", "--mask '", text, "': empty term");
    } else {
      rest += (rest.empty() ? "" : ",") + term;
    }
    if (i == std::string::npos) break;
    start = i + 1;
  }
  attention::MaskSpec m;
  try {
    m = attention::MaskSpec::parse(rest.empty() ? "causal" : rest, /*causal=*/true, seq);
  } catch (const core::Error& e) {
    core::fail("train", "--mask '", text, "': ", e.what());
  }
  core::require(!(t.document && !m.doc_ids.empty()), "train", "--mask '", text,
                "': document (ids from the data) and document:FILE exclude each other");
  t.text = text;
  t.base = std::make_shared<const attention::MaskSpec>(std::move(m));
  return t;
}

std::shared_ptr<const attention::MaskSpec> TrainMask::with_documents(
    std::vector<int32_t> docs) const {
  LONGSEQ_CHECK(base != nullptr);
  if (docs.empty()) return base;
  auto m = std::make_shared<attention::MaskSpec>(*base);
  m->doc_ids = std::move(docs);
  return m;
}

double visible_pairs(const attention::MaskSpec& m, int64_t n) {
  return static_cast<double>(attention::count_visible(m, n));
}

}  // namespace longseq::model
