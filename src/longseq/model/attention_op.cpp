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
                       core::DType precision)
      : layout_(layout), group_(group) {
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
    const attention::Layout& layout, comm::Group& group, int threads, core::DType precision) {
  return std::make_unique<DistributedAttention>(algo, std::move(mask), layout, group, threads,
                                                precision);
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
  // Row i sees keys [lo, hi]: hi = i (causal) or n - 1, lo = its window's start and its
  // document's start (documents are runs of equal ids: a token's document starts where the run
  // does, and ends where it ends when the mask is not causal).
  const bool docs = !m.doc_ids.empty();
  std::vector<int64_t> doc_end;
  if (docs && !m.causal) {
    doc_end.resize(static_cast<size_t>(n));
    for (int64_t i = n - 1; i >= 0; --i)
      doc_end[i] = (i + 1 < n && m.doc_ids[i + 1] == m.doc_ids[i]) ? doc_end[i + 1] : i;
  }
  double total = 0;
  int64_t doc_start = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (docs && i > 0 && m.doc_ids[i] != m.doc_ids[i - 1]) doc_start = i;
    int64_t lo = docs ? doc_start : 0;
    int64_t hi = m.causal || m.window > 0 ? i : (docs ? doc_end[i] : n - 1);
    if (m.window > 0) lo = std::max(lo, i - m.window + 1);
    if (hi < lo) continue;
    if (m.block_mask.empty()) {
      total += static_cast<double>(hi - lo + 1);
      continue;
    }
    const int64_t qb = i / m.block_size;
    for (int64_t kb = lo / m.block_size; kb <= hi / m.block_size; ++kb) {
      if (!m.block_mask[qb * m.num_blocks + kb]) continue;
      const int64_t a = std::max(lo, kb * m.block_size),
                    b = std::min(hi, (kb + 1) * m.block_size - 1);
      total += static_cast<double>(b - a + 1);
    }
  }
  return total;
}

}  // namespace longseq::model
