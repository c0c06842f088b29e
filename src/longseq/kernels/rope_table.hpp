#pragma once
// The RoPE cos/sin table, computed once on the host for both backends: kernels/cpu/rope.cpp keeps
// it in host vectors, kernels/cuda/rope.cu copies it to the device. One copy of the loop, so both
// backends rotate by the same fp32 values (angles in fp64, cos and sin rounded to fp32 once).
//
// C++17 and free of std::span on purpose: nvcc compiles kernels/cuda (and every header it
// includes) as C++17 (design.md §10), and this header is included there.
//
// Legend: T tokens, D head dim, half = D / 2. pos int64 [T] global positions (negative: padding).
#include <cmath>
#include <cstdint>
#include <vector>

#include "longseq/core/error.hpp"

namespace longseq::kernels {

/// Plain RoPE frequencies: inv_freq[i] = theta^(-2i/d), i < d/2. The expression of
/// model/rope_scaling.cpp's default frequencies, so both give equal bits. Throws
/// core::Error("[kernels] ...") naming the value for an odd or non-positive d or theta <= 0.
inline std::vector<double> rope_plain_inv_freq(int64_t d, double theta) {
  core::require(d > 0 && d % 2 == 0, "kernels", "rope head dim ", d, " must be even and positive");
  core::require(theta > 0, "kernels", "rope theta must be > 0, got ", theta);
  std::vector<double> inv(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i)
    inv[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  return inv;
}

/// Fills cos and sin [T, half] and pad [T]: for a token with pos >= 0, angle a = pos * inv_freq[i]
/// in fp64, cos = fp32(cos(a) * attention_factor), sin likewise, pad = 0; a padding token (pos <
/// 0) gets cos 1, sin 0, pad 1 (the rotation leaves it alone). inv_freq has `half` entries.
inline void rope_fill_table(const int64_t* pos, int64_t t, const double* inv_freq, int64_t half,
                            double attention_factor, float* cos_out, float* sin_out, uint8_t* pad) {
  for (int64_t r = 0; r < t; ++r) {
    pad[r] = pos[r] < 0 ? 1 : 0;
    for (int64_t i = 0; i < half; ++i) {
      if (pos[r] < 0) {
        cos_out[r * half + i] = 1.0f;
        sin_out[r * half + i] = 0.0f;
        continue;
      }
      const double a = static_cast<double>(pos[r]) * inv_freq[i];
      cos_out[r * half + i] = static_cast<float>(std::cos(a) * attention_factor);
      sin_out[r * half + i] = static_cast<float>(std::sin(a) * attention_factor);
    }
  }
}

}  // namespace longseq::kernels
