#pragma once
// Element types. Compute runs in f32 (f64 in kernels/ref); bf16 is a storage type whose values are
// widened to f32 before arithmetic. f64/i32/i64/u8 exist for file I/O and indices.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace longseq::core {

enum class DType : uint8_t { f32, bf16, f64, i32, i64, u8, boolean };

/// Bytes per element.
size_t dtype_size(DType t);
/// "f32", "bf16", "f64", "i32", "i64", "u8", "bool".
std::string_view dtype_name(DType t);
/// Inverse of dtype_name; throws core::Error naming `s` when unknown.
DType dtype_from_name(std::string_view s);
/// The one --precision vocabulary (train, eval, attention): "f32" or "fp32" -> f32, "bf16" ->
/// bf16; printed with dtype_name ("f32" | "bf16"). Throws core::Error("[component] --precision
/// 'x': expected f32 (or fp32) | bf16") otherwise.
DType parse_precision(std::string_view s, std::string_view component);

/// bfloat16 storage: the upper 16 bits of an IEEE-754 binary32.
struct bf16 {
  uint16_t bits = 0;
};

/// f32 -> bf16 with round-to-nearest-even. NaN stays NaN (quiet bit forced, sign kept), +-inf stay
/// infinite, values that round past the largest finite bf16 become inf, as IEEE rounding demands.
inline bf16 to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return bf16{static_cast<uint16_t>(u >> 16)};
}

/// bf16 -> f32 is exact.
inline float to_f32(bf16 x) {
  const uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Rounds an f32 to the nearest bf16 value and back (what storing in bf16 does to a value).
inline float round_bf16(float x) {
  return to_f32(to_bf16(x));
}

void f32_to_bf16(const float* in, bf16* out, size_t n);
void bf16_to_f32(const bf16* in, float* out, size_t n);

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

}  // namespace longseq::core
