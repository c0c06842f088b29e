#pragma once
// The executor's view of the block kernels (kernels/cpu): one chunk pair at a time, with the
// scratch the kernels need owned here so the kernels themselves never allocate. The kernels
// classify their own tiles, so the schedule's chunk-level PairKind is not passed down.
//
// Element type T of q, k, v and dout: float or core::bf16 (AttentionSpec::precision), one code
// path for both (explicit instantiations in block_ops.cpp). Whatever T is, o_acc, lse_acc, lse,
// dvec and the gradients are fp32: accumulation never leaves fp32 (design.md §2).
#include <cstdint>
#include <vector>

#include "longseq/attention/mask_spec.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/kernels/mask.hpp"

namespace longseq::attention {

class BlockOps {
 public:
  /// chunk_hkv: the kv heads the backward's dq chunking is sized for (AttnDims::chunk_hkv; 0:
  /// hkv), so a head group computes the bits its heads get in a call over all heads.
  BlockOps(int64_t hq, int64_t hkv, int64_t d, double scale, int threads, int64_t chunk_hkv = 0);

  /// Attention of tq queries against tk keys; the partial (O', LSE') is merged into the running
  /// (o_acc [tq, Hq, D], lse_acc [tq, Hq]) with LSE weights.
  template <class T>
  void forward_merge(const T* q, const kernels::Tokens& qt, int64_t tq, const T* k, const T* v,
                     const kernels::Tokens& kt, int64_t tk, const kernels::Mask& mask, float* o_acc,
                     float* lse_acc);

  /// Accumulates dq [tq, Hq, D], dk and dv [tk, Hkv, D] of one chunk pair, given the final lse and
  /// D = rowsum(dO * O) of the query rows.
  template <class T>
  void backward(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                const float* dvec, const kernels::Tokens& qt, int64_t tq, const kernels::Tokens& kt,
                int64_t tk, const kernels::Mask& mask, float* dq, float* dk, float* dv);

  /// dvec[t, h] = sum_d dout[t, h, d] * o[t, h, d] for l rows (o is the fp32 final output).
  template <class T>
  void compute_d(const float* o, const T* dout, int64_t l, float* dvec);

 private:
  int64_t hq_, hkv_, d_, chunk_hkv_;
  double scale_;
  int threads_;
  std::vector<float> o_part_, lse_part_, work_;
};

}  // namespace longseq::attention
