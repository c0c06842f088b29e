#pragma once
// Head-parallel attention: DeepSpeed-Ulysses and USP (BurstEngine §4 baselines).
//
// Legend: P ranks, U ranks per Ulysses group (ulysses: U = P), R = P/U groups, L =
// layout.local_len(), Hq = g * Hkv heads, D head dim. Ulysses group u = ranks u*U .. u*U + U - 1
// (consecutive, so with comm::Topology::declared they sit inside a node when U divides the node
// size);
// member i of every group forms ring i = ranks {u*U + i}.
//
// ulysses: an all-to-all turns the sequence-sharded q, k, v [L, H, D] into head-sharded
// [P*L, H/P, D] (every token, a slice of heads), each rank attends over the whole sequence for its
// heads, and an all-to-all turns (O, LSE) back. Backward: q, k, v, dO, D = rowsum(dO*O) and LSE
// go head-sharded the same way, the local backward runs, dq, dk, dv come back.
//
// usp:U: the same all-to-all inside each Ulysses group gives every rank its group's U*L tokens for
// Hq/U heads; ring i then runs ring attention across the R groups for those heads (K,V circulate
// in the forward; the backward circulates Q, dO, D, LSE and dQ (burst, default) or K, V, dK, dV
// (`usp:U:ring`)). usp:P is ulysses, usp:1 is the flat ring/burst.
//
// GQA: query heads are split evenly (Hq divisible by U). K,V heads are split, never repeated, when
// Hkv is divisible by U; when Hkv divides U instead, every rank receives the one kv head its query
// heads use, i.e. each kv head is replicated to exactly the U/Hkv ranks that need it (and their
// dK, dV partials are summed on the way back). Any other (Hkv, U) is refused with the numbers.
#include <cstdint>

#include "longseq/attention/distributed.hpp"

namespace longseq::attention {

/// How a Ulysses group of U ranks shares Hq query and Hkv kv heads. Pure; value type.
struct HeadSplit {
  /// Throws core::Error naming the values unless Hq % U == 0 and (Hkv % U == 0 or U % Hkv == 0).
  HeadSplit(int64_t hq, int64_t hkv, int u);
  int64_t hq = 0, hkv = 0;
  int u = 1;
  int64_t hq_per = 0;  ///< query heads per rank: Hq / U
  int64_t kv_per = 0;  ///< kv heads per rank: Hkv / U, or 1 when replicated
  bool replicated =
      false;  ///< Hkv < U: kv head h is held by the U / Hkv ranks whose queries use it
  int64_t q_begin(int i) const { return i * hq_per; }
  /// First kv head of member i; its query heads q_begin(i) .. + hq_per use kv heads kv_begin(i) ..
  /// + kv_per with the usual GQA map (local query head h uses local kv head h / (hq_per / kv_per)).
  int64_t kv_begin(int i) const;
};

/// Options of `--algo ulysses` (u = 0: the whole world) and `--algo usp:U[:ring|:burst]`.
struct UspOptions {
  int u = 0;
  Backward backward = Backward::q;
};

/// Checks (world, U, heads); throws core::Error naming the values ("usp:3 needs U to divide
/// world 8", head counts that do not divide).
void validate_usp(const UspOptions& opt, int world, int64_t hq, int64_t hkv);

/// Forward and backward on every rank of `group` (size layout.world()); shapes and semantics as
/// distributed_attention_forward/backward (distributed.hpp). Blocking.
AttentionSaved usp_forward(core::View<const float> q, core::View<const float> k,
                           core::View<const float> v, const AttentionSpec& spec,
                           const Layout& layout, comm::Group& group, AttentionStats* stats,
                           const UspOptions& opt);
/// Backward: the head-sharded q, k, v are not kept from the forward (AttentionSaved holds the
/// sequence-sharded inputs), so they go through the all-to-all again.
AttentionGrads usp_backward(core::View<const float> dout, const AttentionSaved& saved,
                            const AttentionSpec& spec, const Layout& layout, comm::Group& group,
                            AttentionStats* stats, const UspOptions& opt);

inline AttentionSaved ulysses_forward(core::View<const float> q, core::View<const float> k,
                                      core::View<const float> v, const AttentionSpec& spec,
                                      const Layout& layout, comm::Group& group,
                                      AttentionStats* stats = nullptr) {
  return usp_forward(q, k, v, spec, layout, group, stats, UspOptions{});
}
inline AttentionGrads ulysses_backward(core::View<const float> dout, const AttentionSaved& saved,
                                       const AttentionSpec& spec, const Layout& layout,
                                       comm::Group& group, AttentionStats* stats = nullptr) {
  return usp_backward(dout, saved, spec, layout, group, stats, UspOptions{});
}

/// Elements one rank sends per pass (the docs state them as formulas; tests compare with the
/// byte counters).
struct UspVolume {
  int64_t all_to_all = 0;  ///< inside the Ulysses group
  int64_t ring = 0;        ///< across groups (data and gradient hops)
};
UspVolume usp_forward_volume(const UspOptions& opt, int world, int64_t l, int64_t hq, int64_t hkv,
                             int64_t d);
UspVolume usp_backward_volume(const UspOptions& opt, int world, int64_t l, int64_t hq, int64_t hkv,
                              int64_t d);

}  // namespace longseq::attention
