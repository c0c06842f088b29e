#include "longseq/core/dtype.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "longseq/core/error.hpp"

using namespace longseq::core;

static uint16_t bits_of(float x) {
  return to_bf16(x).bits;
}
static float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(dtype_from_name("bf16"), DType::bf16);
  EXPECT_THROW(dtype_from_name("f16"), Error);
}

// One --precision vocabulary for train, eval and attention: both spellings of fp32 in, one out.
TEST(DType, PrecisionAcceptsBothSpellingsAndPrintsOne) {
  EXPECT_EQ(parse_precision("f32", "attention"), DType::f32);
  EXPECT_EQ(parse_precision("fp32", "train"), DType::f32);
  EXPECT_EQ(parse_precision("bf16", "train"), DType::bf16);
  EXPECT_EQ(dtype_name(parse_precision("fp32", "train")), "f32");
  for (const char* bad : {"fp16", "f64", "", "BF16"}) {
    try {
      parse_precision(bad, "attention");
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("[attention] --precision '") + bad + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(BF16, ExactValuesRoundTrip) {
  for (float x : {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 65280.0f}) EXPECT_EQ(to_f32(to_bf16(x)), x);
}

TEST(BF16, RoundToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 (even mantissa) and 1 + 2^-7: ties to even -> 1.
  EXPECT_EQ(bits_of(from_bits(0x3f808000u)), 0x3f80u);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): ties to even -> up.
  EXPECT_EQ(bits_of(from_bits(0x3f818000u)), 0x3f82u);
  // Just above halfway rounds up, just below rounds down.
  EXPECT_EQ(bits_of(from_bits(0x3f808001u)), 0x3f81u);
  EXPECT_EQ(bits_of(from_bits(0x3f807fffu)), 0x3f80u);
  // Negative numbers round on magnitude.
  EXPECT_EQ(bits_of(from_bits(0xbf818000u)), 0xbf82u);
}

TEST(BF16, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(to_f32(to_bf16(inf)), inf);
  EXPECT_EQ(to_f32(to_bf16(-inf)), -inf);
  // A NaN whose payload lives only in the low 16 bits would become inf if truncated: it must stay
  // NaN.
  const float nan_low = from_bits(0x7f800001u);
  ASSERT_TRUE(std::isnan(nan_low));
  EXPECT_TRUE(std::isnan(to_f32(to_bf16(nan_low))));
  EXPECT_TRUE(std::isnan(to_f32(to_bf16(-std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::signbit(to_f32(to_bf16(from_bits(0xff800001u)))));
  // The largest float rounds past the largest finite bf16 and becomes inf.
  EXPECT_EQ(to_f32(to_bf16(std::numeric_limits<float>::max())), inf);
}

TEST(BF16, RelativeErrorBound) {
  for (int i = -1000; i < 1000; ++i) {
    const float x = static_cast<float>(i) * 0.37f + 0.001f;
    EXPECT_LE(std::fabs(round_bf16(x) - x), std::fabs(x) * std::ldexp(1.0f, -8) * 1.0001f);
  }
}
