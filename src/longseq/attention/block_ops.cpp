#include "longseq/attention/block_ops.hpp"

#include <algorithm>

#include "longseq/kernels/cpu/attention.hpp"

namespace longseq::attention {

namespace cpu = kernels::cpu;

BlockOps::BlockOps(int64_t hq, int64_t hkv, int64_t d, double scale, int threads, int64_t chunk_hkv)
    : hq_(hq), hkv_(hkv), d_(d), chunk_hkv_(chunk_hkv), scale_(scale), threads_(threads) {}

static void ensure(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

template <class T>
void BlockOps::forward_merge(const T* q, const kernels::Tokens& qt, int64_t tq, const T* k,
                             const T* v, const kernels::Tokens& kt, int64_t tk,
                             const kernels::Mask& mask, float* o_acc, float* lse_acc) {
  const cpu::AttnDims dims{tq, tk, hq_, hkv_, d_};
  ensure(o_part_, static_cast<size_t>(tq * hq_ * d_));
  ensure(lse_part_, static_cast<size_t>(tq * hq_));
  ensure(work_, cpu::attention_forward_workspace_floats(dims, threads_));
  cpu::attention_block_forward(q, k, v, qt, kt, mask, static_cast<float>(scale_), dims, threads_,
                               work_, o_part_.data(), lse_part_.data());
  cpu::merge_partials(o_acc, lse_acc, o_part_.data(), lse_part_.data(), tq, hq_, d_, threads_);
}

template <class T>
void BlockOps::backward(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                        const float* dvec, const kernels::Tokens& qt, int64_t tq,
                        const kernels::Tokens& kt, int64_t tk, const kernels::Mask& mask, float* dq,
                        float* dk, float* dv) {
  const cpu::AttnDims dims{tq, tk, hq_, hkv_, d_, chunk_hkv_};
  ensure(work_, cpu::attention_backward_workspace_floats(dims, threads_));
  cpu::attention_block_backward(q, k, v, dout, lse, dvec, qt, kt, mask, static_cast<float>(scale_),
                                dims, threads_, work_, dq, dk, dv);
}

template <class T>
void BlockOps::compute_d(const float* o, const T* dout, int64_t l, float* dvec) {
  cpu::attention_delta(dout, o, l, hq_, d_, threads_, dvec);
}

// The two element types the executors run (AttentionSpec::precision f32 and bf16).
#define LONGSEQ_BLOCK_OPS_INSTANTIATE(T)                                                          \
  template void BlockOps::forward_merge<T>(const T*, const kernels::Tokens&, int64_t, const T*,   \
                                           const T*, const kernels::Tokens&, int64_t,             \
                                           const kernels::Mask&, float*, float*);                 \
  template void BlockOps::backward<T>(                                                            \
      const T*, const T*, const T*, const T*, const float*, const float*, const kernels::Tokens&, \
      int64_t, const kernels::Tokens&, int64_t, const kernels::Mask&, float*, float*, float*);    \
  template void BlockOps::compute_d<T>(const float*, const T*, int64_t, float*);
LONGSEQ_BLOCK_OPS_INSTANTIATE(float)
LONGSEQ_BLOCK_OPS_INSTANTIATE(core::bf16)
#undef LONGSEQ_BLOCK_OPS_INSTANTIATE

}  // namespace longseq::attention
