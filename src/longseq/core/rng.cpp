#include "longseq/core/rng.hpp"

#include <cmath>
#include <numbers>

#include "longseq/core/error.hpp"

namespace longseq::core {

double normal01(uint64_t seed, uint64_t i) {
  // 1 - u keeps the log argument in (0, 1].
  const double u1 = 1.0 - uniform01(seed, 2 * i);
  const double u2 = uniform01(seed, 2 * i + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

template <class T, class Conv>
static void fill_with(T* out, size_t n, Conv conv) {
  for (size_t j = 0; j < n; ++j) out[j] = conv(j);
}

void fill_normal(float* out, size_t n, uint64_t seed, uint64_t offset, double mean, double sd) {
  fill_with(out, n,
            [&](size_t j) { return static_cast<float>(mean + sd * normal01(seed, offset + j)); });
}
void fill_normal(double* out, size_t n, uint64_t seed, uint64_t offset, double mean, double sd) {
  fill_with(out, n, [&](size_t j) { return mean + sd * normal01(seed, offset + j); });
}
void fill_normal(bf16* out, size_t n, uint64_t seed, uint64_t offset, double mean, double sd) {
  fill_with(out, n, [&](size_t j) {
    return to_bf16(static_cast<float>(mean + sd * normal01(seed, offset + j)));
  });
}
void fill_uniform(float* out, size_t n, uint64_t seed, uint64_t offset, double lo, double hi) {
  fill_with(out, n, [&](size_t j) {
    return static_cast<float>(lo + (hi - lo) * uniform01(seed, offset + j));
  });
}
void fill_uniform(double* out, size_t n, uint64_t seed, uint64_t offset, double lo, double hi) {
  fill_with(out, n, [&](size_t j) { return lo + (hi - lo) * uniform01(seed, offset + j); });
}
void fill_randint(int32_t* out, size_t n, uint64_t seed, int32_t bound, uint64_t offset) {
  LONGSEQ_CHECK_MSG(bound > 0, "randint bound ", bound);
  fill_with(out, n, [&](size_t j) {
    return static_cast<int32_t>(random_bits(seed, offset + j) % static_cast<uint64_t>(bound));
  });
}

}  // namespace longseq::core
