#pragma once
// Overflow-checked arithmetic for sizes read from files: a shape whose element count or byte count
// does not fit in 63 bits is a malformed file, never a wrapped-around small number.
#include <cstdint>
#include <vector>

namespace longseq::core {

/// a * b into `out`; false (out untouched) when either is negative or the product exceeds
/// INT64_MAX.
inline bool checked_mul(int64_t a, int64_t b, int64_t& out) {
  if (a < 0 || b < 0) return false;
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return false;
  out = r;
  return true;
}

/// The byte count of `shape` with `elem_size`-byte elements; false when a dimension is negative or
/// the element or byte count overflows int64.
inline bool shape_bytes(const std::vector<int64_t>& shape, int64_t elem_size, int64_t& bytes) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (!checked_mul(n, d, n)) return false;
  return checked_mul(n, elem_size, bytes);
}

}  // namespace longseq::core
