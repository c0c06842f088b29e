// core/checksum: CRC-32C against the published check value and RFC 3720 vectors, the hardware
// and table paths agreeing on every length and alignment, chaining, and the hex form.
#include "longseq/core/checksum.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

namespace lc = longseq::core;

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(lc::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(lc::crc32c_portable("123456789", 9), 0xE3069283u);
  EXPECT_EQ(lc::crc32c("", 0), 0u);
  // RFC 3720 B.4: 32 bytes of zeros, of 0xFF, and 0..31.
  std::vector<unsigned char> z(32, 0), ff(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(lc::crc32c(z.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(lc::crc32c(ff.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(lc::crc32c(inc.data(), 32), 0x46DD794Eu);
}

TEST(Crc32c, HardwareAndTableAgreeAndChain) {
  std::vector<unsigned char> buf(1000);
  uint32_t s = 12345;
  for (auto& b : buf) b = static_cast<unsigned char>((s = s * 1103515245u + 12345u) >> 24);
  for (size_t off = 0; off < 9; ++off)
    for (size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 500, 991}) {
      const uint32_t a = lc::crc32c(buf.data() + off, n),
                     b = lc::crc32c_portable(buf.data() + off, n);
      EXPECT_EQ(a, b) << off << " " << n;
      for (size_t m : {size_t{0}, n / 3, n})
        EXPECT_EQ(lc::crc32c(buf.data() + off + m, n - m, lc::crc32c(buf.data() + off, m)), a);
    }
  // One flipped bit changes it.
  const uint32_t before = lc::crc32c(buf.data(), buf.size());
  buf[517] ^= 0x10;
  EXPECT_NE(lc::crc32c(buf.data(), buf.size()), before);
}

TEST(Crc32c, HexRoundTripAndRefusals) {
  EXPECT_EQ(lc::crc32c_hex(0xE3069283u), "e3069283");
  EXPECT_EQ(lc::crc32c_hex(0x1u), "00000001");
  uint32_t v = 0;
  EXPECT_TRUE(lc::parse_crc32c_hex("e3069283", v));
  EXPECT_EQ(v, 0xE3069283u);
  for (const char* bad : {"", "e306928", "e30692830", "E3069283", "e306928g", "-3069283"})
    EXPECT_FALSE(lc::parse_crc32c_hex(bad, v)) << bad;
}

}  // namespace
