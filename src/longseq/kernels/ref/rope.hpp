#pragma once
// The specification of rotary position embeddings (RoPE) on *global* positions, in fp64.
//
// Legend: T tokens, H heads, D head dim (even). Layouts, row-major: x, out, dout, dx [T, H, D];
// pos int64 [T] (the token's global position in its sequence, as produced by the balance layout;
// negative = padding).
//
// Convention: LLaMA / Hugging Face "rotate_half". Dimension i < D/2 is paired with i + D/2 (not
// with i + 1 as in the original RoFormer / Meta interleaved layout):
//   inv_freq[i] = theta^(-2i / D),  a = pos * inv_freq[i]
//   out[i]       = x[i] cos a - x[i + D/2] sin a
//   out[i + D/2] = x[i + D/2] cos a + x[i] sin a
// i.e. out = x * cos + rotate_half(x) * sin with cos, sin = cat(cos a, cos a), cat(sin a, sin a).
// theta is 10000 for LLaMA-2, 500000 for LLaMA-3. Angles are computed in fp64 (HF computes them
// in fp32, which loses accuracy at positions ~1e6; fast kernels should follow the spec here).
//
// Padding tokens (pos < 0) are passed through unrotated, so their (ignored) values stay finite and
// deterministic.
//
// Errors: core::Error("[kernels.ref] ...") for odd D, negative dims or theta <= 0.
#include <cstdint>

namespace longseq::kernels::ref {

inline constexpr double kRopeThetaLlama2 = 10000.0;

/// Forward: out = rotate(x) by each token's angles; out may alias x.
void rope_forward(const double* x, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                  double theta, double* out);

/// Backward: dx = rotate(dout) by the negated angles (the rotation's transpose), i.e. the gradient
/// of sum(out * dout) with respect to x; overwritten; dx may alias dout.
void rope_backward(const double* dout, const int64_t* pos, int64_t t, int64_t h, int64_t d,
                   double theta, double* dx);

}  // namespace longseq::kernels::ref
