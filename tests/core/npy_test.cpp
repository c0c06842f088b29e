#include "longseq/core/npy.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"

using namespace longseq::core;
namespace fs = std::filesystem;

namespace {

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("longseq_npy_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A .npy file written byte by byte, so malformed variants are easy to make.
  std::string raw(const std::string& name, const std::string& dict, const std::string& data,
                  int major = 1, int pad_to = 64) {
    std::string header = dict;
    const size_t prefix = major == 1 ? 10 : 12;
    while ((prefix + header.size() + 1) % pad_to) header += ' ';
    header += '\n';
    std::string out("\x93NUMPY", 6);
    out += static_cast<char>(major);
    out += '\0';
    const uint32_t len = static_cast<uint32_t>(header.size());
    out += static_cast<char>(len & 0xff);
    out += static_cast<char>((len >> 8) & 0xff);
    if (major != 1) {
      out += static_cast<char>((len >> 16) & 0xff);
      out += static_cast<char>(len >> 24);
    }
    out += header + data;
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << out;
    return p;
  }

  // Expects read_npy to throw a core::Error whose message names the file and contains `what`.
  void expect_refused(const std::string& p, const std::string& what) {
    try {
      read_npy(p);
      FAIL() << "expected " << p << " to be refused (" << what << ")";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("[npy]"), std::string::npos) << msg;
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  }

  fs::path dir_;
};

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

}  // namespace

TEST_F(NpyTest, RoundTripEveryDtype) {
  Tensor<float> f(Shape{2, 3, 4});
  for (int i = 0; i < 24; ++i) f[i] = i * 0.5f - 3;
  write_npy(path("f.npy"), f);
  Tensor<float> g = read_npy_f32(path("f.npy"), 3);
  ASSERT_EQ(g.shape(), f.shape());
  for (int i = 0; i < 24; ++i) EXPECT_EQ(g[i], f[i]);

  const std::vector<double> d = {1.5, -2.25};
  write_npy(path("d.npy"), DType::f64, {2}, d.data());
  const std::vector<int32_t> i32 = {1, -7, 9};
  write_npy(path("i.npy"), DType::i32, {3}, i32.data());
  const std::vector<int64_t> i64 = {1ll << 40};
  write_npy(path("l.npy"), DType::i64, {1, 1}, i64.data());
  const std::vector<uint8_t> u8 = {0, 1, 255, 7};
  write_npy(path("u.npy"), DType::u8, {2, 2}, u8.data());
  write_npy(path("b.npy"), DType::boolean, {4}, u8.data());
  write_npy(path("scalar.npy"), DType::f64, {}, d.data());
  write_npy(path("empty.npy"), DType::f32, {0, 5}, nullptr);

  EXPECT_EQ(read_npy(path("d.npy")).dtype, DType::f64);
  auto a = read_npy(path("i.npy"));
  EXPECT_EQ(a.dtype, DType::i32);
  EXPECT_EQ(a.shape, std::vector<int64_t>{3});
  EXPECT_EQ(std::memcmp(a.bytes.data(), i32.data(), 12), 0);
  EXPECT_EQ(read_npy(path("l.npy")).shape, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(read_npy(path("u.npy")).dtype, DType::u8);
  EXPECT_EQ(read_npy(path("b.npy")).dtype, DType::boolean);
  EXPECT_TRUE(read_npy(path("scalar.npy")).shape.empty());
  EXPECT_EQ(read_npy(path("empty.npy")).numel(), 0);
}

TEST_F(NpyTest, ReadsVersion2AndDoubleQuotes) {
  auto p = raw("v2.npy", "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,), }",
               floats({1, 2}), 2);
  auto a = read_npy(p);
  EXPECT_EQ(a.shape, std::vector<int64_t>{2});
}

TEST_F(NpyTest, RefusesFortranOrder) {
  expect_refused(
      raw("f.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", floats({1, 2})),
      "Fortran");
}

TEST_F(NpyTest, RefusesBigEndian) {
  expect_refused(
      raw("be.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", floats({1, 2})),
      "big-endian");
}

TEST_F(NpyTest, RefusesTruncatedData) {
  expect_refused(
      raw("t.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", floats({1, 2})),
      "truncated data");
}

TEST_F(NpyTest, RefusesTrailingData) {
  expect_refused(
      raw("x.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", floats({1, 2})),
      "trailing data");
}

TEST_F(NpyTest, RefusesTruncatedHeader) {
  const std::string p = path("th.npy");
  std::string bytes("\x93NUMPY\x01\x00\xff\x00{'descr'", 18);
  std::ofstream(p, std::ios::binary) << bytes;
  expect_refused(p, "truncated header");
}

TEST_F(NpyTest, RefusesBadMagicAndShortFile) {
  const std::string p = path("m.npy");
  std::ofstream(p, std::ios::binary) << "PK\x03\x04 this is a zip file, not npy";
  expect_refused(p, "bad magic");
  const std::string q = path("s.npy");
  std::ofstream(q, std::ios::binary) << "\x93NUM";
  expect_refused(q, "preamble");
}

TEST_F(NpyTest, RefusesBadHeaders) {
  expect_refused(raw("h1.npy", "{'descr': '<f4', 'fortran_order': False}", ""), "needs 'descr'");
  expect_refused(
      raw("h2.npy", "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", floats({1})),
      "fortran_order must be True or False");
  expect_refused(raw("h3.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", ""),
                 "non-negative integers");
  expect_refused(
      raw("h4.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", floats({1})),
      "unknown key");
  expect_refused(raw("h5.npy", "not a dict", ""), "bad header");
}

TEST_F(NpyTest, RefusesUnsupportedDtypes) {
  expect_refused(
      raw("c.npy", "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", floats({1, 2})),
      "unsupported dtype '<c8'");
  expect_refused(
      raw("h.npy", "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", floats({1})),
      "unsupported dtype '<f2'");
  expect_refused(
      raw("o.npy", "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", floats({1, 2})),
      "unsupported dtype");
}

TEST_F(NpyTest, RefusesWrongDtypeForUse) {
  const std::vector<double> d = {1.0, 2.0};
  write_npy(path("d.npy"), DType::f64, {2}, d.data());
  try {
    read_npy_f32(path("d.npy"), -1, "--q");
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("f64"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--q"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected f32"), std::string::npos) << msg;
  }
  EXPECT_THROW(read_npy_expect(path("d.npy"), DType::f64, 3, "--k"), Error);
}

