#include "longseq/core/npy.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "longseq/core/checked.hpp"
#include "longseq/core/error.hpp"

namespace longseq::core {

namespace {

constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  fail("npy", path, ": ", what);
}

struct DescrInfo {
  DType dtype;
  const char* descr;
};
constexpr DescrInfo kDescrs[] = {
    {DType::f32, "<f4"}, {DType::f64, "<f8"}, {DType::i32, "<i4"},
    {DType::i64, "<i8"}, {DType::u8, "|u1"},  {DType::boolean, "|b1"},
};

const char* descr_of(DType t) {
  for (const auto& d : kDescrs)
    if (d.dtype == t) return d.descr;
  return nullptr;
}

// Minimal parser for the header's Python dict literal: {'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 4), }. Only the three keys numpy writes are accepted.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, const std::string& s) : path_(path), s_(s) {}

  void parse(std::string& descr, bool& fortran, std::vector<int64_t>& shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    skip_ws();
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      const std::string key = parse_string();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        descr = parse_string();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = parse_bool();
        have_fortran = true;
      } else if (key == "shape") {
        shape = parse_tuple();
        have_shape = true;
      } else {
        bad(path_, "bad header: unknown key '" + key + "'");
      }
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip_ws();
      if (peek() != '}')
        bad(path_, "bad header: expected ',' or '}' at offset " + std::to_string(i_));
    }
    if (!have_descr || !have_fortran || !have_shape)
      bad(path_, "bad header: needs 'descr', 'fortran_order' and 'shape' (header: " + s_ + ")");
  }

 private:
  char peek() const {
    if (i_ >= s_.size()) bad(path_, "bad header: ends early (header: " + s_ + ")");
    return s_[i_];
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  void expect(char c) {
    if (peek() != c)
      bad(path_, std::string("bad header: expected '") + c + "' at offset " + std::to_string(i_) +
                     " (header: " + s_ + ")");
    ++i_;
  }
  std::string parse_string() {
    const char q = peek();
    if (q != '\'' && q != '"')
      bad(path_, "bad header: expected a quoted string at offset " + std::to_string(i_));
    ++i_;
    const size_t end = s_.find(q, i_);
    if (end == std::string::npos) bad(path_, "bad header: unterminated string");
    std::string out = s_.substr(i_, end - i_);
    i_ = end + 1;
    return out;
  }
  bool parse_bool() {
    if (s_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    bad(path_, "bad header: fortran_order must be True or False");
  }
  std::vector<int64_t> parse_tuple() {
    std::vector<int64_t> out;
    expect('(');
    while (true) {
      skip_ws();
      if (peek() == ')') {
        ++i_;
        break;
      }
      if (peek() < '0' || peek() > '9')
        bad(path_,
            "bad header: shape must be a tuple of non-negative integers (header: " + s_ + ")");
      int64_t v = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        if (v > (int64_t{1} << 48)) bad(path_, "bad header: dimension too large");
        v = v * 10 + (s_[i_++] - '0');
      }
      out.push_back(v);
      skip_ws();
      if (peek() == ',')
        ++i_;
      else if (peek() != ')')
        bad(path_, "bad header: expected ',' or ')' after a dimension at offset " +
                       std::to_string(i_) + " (header: " + s_ + ")");
    }
    if (out.size() > static_cast<size_t>(kMaxDims))
      bad(path_, "shape has " + std::to_string(out.size()) + " dimensions, at most " +
                     std::to_string(kMaxDims) + " are supported");
    return out;
  }

  const std::string& path_;
  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) bad(path, std::string("cannot open: ") + std::strerror(errno));
  f.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);

  unsigned char pre[8];
  if (file_size < 10 || !f.read(reinterpret_cast<char*>(pre), 8))
    bad(path, "not a .npy file: shorter than the 10-byte preamble (" + std::to_string(file_size) +
                  " bytes)");
  if (std::memcmp(pre, kMagic, 6) != 0) bad(path, "not a .npy file: bad magic string");
  const int major = pre[6];
  if (major < 1 || major > 3)
    bad(path,
        "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(pre[7]));
  uint64_t header_len = 0;
  uint64_t prefix = 0;
  if (major == 1) {
    unsigned char l[2];
    if (!f.read(reinterpret_cast<char*>(l), 2)) bad(path, "truncated header length");
    header_len = l[0] | (l[1] << 8);
    prefix = 10;
  } else {
    unsigned char l[4];
    if (!f.read(reinterpret_cast<char*>(l), 4)) bad(path, "truncated header length");
    header_len =
        uint64_t(l[0]) | (uint64_t(l[1]) << 8) | (uint64_t(l[2]) << 16) | (uint64_t(l[3]) << 24);
    prefix = 12;
  }
  if (prefix + header_len > file_size)
    bad(path, "truncated header: declares " + std::to_string(header_len) + " bytes, file has " +
                  std::to_string(file_size - prefix));
  std::string header(header_len, '\0');
  if (!f.read(header.data(), static_cast<std::streamsize>(header_len)))
    bad(path, "truncated header");
  while (!header.empty() &&
         (header.back() == '\n' || header.back() == ' ' || header.back() == '\0'))
    header.pop_back();

  std::string descr;
  bool fortran = false;
  NpyArray out;
  HeaderParser(path, header).parse(descr, fortran, out.shape);
  if (fortran)
    bad(path, "Fortran-order arrays are not supported; save with C order (np.ascontiguousarray)");
  if (!descr.empty() && descr[0] == '>')
    bad(path, "big-endian dtype '" + descr + "' is not supported; convert to little-endian ('<')");
  bool known = false;
  for (const auto& d : kDescrs) {
    // '=' (native) is little-endian on every platform longseq runs on.
    if (descr == d.descr || (descr.size() == 3 && descr[0] == '=' &&
                             descr.substr(1) == std::string(d.descr).substr(1))) {
      out.dtype = d.dtype;
      known = true;
    }
  }
  if (!known)
    bad(path, "unsupported dtype '" + descr + "' (supported: <f4, <f8, <i4, <i8, |u1, |b1)");

  // The element and byte counts are checked for overflow: a wrapped product would make a huge
  // declared shape look like a small (even empty) one and be accepted.
  int64_t want_bytes = 0;
  if (!shape_bytes(out.shape, static_cast<int64_t>(dtype_size(out.dtype)), want_bytes))
    bad(path, "shape " + Shape(out.shape.begin(), out.shape.end()).str() + " of " +
                  std::string(dtype_name(out.dtype)) +
                  " overflows the element count (header: " + header + ")");
  const uint64_t want = static_cast<uint64_t>(want_bytes);
  const uint64_t have = file_size - prefix - header_len;
  if (have < want)
    bad(path, "truncated data: shape " + Shape(out.shape.begin(), out.shape.end()).str() + " of " +
                  std::string(dtype_name(out.dtype)) + " needs " + std::to_string(want) +
                  " bytes, file has " + std::to_string(have));
  if (have > want)
    bad(path, "trailing data: shape needs " + std::to_string(want) + " bytes, file has " +
                  std::to_string(have));
  out.bytes.resize(want);
  if (want &&
      !f.read(reinterpret_cast<char*>(out.bytes.data()), static_cast<std::streamsize>(want)))
    bad(path, "read error in data section");
  return out;
}

