#include "longseq/kernels/cpu/rope.hpp"

#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/dispatch.hpp"
#include "longseq/kernels/rope_table.hpp"

namespace longseq::kernels::cpu {

RopeTable::RopeTable(const int64_t* pos, int64_t t, int64_t d, double theta)
    : RopeTable(pos, t, rope_plain_inv_freq(d, theta)) {}

RopeTable::RopeTable(const int64_t* pos, int64_t t, std::span<const double> inv_freq,
                     double attention_factor)
    : t_(t), d_(2 * static_cast<int64_t>(inv_freq.size())) {
  const int64_t half = d_ / 2;
  cos_.resize(static_cast<size_t>(t * half));
  sin_.resize(static_cast<size_t>(t * half));
  pad_.resize(static_cast<size_t>(t));
  // The table loop shared with kernels/cuda/rope.cu (kernels/rope_table.hpp).
  rope_fill_table(pos, t, inv_freq.data(), half, attention_factor, cos_.data(), sin_.data(),
                  pad_.data());
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
