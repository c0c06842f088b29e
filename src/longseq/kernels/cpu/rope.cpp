#include "longseq/kernels/cpu/rope.hpp"

#include <algorithm>
#include <cmath>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/dispatch.hpp"

namespace longseq::kernels::cpu {

namespace {

std::vector<double> plain_inv_freq(int64_t d, double theta) {
  core::require(d > 0 && d % 2 == 0, "kernels", "rope head dim ", d, " must be even and positive");
  core::require(theta > 0, "kernels", "rope theta must be > 0, got ", theta);
  // The same expression as model/rope_scaling.cpp's default frequencies, so both give equal bits.
  std::vector<double> inv(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i)
    inv[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  return inv;
}
}  // namespace

RopeTable::RopeTable(const int64_t* pos, int64_t t, int64_t d, double theta)
    : RopeTable(pos, t, plain_inv_freq(d, theta)) {}

RopeTable::RopeTable(const int64_t* pos, int64_t t, std::span<const double> inv_freq,
                     double attention_factor)
    : t_(t), d_(2 * static_cast<int64_t>(inv_freq.size())) {
  const int64_t half = d_ / 2;
  cos_.assign(static_cast<size_t>(t * half), 1.0f);
  sin_.assign(static_cast<size_t>(t * half), 0.0f);
  pad_.assign(static_cast<size_t>(t), 0);
  for (int64_t r = 0; r < t; ++r) {
    if (pos[r] < 0) {
      pad_[r] = 1;
      continue;
    }
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(pos[r]) * inv_freq[i];
      cos_[r * half + i] = static_cast<float>(std::cos(a) * attention_factor);
      sin_[r * half + i] = static_cast<float>(std::sin(a) * attention_factor);
    }
  }
}

void RopeTable::rotate(float* x, int64_t h, float sign, const core::Exec& exec) const {
  const int threads = exec.cpu_threads("RopeTable");
  active_pointwise().rope_rotate(x, t_, h, d_, cos_.data(), sin_.data(), pad_.data(), sign,
                                 threads);
}

void RopeTable::forward(float* x, int64_t h, const core::Exec& exec) const {
  rotate(x, h, 1.0f, exec);
}
void RopeTable::backward(float* dx, int64_t h, const core::Exec& exec) const {
  rotate(dx, h, -1.0f, exec);
}

}  // namespace longseq::kernels::cpu
