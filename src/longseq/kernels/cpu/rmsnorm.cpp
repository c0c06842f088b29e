// RMSNorm's public entry points (contracts in rmsnorm.hpp); the loops run in the active kernel
// variant (kernels/cpu/isa/pointwise.cpp).
#include "longseq/kernels/cpu/rmsnorm.hpp"

#include "longseq/kernels/cpu/dispatch.hpp"

namespace longseq::kernels::cpu {

void rmsnorm_forward(const float* x, const float* weight, int64_t t, int64_t c, float eps,
                     float* out, float* rstd, const core::Exec& exec) {
  const int threads = exec.cpu_threads("rmsnorm_forward");
  active_pointwise().rmsnorm_forward(x, weight, t, c, eps, out, rstd, threads);
}

void rmsnorm_backward(const float* dout, const float* x, const float* weight, const float* rstd,
                      int64_t t, int64_t c, float* dx, float* dweight, bool accumulate,
                      const core::Exec& exec) {
  const int threads = exec.cpu_threads("rmsnorm_backward");
  active_pointwise().rmsnorm_backward(dout, x, weight, rstd, t, c, dx, dweight, accumulate,
                                      threads);
}

}  // namespace longseq::kernels::cpu