TEST_F(NpyTest, MissingFileNamesPath) {
  expect_refused(path("nope.npy"), "cannot open");
}

TEST_F(NpyTest, SixDimensionsRoundTrip) {
  std::vector<int64_t> shape(6, 1);
  const float x = 3.0f;
  write_npy(path("small.npy"), DType::f32, shape, &x);
  auto a = read_npy(path("small.npy"));
  EXPECT_EQ(a.shape.size(), 6u);
  expect_refused(
      raw("seven.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1), }",
          floats({1})),
      "at most 6");
}

// issue 20: a shape whose element count overflows int64 wrapped to 0 and was accepted with no
// data, so `longseq attention` ran on until killed.
TEST_F(NpyTest, RefusesShapeWhoseElementCountOverflows) {
  expect_refused(
      raw("ovf.npy",
          "{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 65536, 4294967296), }", ""),
      "overflows the element count");
  // The byte count overflows even where the element count does not (2^62 floats).
  expect_refused(
      raw("ovf2.npy",
          "{'descr': '<f4', 'fortran_order': False, 'shape': (2147483648, 2147483648), }", ""),
      "overflows");
  // A huge but representable shape is a size mismatch, named as such.
  expect_refused(
      raw("big.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 65536), }",
          floats({1})),
      "truncated data");
}

TEST_F(NpyTest, RefusesDimensionsNotSeparatedByCommas) {
  expect_refused(
      raw("sep.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1 2), }", floats({1, 2})),
      "expected ',' or ')'");
}
