#include "longseq/core/dtype.hpp"

#include "longseq/core/error.hpp"

namespace longseq::core {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f64:
      return 8;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
    case DType::boolean:
      return 1;
  }
  LONGSEQ_CHECK_MSG(false, "unknown dtype ", static_cast<int>(t));
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f64:
      return "f64";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::boolean:
      return "bool";
  }
  LONGSEQ_CHECK_MSG(false, "unknown dtype ", static_cast<int>(t));
  return "";
}

DType dtype_from_name(std::string_view s) {
  for (DType t :
       {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8, DType::boolean})
    if (dtype_name(t) == s) return t;
  fail("core", "unknown dtype '", s, "' (expected f32, bf16, f64, i32, i64, u8 or bool)");
}

DType parse_precision(std::string_view s, std::string_view component) {
  if (s == "f32" || s == "fp32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  fail(component, "--precision '", s, "': expected f32 (or fp32) | bf16");
}

void f32_to_bf16(const float* in, bf16* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

void bf16_to_f32(const bf16* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = to_f32(in[i]);
}

}  // namespace longseq::core
