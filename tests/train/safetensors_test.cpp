// core/safetensors: round trip of every dtype with metadata, the byte layout the format specifies
// (8-byte length, JSON header padded to 8, data offsets), atomic replacement, malformed files.
#include "longseq/core/safetensors.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "longseq/core/error.hpp"

namespace {

namespace lc = longseq::core;

std::string tmp(const std::string& n) {
  return testing::TempDir() + "/longseq_st_" + std::to_string(::getpid()) + "_" + n;
}

TEST(SafeTensors, RoundTripAndByteLayout) {
  const std::string p = tmp("a.safetensors");
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 5.0f, 6.0f};
  std::vector<int32_t> b = {7, -8, 9};
  std::vector<lc::bf16> c = {lc::to_bf16(1.0f), lc::to_bf16(-0.5f)};
  lc::write_safetensors(p,
                        {{"model.w", lc::DType::f32, {2, 3}, a.data()},
                         {"ids", lc::DType::i32, {3}, b.data()},
                         {"h", lc::DType::bf16, {2}, c.data()}},
                        {{"format", "pt"}});
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
  const lc::SafeTensorsFile f = lc::read_safetensors(p);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  const auto& w = f.get("model.w", lc::DType::f32, {2, 3});
  EXPECT_EQ(std::memcmp(w.bytes.data(), a.data(), a.size() * 4), 0);
  EXPECT_EQ(std::memcmp(f.get("ids", lc::DType::i32).bytes.data(), b.data(), 12), 0);
  EXPECT_EQ(f.get("h", lc::DType::bf16).bytes.size(), 4u);
  // The raw layout: u64 header length, JSON, tensors back to back in the given order.
  const std::string raw = lc::read_file(p);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  const auto h = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(h["model.w"]["dtype"], "F32");
  EXPECT_EQ(h["model.w"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(h["ids"]["data_offsets"], nlohmann::json({24, 36}));
  EXPECT_EQ(raw.size(), 8 + n + 24 + 12 + 4);
  std::remove(p.c_str());
}

TEST(SafeTensors, RefusesMalformedFilesAndMismatches) {
  const std::string p = tmp("b.safetensors");
  std::vector<float> a(4, 1.0f);
  lc::write_safetensors(p, {{"x", lc::DType::f32, {4}, a.data()}});
  auto msg = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const lc::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const lc::SafeTensorsFile f = lc::read_safetensors(p);
  EXPECT_NE(msg([&] { f.get("y", lc::DType::f32); }).find("no tensor 'y'"), std::string::npos);
  EXPECT_NE(msg([&] { f.get("x", lc::DType::i32); }).find("tensor 'x' is F32, expected I32"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              f.get("x", lc::DType::f32, {2, 2});
            }).find("has shape [4,], expected [2,2,]"),
            std::string::npos);
  const std::string raw = lc::read_file(p);
  lc::write_file_atomic(p, raw.substr(0, raw.size() - 4));
  EXPECT_NE(msg([&] { lc::read_safetensors(p); }).find("data_offsets out of range"),
            std::string::npos);
  lc::write_file_atomic(p, std::string("\x05\0\0\0\0\0\0\0{oops", 13));
  EXPECT_NE(msg([&] { lc::read_safetensors(p); }).find("malformed header JSON"), std::string::npos);
  lc::write_file_atomic(p, "abc");
  EXPECT_NE(msg([&] { lc::read_safetensors(p); }).find("shorter than the 8-byte header length"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              lc::write_safetensors(
                  p, {{"x", lc::DType::f32, {1}, a.data()}, {"x", lc::DType::f32, {1}, a.data()}});
            }).find("duplicate tensor name 'x'"),
            std::string::npos);
  std::remove(p.c_str());
}

// A safetensors file from a header written by hand and `data_bytes` zero bytes of data.
void write_raw(const std::string& p, const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  out += header + std::string(data_bytes, '\0');
  lc::write_file_atomic(p, out);
}

std::string refusal(const std::string& p) {
  try {
    lc::read_safetensors(p);
  } catch (const lc::Error& e) {
    return e.what();
  }
  return "no error";
}

