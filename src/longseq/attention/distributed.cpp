// The one executor: runs any RankSchedule (design.md §5). Per step s it (1) waits for the requests
// whose wait_step is s, (2) adds gradient partials that arrived, (3) posts every transfer of step
// s together, (4) computes the chunk pairs of step s. Transfers posted at s are in flight while
// step s computes: that is the overlap (double or triple buffering comes from the schedule's
// slot count, not from the executor).
#include "longseq/attention/distributed.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "longseq/attention/block_ops.hpp"
#include "longseq/attention/hybrid.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/timer.hpp"

namespace longseq::attention {

using core::Tensor;
using core::View;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Tags of the two passes differ so a late forward message can never match a backward receive, and
// both sit above the hybrid algorithms' tags (1000 + a few per rank, startrail.cpp, ulysses.cpp).
// Tags are origin*2 + part, so worlds up to 2^16 fit below comm::kMaxTag = 2^19.
constexpr int kForwardTagBase = 1 << 17;
constexpr int kBackwardTagBase = 1 << 18;

struct Dims {
  int64_t l, hq, hkv, d;
};

// Token metadata of every rank (positions, document ids), shared by all steps.
struct TokenTable {
  std::vector<std::vector<int64_t>> pos;
  std::vector<std::vector<int32_t>> doc;
  TokenTable(const Layout& layout, const MaskSpec& mask) {
    pos.resize(layout.world());
    doc.resize(layout.world());
    for (int r = 0; r < layout.world(); ++r) {
      pos[r] = layout.positions(r);
      if (!mask.doc_ids.empty()) {
        doc[r].resize(pos[r].size());
        for (size_t i = 0; i < pos[r].size(); ++i)
          doc[r][i] = pos[r][i] >= 0 ? mask.doc_ids[pos[r][i]] : -1;
      }
    }
  }
  kernels::Tokens tokens(int rank, int64_t begin) const {
    return {pos[rank].data() + begin, doc[rank].empty() ? nullptr : doc[rank].data() + begin};
  }
};

template <class T>
const T* contiguous_or_copy(View<const T> v, std::vector<T>& keep, const char* what) {
  if (v.is_contiguous()) return v.data();
  LONGSEQ_CHECK_MSG(v.rank() == 3, what, " must be rank 3");
  keep.resize(static_cast<size_t>(v.numel()));
  size_t i = 0;
  for (int64_t a = 0; a < v.dim(0); ++a)
    for (int64_t b = 0; b < v.dim(1); ++b)
      for (int64_t c = 0; c < v.dim(2); ++c) keep[i++] = v(a, b, c);
  return keep.data();
}

// q, k, v or dO as the kernels read them: contiguous, in the compute type T. f32: the caller's
// data itself when contiguous, else a copy in `keep`. bf16: rounded to nearest even into `keep`,
// once per pass (the only rounding the inputs ever see; everything downstream is exact copies).
template <class T>
const T* compute_input(View<const float> x, std::vector<T>& keep, const char* what) {
  if constexpr (std::is_same_v<T, float>) {
    return contiguous_or_copy(x, keep, what);
  } else {
    static_assert(std::is_same_v<T, core::bf16>);
    std::vector<float> flat;
    const float* p = contiguous_or_copy(x, flat, what);
    keep.resize(static_cast<size_t>(x.numel()));
    core::f32_to_bf16(p, keep.data(), keep.size());
    return keep.data();
  }
}

// A data bundle laid out as bytes: two parts of T (forward and ring backward: K | V; burst
// backward: Q | dO), then for burst two fp32 parts D | LSE. D and LSE stay fp32 because they are
// softmax statistics every score is measured against: a bf16 LSE would put a 2^-8 relative
// error into every exp(s - lse). The fp32 part starts at a 4-byte aligned offset.
struct BundleLayout {
  size_t second = 0;  // byte offset of the second T part (the first is at 0)
  size_t dvec = 0, lse = 0;
  size_t bytes = 0;

  template <class T>
  static BundleLayout of(int64_t part_elems, int64_t row_elems) {
    BundleLayout b;
    b.second = static_cast<size_t>(part_elems) * sizeof(T);
    const size_t t_bytes = 2 * b.second;
    b.dvec = (t_bytes + alignof(float) - 1) / alignof(float) * alignof(float);
    b.lse = b.dvec + static_cast<size_t>(row_elems) * sizeof(float);
    b.bytes = row_elems > 0 ? b.lse + static_cast<size_t>(row_elems) * sizeof(float) : t_bytes;
    return b;
  }
};

// One transfer slot of a data bundle: 64-byte aligned raw bytes (core::Buffer) read through
// typed part pointers.
class DataSlot {
 public:
  explicit DataSlot(size_t bytes) : buf_(bytes) {}
  std::byte* bytes() { return buf_.data(); }
  template <class U>
  U* at(size_t offset) {
    return reinterpret_cast<U*>(buf_.data() + offset);
  }

