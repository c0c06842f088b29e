#include "longseq/attention/subring.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "longseq/comm/group.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/timer.hpp"

namespace longseq::attention::detail {

Pieces::Pieces(std::vector<int> ranks_, const Layout& layout, const MaskSpec& mask)
    : ranks(std::move(ranks_)), l(layout.local_len()) {
  pos.reserve(tokens());
  for (int r : ranks) {
    const std::vector<int64_t> p = layout.positions(r);
    pos.insert(pos.end(), p.begin(), p.end());
  }
  if (!mask.doc_ids.empty()) {
    doc.resize(pos.size());
    for (size_t i = 0; i < pos.size(); ++i) doc[i] = pos[i] >= 0 ? mask.doc_ids[pos[i]] : -1;
  }
}

// ---------------------------------------------------------------------------------------------
// Chunk-pair attention

namespace {

// Calls fn(qrow, qlen, krow, klen) for every non-empty chunk pair of the two token sets, in a
// fixed order (so merges and gradient sums are deterministic); rows index the concatenated sets.
template <class Fn>
void for_each_pair(const Pieces& qp, const Pieces& kp, const Layout& layout, const PairTable& pairs,
                   AttentionStats* stats, Fn&& fn) {
  for (size_t qi = 0; qi < qp.ranks.size(); ++qi) {
    const int qr = qp.ranks[qi];
    const auto& qcs = layout.chunks(qr);
    for (size_t ki = 0; ki < kp.ranks.size(); ++ki) {
      const int kr = kp.ranks[ki];
      if (!pairs.needs(qr, kr)) continue;
      const auto& kcs = layout.chunks(kr);
      for (size_t qc = 0; qc < qcs.size(); ++qc)
        for (size_t kc = 0; kc < kcs.size(); ++kc) {
          if (pairs.kind(qr, static_cast<int>(qc), kr, static_cast<int>(kc)) == PairKind::empty)
            continue;
          fn(static_cast<int64_t>(qi) * qp.l + qcs[qc].local_begin, qcs[qc].len,
             static_cast<int64_t>(ki) * kp.l + kcs[kc].local_begin, kcs[kc].len);
          if (stats) ++stats->pairs;
        }
    }
  }
}

}  // namespace

void Attend::forward(const Pieces& qp, const float* q, const Pieces& kp, const float* k,
                     const float* v, float* o, float* lse) const {
  for_each_pair(qp, kp, *layout, *pairs, stats,
                [&](int64_t qrow, int64_t qlen, int64_t krow, int64_t klen) {
                  ops->forward_merge(q + qrow * hq * d, qp.at(qrow), qlen, k + krow * hkv * d,
                                     v + krow * hkv * d, kp.at(krow), klen, mask, o + qrow * hq * d,
                                     lse + qrow * hq);
                });
}

void Attend::backward(const Pieces& qp, const float* q, const float* dout, const float* lse,
                      const float* dvec, const Pieces& kp, const float* k, const float* v,
                      float* dq, float* dk, float* dv) const {
  for_each_pair(qp, kp, *layout, *pairs, stats,
                [&](int64_t qrow, int64_t qlen, int64_t krow, int64_t klen) {
                  ops->backward(q + qrow * hq * d, k + krow * hkv * d, v + krow * hkv * d,
                                dout + qrow * hq * d, lse + qrow * hq, dvec + qrow * hq,
                                qp.at(qrow), qlen, kp.at(krow), klen, mask, dq + qrow * hq * d,
                                dk + krow * hkv * d, dv + krow * hkv * d);
                });
}

// ---------------------------------------------------------------------------------------------
// Exchange

Exchange::Exchange(comm::Group& group) : group_(group), rank_(group.rank()) {}

Exchange::~Exchange() {
  // Never leave a transfer pointing at freed buffers: complete whatever is still posted (an
  // exception between post and wait would otherwise leave the peer writing into freed memory).
  // A wait that fails here (RankFailed: the world failed, which is usually why we are unwinding)
  // must not escape: a throwing destructor during unwinding is std::terminate, and the error
  // that matters is the one already propagating (run() reports the world's first failure). A
  // failed request is finished with its buffers either way.
  for (auto& w : waits_) {
    try {
      w();
    } catch (...) {
    }
  }
}

void Exchange::send(const float* p, int64_t n, int peer, int tag) {
  if (peer == rank_) {
    LONGSEQ_CHECK_MSG(!self_.count(tag), "two self-sends with tag ", tag);
    self_[tag] = {p, n};
    return;
  }
  comm::Request r = group_.isend(peer, p, static_cast<size_t>(n) * sizeof(float), tag);
  waits_.push_back([r]() mutable { r.wait(); });
}

void Exchange::recv(float* p, int64_t n, int peer, int tag) {
  if (peer == rank_) {
    auto it = self_.find(tag);
    LONGSEQ_CHECK_MSG(it != self_.end(), "self-receive with tag ", tag, " before its send");
    LONGSEQ_CHECK(it->second.second == n);
    if (it->second.first != p)
      std::memcpy(p, it->second.first, static_cast<size_t>(n) * sizeof(float));
    self_.erase(it);
    return;
  }
  comm::Request r = group_.irecv(peer, p, static_cast<size_t>(n) * sizeof(float), tag);
  waits_.push_back([r]() mutable { r.wait(); });
}

void Exchange::wait_all(AttentionStats* stats) {
  const core::Timer t;
  std::vector<std::function<void()>> w;
  w.swap(waits_);
  for (auto& f : w) f();
  LONGSEQ_CHECK_MSG(self_.empty(), "self-send without its receive");
  if (stats) stats->wait_s += t.elapsed();
}

void post_all_gather(Exchange& ex, const std::vector<int>& ranks, int me, const float* in,
                     int64_t n, float* out, int tag) {
  const int c = static_cast<int>(ranks.size());
  for (int m = 0; m < c; ++m)
    if (m != me) ex.send(in, n, ranks[m], tag);
  for (int m = 0; m < c; ++m)
    if (m != me) ex.recv(out + m * n, n, ranks[m], tag);
  if (out + me * n != in) std::memcpy(out + me * n, in, static_cast<size_t>(n) * sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// Ring executor

static void add_into(float* into, const float* from, int64_t n) {
  for (int64_t i = 0; i < n; ++i) into[i] += from[i];
}

void ring_pass(Exchange& ex, const Ring& ring, const float* own_data, int64_t data_elems,
               float* own_grad, int64_t grad_elems, int tag_base, const RingCompute& compute,
               AttentionStats* stats) {
  const int n = ring.size();
  const bool grads = grad_elems > 0;
  // data[s % 2] holds the bundle of step s >= 1; step 0 computes own_data in place.
  std::vector<float> data[2];
  if (n > 1)
    for (auto& b : data) b.resize(static_cast<size_t>(data_elems));
  // c[s % 2]: this rank's contribution to the gradient of the bundle of step s (s >= 1), alive
  // from its compute at s until its send (posted at s + 1) completes at s + 2. r: the arriving
  // partial of the bundle of step s, posted at s and added at s + 1.
  std::vector<float> c[2], r;
  if (grads && n > 1) {
    for (auto& b : c) b.resize(static_cast<size_t>(grad_elems));
    r.resize(static_cast<size_t>(grad_elems));
  }
  double compute_s = 0;
  const int last_step = grads && n > 1 ? n + 1 : n - 1;
  for (int s = 0; s <= last_step; ++s) {
    if (s > 0) ex.wait_all(stats);
    const core::Timer tc;
    // Gradient partials: the one that arrived (for the bundle of step s - 1) joins our
    // contribution, and the sum moves on to the next rank (the bundle's home after the last).
    if (grads && n > 1) {
      if (s >= 2 && s - 1 <= n - 1) {
        std::vector<float>& mine = c[(s - 1) % 2];
        if (s - 1 >= 2) add_into(mine.data(), r.data(), grad_elems);
        ex.send(mine.data(), grad_elems, ring.next(), tag_base + 2 * s + 1);
      }
      if (s == n + 1) add_into(own_grad, r.data(), grad_elems);  // our own bundle's total
      // The partial of the bundle of step s comes from prev, which computed it at s - 1 (the
      // chain's first member, at step 1, has nothing before it); at s == n it is our own total.
      if (s >= 2 && s <= n) ex.recv(r.data(), grad_elems, ring.prev(), tag_base + 2 * s + 1);
    }
    compute_s += tc.elapsed();
    if (s >= n) continue;  // tail steps only complete gradient transfers
    const float* cur = s == 0 ? own_data : data[s % 2].data();
    if (s + 1 < n) {
      ex.send(cur, data_elems, ring.next(), tag_base + 2 * s);
      ex.recv(data[(s + 1) % 2].data(), data_elems, ring.prev(), tag_base + 2 * s);
    }
    const core::Timer t;
    float* grad = nullptr;
    if (grads) {
      if (s == 0) {
        grad = own_grad;
      } else {
        grad = c[s % 2].data();
        std::fill(c[s % 2].begin(), c[s % 2].end(), 0.f);
      }
    }
    compute(ring.origin_at(s), cur, grad);
    compute_s += t.elapsed();
  }
  ex.wait_all(stats);
  if (stats) {
    stats->compute_s += compute_s;
    stats->steps += n;
  }
}

}  // namespace longseq::attention::detail
