#include "longseq/attention/block_ops.hpp"

#include <algorithm>

#include "longseq/kernels/cpu/attention.hpp"

namespace longseq::attention {

namespace cpu = kernels::cpu;

BlockOps::BlockOps(int64_t hq, int64_t hkv, int64_t d, double scale, int threads)
    : hq_(hq), hkv_(hkv), d_(d), scale_(scale), threads_(threads) {}

static void ensure(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

void BlockOps::forward_merge(const float* q, const kernels::Tokens& qt, int64_t tq, const float* k, const float* v,
                             const kernels::Tokens& kt, int64_t tk, const kernels::Mask& mask, float* o_acc,
                             float* lse_acc) {
  const cpu::AttnDims dims{tq, tk, hq_, hkv_, d_};
  ensure(o_part_, static_cast<size_t>(tq * hq_ * d_));
  ensure(lse_part_, static_cast<size_t>(tq * hq_));
  ensure(work_, cpu::attention_forward_workspace_floats(dims, threads_));
  cpu::attention_block_forward(q, k, v, qt, kt, mask, static_cast<float>(scale_), dims, threads_, work_,
                               o_part_.data(), lse_part_.data());
  cpu::merge_partials(o_acc, lse_acc, o_part_.data(), lse_part_.data(), tq, hq_, d_, threads_);
}

void BlockOps::backward(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                        const float* dvec, const kernels::Tokens& qt, int64_t tq, const kernels::Tokens& kt,
                        int64_t tk, const kernels::Mask& mask, float* dq, float* dk, float* dv) {
  const cpu::AttnDims dims{tq, tk, hq_, hkv_, d_};
  ensure(work_, cpu::attention_backward_workspace_floats(dims, threads_));
  cpu::attention_block_backward(q, k, v, dout, lse, dvec, qt, kt, mask, static_cast<float>(scale_), dims, threads_,
                                work_, dq, dk, dv);
}

void BlockOps::compute_d(const float* o, const float* dout, int64_t l, float* dvec) {
  cpu::attention_delta(dout, o, l, hq_, d_, threads_, dvec);
}

}  // namespace longseq::attention