 private:
  core::Buffer<std::byte> buf_;
};

// Posts and waits the schedule's transfers; times the waits.
class Transport {
 public:
  Transport(comm::Group& g, int tag_base, AttentionStats* st)
      : g_(g), tag_base_(tag_base), st_(st) {}

  void post(const Xfer& x, void* slot_ptr, size_t bytes) {
    comm::Request r = x.send ? g_.isend(x.peer, slot_ptr, bytes, tag_base_ + x.tag())
                             : g_.irecv(x.peer, slot_ptr, bytes, tag_base_ + x.tag());
    pending_.push_back({x.wait_step, std::move(r)});
  }
  void wait_step(int step) {
    core::ScopedTimer t(st_ ? &st_->wait_s : &scratch_);
    for (auto& p : pending_)
      if (p.first == step) p.second.wait();
    std::erase_if(pending_, [&](const auto& p) { return p.first == step; });
  }
  void wait_all() {
    core::ScopedTimer t(st_ ? &st_->wait_s : &scratch_);
    for (auto& p : pending_) p.second.wait();
    pending_.clear();
  }

 private:
  comm::Group& g_;
  int tag_base_;
  AttentionStats* st_;
  double scratch_ = 0;
  std::vector<std::pair<int, comm::Request>> pending_;
};

// Checks that the schedule never waits on something it has not posted (a bug, not user input).
void check_schedule(const RankSchedule& rs) {
  for (const Xfer& x : rs.xfers)
    LONGSEQ_CHECK(x.post_step < x.wait_step && x.wait_step < rs.num_steps);
}

}  // namespace

void validate_precision(core::DType precision) {
  core::require(precision == core::DType::f32 || precision == core::DType::bf16, "attention",
                "precision ", core::dtype_name(precision), " is not supported (f32 or bf16)");
}

void validate(const AttentionSpec& spec, const Layout& layout, const comm::Topology& group_topo,
              int64_t hq, int64_t hkv, int64_t d) {
  using core::require;
  validate_precision(spec.precision);
  const int world = group_topo.size();
  spec.algo.validate(world, hq, hkv);
  require(spec.mask != nullptr, "attention", "no mask given");
  require(hq >= 1 && hkv >= 1 && d >= 1, "attention", "heads and head dim must be >= 1: Hq ", hq,
          ", Hkv ", hkv, ", D ", d);
  require(hq % hkv == 0, "attention", "query heads ", hq, " must be a multiple of key/value heads ",
          hkv);
  require(world <= (1 << 16), "attention", "world ", world,
          " exceeds the 65536 ranks the "
          "message tags can address");
  require(layout.world() == world, "attention", "layout is for world ", layout.world(),
          ", the group has ", world, " ranks");
  require(spec.threads >= 1, "attention", "threads must be >= 1, got ", spec.threads);
  spec.mask->validate(layout.global_len());
  if (!spec.mask->block_mask.empty() && layout.balance() == Balance::block_striped)
    require(spec.mask->block_size % layout.world() == 0, "attention",
            "block-striped needs block size ", spec.mask->block_size, " to be a multiple of world ",
            layout.world());
  if (spec.algo.ring_family() && spec.algo.route == Route::double_ring && world > 1) {
    const comm::Topology topo = schedule_topology(spec.algo, group_topo);
    require(topo.num_nodes() > 1 && topo.num_nodes() < world, "attention", "--algo ",
            spec.algo.name(), " needs several inner rings of several ranks each; got ",
            topo.num_nodes(), " inner ring(s) for world ", world,
            " (use ring or burst, set --nodes, or double-ring:I)");
  }
}