// issue 20: each of these was accepted, or refused by a raw JSON exception without the path.
TEST(SafeTensors, RefusesMalformedHeadersNamingFileAndTensor) {
  const std::string p = tmp("h.safetensors");
  struct Case {
    std::string header;
    size_t data;
    std::string what;
  };
  const std::vector<Case> cases = {
      {R"({"__metadata__": [1, 2], "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
       4, "__metadata__ is array, expected an object"},
      {R"({"__metadata__": "pt"})", 0, "__metadata__ is string"},
      {R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "y": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       8, "overlaps 'x'"},
      {R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
           "y": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
       12, "hole of 4 bytes before tensor 'y'"},
      {R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8,
       "4 bytes after the last tensor 'x' belong to no tensor"},
      {R"({"x": {"dtype": "F32", "shape": [65536, 65536, 4294967296], "data_offsets": [0, 0]}})", 0,
       "tensor 'x': shape [65536,65536,4294967296] overflows the element count"},
      {R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4000000000]}})", 4,
       "tensor 'x' data_offsets out of range: [0, 4000000000] in 4 data bytes"},
      {R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4,
       "tensor 'x': shape entry -1 is not a non-negative integer"},
      {R"({"x": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4, "shape entry 1.5"},
      {R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 4]}})", 4,
       "data_offsets entry -4"},
      {R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4,
       "tensor 'x': data_offsets missing or not [begin, end]"},
      {R"({"x": 7})", 0, "entry 'x' is number"},
      {R"({"x": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}})", 4,
       "dtype missing or not a string"},
      {R"({"x": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}})", 1,
       "unsupported dtype 'F8'"},
      {R"([1, 2])", 0, "header is not a JSON object"},
  };
  for (const Case& c : cases) {
    write_raw(p, c.header, c.data);
    const std::string m = refusal(p);
    EXPECT_NE(m.find("[safetensors] " + p + ": "), std::string::npos) << c.header << "\n" << m;
    EXPECT_NE(m.find(c.what), std::string::npos) << c.header << "\n" << m;
  }
  // A header length beyond the limit is refused before anything is parsed.
  std::string big(8, '\0');
  big[4] = 0x10;  // 2^36
  lc::write_file_atomic(p, big + std::string(16, ' '));
  EXPECT_NE(refusal(p).find("exceeds the file"), std::string::npos);
  // Zero-size tensors may share an offset with their neighbour.
  write_raw(p, R"({"e": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
                 "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
            4);
  EXPECT_EQ(lc::read_safetensors(p).tensors.size(), 2u);
  std::remove(p.c_str());
}

// issue 20: a flipped byte inside a tensor of a file longseq wrote was accepted silently.
TEST(SafeTensors, ChecksumsCatchAFlippedByteNamingTheTensor) {
  const std::string p = tmp("c.safetensors");
  std::vector<float> a(16, 1.0f), b(8, 2.0f);
  lc::write_safetensors(
      p, {{"first", lc::DType::f32, {16}, a.data()}, {"second", lc::DType::f32, {8}, b.data()}},
      {{"format", "pt"}});
  EXPECT_EQ(lc::verify_checksums(lc::read_safetensors(p)), 2);
  const std::string raw = lc::read_file(p);
  // Flip one bit in each byte position of the data section in turn (sampled): always caught.
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  for (size_t i = 8 + n; i < raw.size(); i += 7) {
    std::string bad = raw;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    lc::write_file_atomic(p, bad);
    const std::string tensor = i < 8 + n + 64 ? "first" : "second";
    const std::string m = refusal(p);
    EXPECT_NE(m.find(p + ": tensor '" + tensor + "' fails its CRC-32C check"), std::string::npos)
        << i << ": " << m;
  }
  // A file without checksums (another writer) is read as is.
  write_raw(p, R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4);
  EXPECT_EQ(lc::verify_checksums(lc::read_safetensors(p)), -1);
  // A tensor added without a checksum, or a checksum of a tensor not there, is refused.
  write_raw(p, R"({"__metadata__": {"longseq.crc32c": "{\"y\": \"00000000\"}"},
                 "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
            4);
  EXPECT_NE(refusal(p).find("a checksum names tensor 'y'"), std::string::npos) << refusal(p);
  write_raw(p, R"({"__metadata__": {"longseq.crc32c": "{}"},
                 "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
            4);
  EXPECT_NE(refusal(p).find("tensor 'x' has no checksum"), std::string::npos) << refusal(p);
  std::remove(p.c_str());
}

}  // namespace
