#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every tensor longseq
// writes into a safetensors file and of the JSON files of a checkpoint (docs/reliability.md).
// Chosen over CRC-32 because x86-64 computes it in hardware (SSE4.2 `crc32`, 8 bytes a cycle);
// builds without SSE4.2 use a slice-by-8 table, which gives the same values.
#include <cstddef>
#include <cstdint>
#include <string>

namespace longseq::core {

/// CRC-32C of `n` bytes, continuing from `crc` (the CRC of the bytes before; 0 to start), so
/// crc32c(b, m + n) == crc32c(b + m, n, crc32c(b, m)). crc32c("123456789", 9) == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

/// The same values from the portable table (what crc32c uses without SSE4.2); for tests.
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc = 0);

/// "e3069283": 8 lower-case hex digits, as checkpoints record checksums.
std::string crc32c_hex(uint32_t crc);

/// Parses crc32c_hex's form; false for anything else (length, digits).
bool parse_crc32c_hex(const std::string& s, uint32_t& crc);

}  // namespace longseq::core