namespace {

// The ring-family forward with q, k, v in the compute type T (float or bf16) in the kernels and
// in the bundles.
template <class T>
AttentionSaved ring_forward(View<const float> q, View<const float> k, View<const float> v,
                            const AttentionSpec& spec, const Layout& layout, comm::Group& group,
                            AttentionStats* stats) {
  const comm::Topology topo = schedule_topology(spec.algo, group.topology());
  const Dims dm{layout.local_len(), q.dim(1), k.dim(1), q.dim(2)};
  core::require(q.rank() == 3 && k.rank() == 3 && v.rank() == 3, "attention",
                "q, k, v must be [L, H, D]");
  core::require(q.dim(0) == dm.l && k.dim(0) == dm.l && v.dim(0) == dm.l, "attention", "rank ",
                group.rank(), " holds ", q.dim(0), "/", k.dim(0), "/", v.dim(0),
                " q/k/v tokens, the layout gives ", dm.l);
  core::require(k.shape() == v.shape() && k.dim(2) == dm.d, "attention", "k ", k.shape().str(),
                " and v ", v.shape().str(), " must match and share D with q ", q.shape().str());
  validate(spec, layout, group.topology(), dm.hq, dm.hkv, dm.d);
  const double scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(static_cast<double>(dm.d));
  const MaskSpec& mask = *spec.mask;
  const kernels::Mask kmask = mask.kernel_mask();
  const int me = group.rank();

  const PairTable pairs(layout, mask);
  const RankSchedule rs = make_schedule(me, topo, layout, pairs, spec.algo, Pass::forward);
  check_schedule(rs);
  const TokenTable tokens(layout, mask);

  std::vector<T> qkeep, kkeep, vkeep;
  const T* qp = compute_input(q, qkeep, "q");
  const T* kp = compute_input(k, kkeep, "k");
  const T* vp = compute_input(v, vkeep, "v");

  // Data part of a bundle: [K | V], each [L, Hkv, D] in T.
  const int64_t kv_elems = dm.l * dm.hkv * dm.d;
  const BundleLayout bl = BundleLayout::of<T>(kv_elems, 0);
  std::vector<DataSlot> slots;
  for (int i = 0; i < rs.data_slots; ++i) slots.emplace_back(bl.bytes);
  if (rs.own_slot >= 0) {
    std::memcpy(slots[rs.own_slot].at<T>(0), kp, bl.second);
    std::memcpy(slots[rs.own_slot].at<T>(bl.second), vp, bl.second);
  }

  AttentionSaved saved;
  saved.q = q;
  saved.k = k;
  saved.v = v;
  saved.o = Tensor<float>(core::Shape{dm.l, dm.hq, dm.d});
  saved.lse = Tensor<float>(core::Shape{dm.l, dm.hq});
  std::fill(saved.lse.begin(), saved.lse.end(), kNegInf);

  BlockOps ops(dm.hq, dm.hkv, dm.d, scale, spec.threads);
  Transport tr(group, kForwardTagBase, stats);
  const int64_t q_rows = spec.query_rows < 0 ? dm.l : std::min(spec.query_rows, dm.l);
  const auto& my_chunks = layout.chunks(me);
  size_t wi = 0;
  double scratch_s = 0;
  for (int s = 0; s < rs.num_steps; ++s) {
    tr.wait_step(s);
    for (const Xfer& x : rs.xfers)
      if (x.post_step == s) tr.post(x, slots[x.slot].bytes(), bl.bytes);
    if (wi < rs.work.size() && rs.work[wi].step == s) {
      core::ScopedTimer t(stats ? &stats->compute_s : &scratch_s);
      const Work& w = rs.work[wi++];
      const T* kb = slots[w.slot].at<T>(0);
      const T* vb = slots[w.slot].at<T>(bl.second);
      const auto& kv_chunks = layout.chunks(w.origin);
      for (const SubPair& p : w.pairs) {
        const Chunk& qc = my_chunks[p.qc];
        const Chunk& kc = kv_chunks[p.kc];
        const int64_t q_len = std::clamp<int64_t>(q_rows - qc.local_begin, 0, qc.len);
        if (q_len == 0) continue;  // rows past spec.query_rows are not asked for
        ops.forward_merge(qp + qc.local_begin * dm.hq * dm.d, tokens.tokens(me, qc.local_begin),
                          q_len, kb + kc.local_begin * dm.hkv * dm.d,
                          vb + kc.local_begin * dm.hkv * dm.d,
                          tokens.tokens(w.origin, kc.local_begin), kc.len, kmask,
                          saved.o.data() + qc.local_begin * dm.hq * dm.d,
                          saved.lse.data() + qc.local_begin * dm.hq);
        if (stats) ++stats->pairs;
      }
    }
  }
  tr.wait_all();
  if (stats) stats->steps += rs.num_steps;
  return saved;
}

// The ring-family backward with q, k, v, dO in the compute type T in the kernels and the data
// bundles; D, LSE and every gradient (the gradient bundles too) are fp32.
template <class T>
AttentionGrads ring_backward(View<const float> dout, const AttentionSaved& saved,
                             const AttentionSpec& spec, const Layout& layout, comm::Group& group,
                             AttentionStats* stats) {
  const comm::Topology topo = schedule_topology(spec.algo, group.topology());
  const Dims dm{layout.local_len(), saved.q.dim(1), saved.k.dim(1), saved.q.dim(2)};
  core::require(dout.shape() == saved.q.shape(), "attention", "do ", dout.shape().str(),
                " must match q ", saved.q.shape().str());
  validate(spec, layout, group.topology(), dm.hq, dm.hkv, dm.d);
  const double scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(static_cast<double>(dm.d));
  const MaskSpec& mask = *spec.mask;
  const kernels::Mask kmask = mask.kernel_mask();
  const int me = group.rank();
  const bool bq = spec.algo.backward == Backward::q;

  const PairTable pairs(layout, mask);
  const RankSchedule rs = make_schedule(me, topo, layout, pairs, spec.algo, Pass::backward);
  check_schedule(rs);
  const TokenTable tokens(layout, mask);

  // The saved inputs are the caller's fp32 views; rounding them again gives the forward's values.
  std::vector<T> qkeep, kkeep, vkeep, dkeep;
  const T* qp = compute_input(saved.q, qkeep, "q");
  const T* kp = compute_input(saved.k, kkeep, "k");
  const T* vp = compute_input(saved.v, vkeep, "v");
  const T* dop = compute_input(dout, dkeep, "do");
  BlockOps ops(dm.hq, dm.hkv, dm.d, scale, spec.threads);

  const int64_t q_elems = dm.l * dm.hq * dm.d, row_elems = dm.l * dm.hq,
                kv_elems = dm.l * dm.hkv * dm.d;
  // D = rowsum(dO * O): computed once at home; burst ships it instead of O.
  std::vector<float> dvec(static_cast<size_t>(row_elems));
  ops.compute_d(saved.o.data(), dop, dm.l, dvec.data());

  // Data part: burst [Q | dO | D | LSE] (Q, dO in T), ring [K | V] (in T). Gradient part, fp32
  // so partial gradients accumulate in fp32 along the ring: burst dQ, ring [dK | dV].
  const BundleLayout bl =
      bq ? BundleLayout::of<T>(q_elems, row_elems) : BundleLayout::of<T>(kv_elems, 0);
  const int64_t grad_elems = bq ? q_elems : 2 * kv_elems;
  std::vector<DataSlot> dslots;
  std::vector<core::Buffer<float>> gslots;
  for (int i = 0; i < rs.data_slots; ++i) dslots.emplace_back(bl.bytes);
  for (int i = 0; i < rs.grad_slots; ++i) gslots.emplace_back(grad_elems);
  if (rs.own_slot >= 0) {
    DataSlot& o = dslots[rs.own_slot];
    std::memcpy(o.at<T>(0), bq ? qp : kp, bl.second);
    std::memcpy(o.at<T>(bl.second), bq ? dop : vp, bl.second);
    if (bq) {
      std::memcpy(o.at<float>(bl.dvec), dvec.data(), row_elems * sizeof(float));
      std::memcpy(o.at<float>(bl.lse), saved.lse.data(), row_elems * sizeof(float));
    }
  }

  AttentionGrads g;
  g.dq = Tensor<float>(core::Shape{dm.l, dm.hq, dm.d});
  g.dk = Tensor<float>(core::Shape{dm.l, dm.hkv, dm.d});
  g.dv = Tensor<float>(core::Shape{dm.l, dm.hkv, dm.d});
  // Home gradient of our own bundle, in the gradient part's packing.
  core::Buffer<float> home_kv(bq ? 0 : 2 * kv_elems);
  float* home = bq ? g.dq.data() : home_kv.data();

  Transport tr(group, kBackwardTagBase, stats);
  const auto& my_chunks = layout.chunks(me);
  size_t wi = 0, ai = 0;
  double scratch_s = 0;
  for (int s = 0; s < rs.num_steps; ++s) {
    tr.wait_step(s);
    {
      core::ScopedTimer t(stats ? &stats->compute_s : &scratch_s);
      for (; ai < rs.accumulates.size() && rs.accumulates[ai].step == s; ++ai) {
        const Accumulate& a = rs.accumulates[ai];
        float* into = a.into < 0 ? home : gslots[a.into].data();
        const float* from = gslots[a.from].data();
        for (int64_t i = 0; i < grad_elems; ++i) into[i] += from[i];
      }
    }
    for (const Xfer& x : rs.xfers)
      if (x.post_step == s) {
        if (x.part == Part::data)
          tr.post(x, dslots[x.slot].bytes(), bl.bytes);
        else
          tr.post(x, gslots[x.slot].data(), grad_elems * sizeof(float));
      }
    if (wi < rs.work.size() && rs.work[wi].step == s) {
      core::ScopedTimer t(stats ? &stats->compute_s : &scratch_s);
      const Work& w = rs.work[wi++];
      float* gout = w.grad_slot < 0 ? home : gslots[w.grad_slot].data();
      if (w.grad_slot >= 0) std::fill(gout, gout + grad_elems, 0.0f);
      DataSlot& b = dslots[w.slot];
      const T* b0 = b.at<T>(0);
      const T* b1 = b.at<T>(bl.second);
      const auto& other_chunks = layout.chunks(w.origin);
      for (const SubPair& p : w.pairs) {
        if (bq) {
          // Queries (and dO, D, LSE) from the bundle, keys local; dQ into the bundle's gradient.
          const Chunk& qc = other_chunks[p.qc];
          const Chunk& kc = my_chunks[p.kc];
          const int64_t qo = qc.local_begin * dm.hq * dm.d, ro = qc.local_begin * dm.hq;
          const int64_t ko = kc.local_begin * dm.hkv * dm.d;
          ops.backward(b0 + qo, kp + ko, vp + ko, b1 + qo, b.at<float>(bl.lse) + ro,
                       b.at<float>(bl.dvec) + ro, tokens.tokens(w.origin, qc.local_begin), qc.len,
                       tokens.tokens(me, kc.local_begin), kc.len, kmask, gout + qo,
                       g.dk.data() + ko, g.dv.data() + ko);
        } else {
          // Queries local, keys from the bundle; dK, dV into the bundle's gradient.
          const Chunk& qc = my_chunks[p.qc];
          const Chunk& kc = other_chunks[p.kc];
          const int64_t qo = qc.local_begin * dm.hq * dm.d, ro = qc.local_begin * dm.hq;
          const int64_t ko = kc.local_begin * dm.hkv * dm.d;
          ops.backward(qp + qo, b0 + ko, b1 + ko, dop + qo, saved.lse.data() + ro, dvec.data() + ro,
                       tokens.tokens(me, qc.local_begin), qc.len,
                       tokens.tokens(w.origin, kc.local_begin), kc.len, kmask, g.dq.data() + qo,
                       gout + ko, gout + kv_elems + ko);
        }
        if (stats) ++stats->pairs;
      }
    }
  }
  tr.wait_all();
  if (!bq) {
    std::memcpy(g.dk.data(), home_kv.data(), kv_elems * sizeof(float));
    std::memcpy(g.dv.data(), home_kv.data() + kv_elems, kv_elems * sizeof(float));
  }
  if (stats) stats->steps += rs.num_steps;
  return g;
}

}  // namespace

AttentionSaved distributed_attention_forward(View<const float> q, View<const float> k,
                                             View<const float> v, const AttentionSpec& spec,
                                             const Layout& layout, comm::Group& group,
                                             AttentionStats* stats) {
  if (!spec.algo.ring_family())
    return hybrid_forward(spec.algo, q, k, v, spec, layout, group, stats);
  validate_precision(spec.precision);
  if (spec.precision == core::DType::bf16)
    return ring_forward<core::bf16>(q, k, v, spec, layout, group, stats);
  return ring_forward<float>(q, k, v, spec, layout, group, stats);
}

AttentionGrads distributed_attention_backward(View<const float> dout, const AttentionSaved& saved,
                                              const AttentionSpec& spec, const Layout& layout,
                                              comm::Group& group, AttentionStats* stats) {
  if (!spec.algo.ring_family())
    return hybrid_backward(spec.algo, dout, saved, spec, layout, group, stats);
  validate_precision(spec.precision);
  if (spec.precision == core::DType::bf16)
    return ring_backward<core::bf16>(dout, saved, spec, layout, group, stats);
  return ring_backward<float>(dout, saved, spec, layout, group, stats);
}

}  // namespace longseq::attention
