#include "longseq/model/kernels.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/linear.hpp"
#include "longseq/kernels/cpu/rmsnorm.hpp"
#include "longseq/kernels/cpu/rope.hpp"
#include "longseq/kernels/cpu/swiglu.hpp"
#include "longseq/model/layers.hpp"

namespace longseq::model {

namespace kc = kernels::cpu;

namespace {

class CpuRope final : public Rope {
 public:
  CpuRope(kc::RopeTable table, int threads) : table_(std::move(table)), threads_(threads) {}
  void forward(float* x, int64_t h) const override { table_.forward(x, h, threads_); }
  void backward(float* dx, int64_t h) const override { table_.backward(dx, h, threads_); }

 private:
  kc::RopeTable table_;
  int threads_;
};

// A CPU's parked tensor: a host copy of the data and the shape.
struct CpuParked final : Parked {
  core::Shape shape;
  std::vector<float> data;
  bool taken = false;
};

}  // namespace

CpuKernels::CpuKernels(int threads) : Kernels(core::Exec::cpu(std::max(threads, 1))) {}

void CpuKernels::copy(float* dst, const float* src, int64_t n) const {
  if (n > 0) std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
}

std::unique_ptr<Parked> CpuKernels::park(core::Tensor<float> t) const {
  auto p = std::make_unique<CpuParked>();
  p->shape = t.shape();
  p->data.assign(t.data(), t.data() + t.numel());
  return p;  // t's memory goes with it
}

void CpuKernels::fetch(Parked&) const {}

core::Tensor<float> CpuKernels::take(Parked& parked) const {
  auto& p = dynamic_cast<CpuParked&>(parked);
  LONGSEQ_CHECK_MSG(!p.taken, "a parked tensor is taken once");
  p.taken = true;
  core::Tensor<float> t(p.shape, device(), core::Uninit{}, "fetched activation");
  copy(t.data(), p.data.data(), t.numel());
  p.data = {};
  return t;
}

void CpuKernels::rmsnorm_forward(const float* x, const float* weight, int64_t t, int64_t c,
                                 float eps, float* out, float* rstd) const {
  kc::rmsnorm_forward(x, weight, t, c, eps, out, rstd, exec());
}

void CpuKernels::rmsnorm_backward(const float* dout, const float* x, const float* weight,
                                  const float* rstd, int64_t t, int64_t c, float* dx,
                                  float* dweight, bool accumulate) const {
  kc::rmsnorm_backward(dout, x, weight, rstd, t, c, dx, dweight, accumulate, exec());
}

void CpuKernels::linear_forward(const float* in, const float* weight, int64_t t, int64_t k,
                                int64_t n, float* out, bool accumulate, core::DType compute) const {
  kc::linear_forward(in, weight, t, k, n, out, accumulate, exec(), compute);
}

void CpuKernels::linear_backward(const float* dout, const float* in, const float* weight, int64_t t,
                                 int64_t k, int64_t n, float* din, bool accumulate_din,
                                 float* dweight, core::DType compute) const {
  kc::linear_backward(dout, in, weight, t, k, n, din, accumulate_din, dweight, exec(), compute);
}

void CpuKernels::swiglu_forward(const float* gate, const float* up, int64_t n, float* out) const {
  kc::swiglu_forward(gate, up, n, out, exec());
}

void CpuKernels::swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n,
                                 float* dgate, float* dup) const {
  kc::swiglu_backward(dout, gate, up, n, dgate, dup, exec());
}

void CpuKernels::embedding_forward(const int32_t* tokens, const int64_t* pos, const float* weight,
                                   int64_t t, int64_t c, int64_t v, float* out) const {
  model::embedding_forward(tokens, pos, weight, t, c, v, out);
}

void CpuKernels::embedding_backward(const int32_t* tokens, const int64_t* pos, const float* dout,
                                    int64_t t, int64_t c, int64_t v, float* dweight) const {
  (void)v;  // the CPU loop indexes by id; ids were range-checked by the forward
  model::embedding_backward(tokens, pos, dout, t, c, dweight);
}

std::unique_ptr<Rope> CpuKernels::rope(const int64_t* pos, int64_t t,
                                       const RopeFrequencies& f) const {
  return std::make_unique<CpuRope>(rope_table(pos, t, f), threads());
}

LossPart CpuKernels::lm_head(bool fused, const float* hidden, const float* weight,
                             const int32_t* labels, const LmHeadDims& d, double grad_scale,
                             float* dhidden, float* dweight, LmHeadOptions o) const {
  o.exec = exec();
  return fused ? kc::lm_head_ce_fused(hidden, weight, labels, d, grad_scale, dhidden, dweight, o)
               : kc::lm_head_ce_unfused(hidden, weight, labels, d, grad_scale, dhidden, dweight, o);
}

}  // namespace longseq::model