NpyArray read_npy_expect(const std::string& path, DType want, int expect_rank,
                         const std::string& what) {
  NpyArray a = read_npy(path);
  const std::string use = what.empty() ? "" : " for " + what;
  if (a.dtype != want)
    bad(path, "dtype " + std::string(dtype_name(a.dtype)) + use + ", expected " +
                  std::string(dtype_name(want)));
  if (expect_rank >= 0 && static_cast<int>(a.shape.size()) != expect_rank)
    bad(path, "shape " + Shape(a.shape.begin(), a.shape.end()).str() + use + " has rank " +
                  std::to_string(a.shape.size()) + ", expected rank " +
                  std::to_string(expect_rank));
  return a;
}

Tensor<float> read_npy_f32(const std::string& path, int expect_rank, const std::string& what) {
  NpyArray a = read_npy_expect(path, DType::f32, expect_rank, what);
  Tensor<float> t(Shape(a.shape.begin(), a.shape.end()));
  if (!a.bytes.empty()) std::memcpy(t.data(), a.bytes.data(), a.bytes.size());
  return t;
}

void write_npy(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
               const void* data) {
  const char* descr = descr_of(dtype);
  if (!descr) fail("npy", path, ": cannot write dtype ", dtype_name(dtype));
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i)
    dict +=
        std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  dict += "), }";
  // Total preamble + header is padded to a multiple of 64 and ends with '\n'.
  size_t prefix = 10;
  size_t total = ((prefix + dict.size() + 1 + 63) / 64) * 64;
  bool v2 = total - prefix > 65535;
  if (v2) {
    prefix = 12;
    total = ((prefix + dict.size() + 1 + 63) / 64) * 64;
  }
  const size_t header_len = total - prefix;
  dict.append(header_len - dict.size() - 1, ' ');
  dict += '\n';

  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("npy", path, ": cannot open for writing: ", std::strerror(errno));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> guard(f, &std::fclose);
  unsigned char pre[12];
  std::memcpy(pre, kMagic, 6);
  pre[6] = v2 ? 2 : 1;
  pre[7] = 0;
  if (v2) {
    for (int i = 0; i < 4; ++i) pre[8 + i] = static_cast<unsigned char>(header_len >> (8 * i));
  } else {
    pre[8] = static_cast<unsigned char>(header_len & 0xff);
    pre[9] = static_cast<unsigned char>(header_len >> 8);
  }
  bool ok = std::fwrite(pre, 1, prefix, f) == prefix &&
            std::fwrite(dict.data(), 1, dict.size(), f) == dict.size() &&
            (bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes);
  ok = (std::fflush(f) == 0) && ok;
  guard.reset();
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("npy", path, ": write failed: ", std::strerror(errno));
  }
}

}  // namespace longseq::core
