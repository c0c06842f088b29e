#pragma once
// Machinery shared by the multi-ring and head-parallel algorithms (startrail.hpp, ulysses.hpp):
// token sets made of whole rank shards, chunk-pair attention over them, point-to-point exchanges
// on the world group, and one ring executor for rings over any subset of ranks.
//
// Why not the flat-ring executor of distributed.cpp: its bundles are one rank's shard of a Layout
// over the ring's own world. Here a bundle is a *set* of rank shards (a StarTrail team shard of
// C*L tokens, a USP group's U*L tokens) that is not a Layout over the sub-ring (padding and
// striping differ), so the ring works on explicit piece lists with the world layout's positions.
//
// Legend: L = layout.local_len(); a Pieces value lists world ranks whose shards are concatenated
// (piece i = rows [i*L, (i+1)*L), in that rank's local order). Heads per call come from BlockOps.
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "longseq/attention/block_ops.hpp"
#include "longseq/attention/distributed.hpp"

namespace longseq::attention::detail {

/// Concatenated rank shards with their global positions and document ids (per token).
struct Pieces {
  std::vector<int> ranks;
  int64_t l = 0;
  std::vector<int64_t> pos;  ///< [ranks.size() * l], -1 for padding
  std::vector<int32_t> doc;  ///< same length when the mask has documents, else empty
  Pieces() = default;
  Pieces(std::vector<int> ranks, const Layout& layout, const MaskSpec& mask);
  int64_t tokens() const { return static_cast<int64_t>(ranks.size()) * l; }
  kernels::Tokens at(int64_t row) const {
    return {pos.data() + row, doc.empty() ? nullptr : doc.data() + row};
  }
};

/// Chunk-pair attention between token sets: every (query chunk, key chunk) pair of the two
/// pieces lists that the PairTable does not classify as empty.
struct Attend {
  BlockOps* ops;
  int64_t hq, hkv, d;  ///< the head counts and head dim `ops` was made with
  const PairTable* pairs;
  const Layout* layout;
  kernels::Mask mask;
  AttentionStats* stats;  ///< pairs counted here (may be null)

  /// (o, lse) [Tq rows] += attention of q against (k, v), merged with LSE weights.
  void forward(const Pieces& qp, const float* q, const Pieces& kp, const float* k, const float* v,
               float* o, float* lse) const;
  /// dq, dk, dv accumulated for the pairs of the two sets (lse, dvec: [Tq, Hq] final values).
  void backward(const Pieces& qp, const float* q, const float* dout, const float* lse,
                const float* dvec, const Pieces& kp, const float* k, const float* v, float* dq,
                float* dk, float* dv) const;
};

/// Point-to-point transfers on the world group, posted now and completed by wait_all().
/// A transfer to or from this rank itself is a copy and never touches the group (so byte
/// counters see only real traffic); its send must be posted before its receive.
class Exchange {
 public:
  explicit Exchange(comm::Group& group);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  void send(const float* p, int64_t n, int peer, int tag);
  void recv(float* p, int64_t n, int peer, int tag);
  /// Blocks until every posted transfer is complete; adds the blocked time to stats->wait_s.
  void wait_all(AttentionStats* stats);
  int rank() const { return rank_; }

 private:
  struct Impl;
  comm::Group& group_;
  int rank_;
  std::vector<std::function<void()>> waits_;
  std::map<int, std::pair<const float*, int64_t>> self_;  // tag -> pending self-send
};

/// Team collectives built from Exchange (`ranks` in member order, `me` this rank's index):
/// all-gather of `n` floats per member into out [ranks.size() * n] (posted; complete with wait).
void post_all_gather(Exchange& ex, const std::vector<int>& ranks, int me, const float* in,
                     int64_t n, float* out, int tag);

/// One ring over world ranks: `ranks` in ring order (data moves to the next), `pos` this rank.
struct Ring {
  std::vector<int> ranks;
  int pos = 0;
  int size() const { return static_cast<int>(ranks.size()); }
  int next() const { return ranks[(pos + 1) % size()]; }
  int prev() const { return ranks[(pos + size() - 1) % size()]; }
  /// Ring position whose bundle this rank holds at step s.
  int origin_at(int step) const { return ((pos - step) % size() + size()) % size(); }
};

/// The ring executor. Every rank's bundle (`own_data`, data_elems floats) visits every rank of
/// the ring, one hop per step (size() - 1 hops, double-buffered: at step s a rank forwards the
/// bundle it holds and receives the next one, then computes, so the hop overlaps the compute).
/// At step s this rank calls compute(origin, data, grad) for the bundle of ring position
/// origin = origin_at(s). With grad_elems > 0 (backward), `grad` is where the bundle's gradient
/// contribution goes: `own_grad` (accumulated into) for the own bundle, else a zeroed buffer; the
/// contributions of a bundle are summed along the ring in visit order (each added one step late,
/// so the transfer overlaps the next compute: BurstEngine Figure 5's warm-up step) and the sum
/// is sent home, where it is added to own_grad. Uses tags tag_base .. tag_base + 2*size() + 3.
using RingCompute = std::function<void(int origin, const float* data, float* grad)>;
void ring_pass(Exchange& ex, const Ring& ring, const float* own_data, int64_t data_elems,
               float* own_grad, int64_t grad_elems, int tag_base, const RingCompute& compute,
               AttentionStats* stats);

}  // namespace longseq::attention::detail
