// core/safetensors: round trip of every dtype with metadata, the byte layout the format specifies
// (8-byte length, JSON header padded to 8, data offsets), atomic replacement, malformed files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "longseq/core/error.hpp"
#include "longseq/core/safetensors.hpp"

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
  EXPECT_NE(msg([&] { f.get("x", lc::DType::f32, {2, 2}); }).find("has shape [4,], expected [2,2,]"),
            std::string::npos);
  const std::string raw = lc::read_file(p);
  lc::write_file_atomic(p, raw.substr(0, raw.size() - 4));
  EXPECT_NE(msg([&] { lc::read_safetensors(p); }).find("data_offsets out of range"), std::string::npos);
  lc::write_file_atomic(p, std::string("\x05\0\0\0\0\0\0\0{oops", 13));
  EXPECT_NE(msg([&] { lc::read_safetensors(p); }).find("malformed header JSON"), std::string::npos);
  lc::write_file_atomic(p, "abc");
  EXPECT_NE(msg([&] { lc::read_safetensors(p); }).find("shorter than the 8-byte header length"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              lc::write_safetensors(p, {{"x", lc::DType::f32, {1}, a.data()},
                                        {"x", lc::DType::f32, {1}, a.data()}});
            }).find("duplicate tensor name 'x'"),
            std::string::npos);
  std::remove(p.c_str());
}

}  // namespace
