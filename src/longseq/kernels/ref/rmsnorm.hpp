#pragma once
// The specification of RMSNorm (LLaMA), in fp64 with plain loops.
//
// Legend: T rows (tokens), C channels. Layouts, row-major: x, out, dout, dx [T, C]; weight, dweight
// [C]; rstd [T].
//
//   rstd[t]   = 1 / sqrt(mean_c x[t, c]^2 + eps)
//   out[t, c] = x[t, c] * rstd[t] * weight[c]
// (LlamaRMSNorm; no mean subtraction, no bias.)
//
// Errors: core::Error("[kernels.ref] ...") for negative dims or eps < 0.
#include <cstdint>

namespace longseq::kernels::ref {

/// Forward. out may alias x. rstd [T] (nullable) receives the per-row reciprocal RMS, the value a
/// fast kernel saves for its backward.
void rmsnorm_forward(const double* x, const double* weight, int64_t t, int64_t c, double eps,
                     double* out, double* rstd = nullptr);

/// Backward: gradients of sum(out * dout) with respect to x [T, C] and weight [C], overwritten
/// (not accumulated). dx may alias dout.
///   dx[t, c]  = rstd * (weight[c] dout[t, c] - x[t, c] rstd^2 / C * sum_c' weight dout x)
///   dweight[c] = sum_t dout[t, c] x[t, c] rstd[t]
void rmsnorm_backward(const double* dout, const double* x, const double* weight, int64_t t,
                      int64_t c, double eps, double* dx, double* dweight);

}  // namespace longseq::kernels::ref
