#include "longseq/kernels/cpu/linear.hpp"

#include "longseq/kernels/gemm.hpp"

namespace longseq::kernels::cpu {

void linear_forward(const float* in, const float* weight, int64_t t, int64_t k, int64_t n,
                    float* out, bool accumulate, const core::Exec& exec, core::DType compute) {
  const int threads = exec.cpu_threads("linear_forward");
  gemm_parallel(compute, threads, false, true, t, n, k, 1.0f, in, k, weight, k,
                accumulate ? 1.0f : 0.0f, out, n);
}

void linear_backward(const float* dout, const float* in, const float* weight, int64_t t, int64_t k,
                     int64_t n, float* din, bool accumulate_din, float* dweight,
                     const core::Exec& exec, core::DType compute) {
  const int threads = exec.cpu_threads("linear_backward");
  // dweight [N, K] += dout^T [N, T] * in [T, K]; first, so that din may overwrite `in`.
  gemm_parallel(compute, threads, true, false, n, k, t, 1.0f, dout, n, in, k, 1.0f, dweight, k);
  if (din)
    gemm_parallel(compute, threads, false, false, t, k, n, 1.0f, dout, n, weight, k,
                  accumulate_din ? 1.0f : 0.0f, din, k);
}

}  // namespace longseq::kernels::cpu
