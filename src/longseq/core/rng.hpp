#pragma once
// Counter-based random numbers: element i of a stream is a pure function of (seed, i). Every rank
// can therefore build the same global tensor, or only its own slice of it, without communication,
// and the result never depends on thread count or rank count.
#include <cstddef>
#include <cstdint>

#include "longseq/core/dtype.hpp"

namespace longseq::core {

/// SplitMix64 finaliser: a bijective 64-bit mix with good avalanche.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// 64 random bits for counter `i` of stream `seed`.
inline uint64_t random_bits(uint64_t seed, uint64_t i) {
  return mix64(mix64(seed) ^ mix64(i * 2 + 1));
}

/// Uniform in [0, 1) with 53 random bits.
inline double uniform01(uint64_t seed, uint64_t i) {
  return static_cast<double>(random_bits(seed, i) >> 11) * (1.0 / 9007199254740992.0);
}

/// Standard normal for counter i (Box-Muller on two sub-counters).
double normal01(uint64_t seed, uint64_t i);

/// out[j] = mean + stddev * normal01(seed, offset + j) for j < n. Slicing the global tensor is
/// passing the slice's global element offset.
void fill_normal(float* out, size_t n, uint64_t seed, uint64_t offset = 0, double mean = 0.0,
                 double stddev = 1.0);
void fill_normal(double* out, size_t n, uint64_t seed, uint64_t offset = 0, double mean = 0.0,
                 double stddev = 1.0);
void fill_normal(bf16* out, size_t n, uint64_t seed, uint64_t offset = 0, double mean = 0.0,
                 double stddev = 1.0);
/// Uniform in [lo, hi).
void fill_uniform(float* out, size_t n, uint64_t seed, uint64_t offset = 0, double lo = 0.0,
                  double hi = 1.0);
void fill_uniform(double* out, size_t n, uint64_t seed, uint64_t offset = 0, double lo = 0.0,
                  double hi = 1.0);
/// Uniform integers in [0, bound).
void fill_randint(int32_t* out, size_t n, uint64_t seed, int32_t bound, uint64_t offset = 0);

/// Derives an independent stream seed: same (seed, tag) -> same result.
inline uint64_t derive_seed(uint64_t seed, uint64_t tag) {
  return mix64(seed ^ mix64(tag + 0x51ed27));
}

}  // namespace longseq::core
