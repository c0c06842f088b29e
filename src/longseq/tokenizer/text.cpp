// UTF-8 decoding and encoding, and the string helpers of every stage.
#include <unicode/uchar.h>

#include <cstdio>

#include "longseq/tokenizer/bpe_impl.hpp"

namespace longseq::tokenizer {

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool next_code_point(std::string_view s, size_t& i, char32_t& c) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = b(i);
  size_t len;
  char32_t min;
  if (b0 < 0x80) {
    c = b0;
    ++i;
    return true;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    return false;
  }
  if (i + len > s.size()) return false;
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return false;
    c = (c << 6) | (b(i + k) & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
  i += len;
  return true;
}

CodePoints decode_utf8(std::string_view s, const std::string& source) {
  CodePoints r;
  r.cp.reserve(s.size());
  r.at.reserve(s.size() + 1);
  size_t i = 0;
  while (i < s.size()) {
    r.at.push_back(i);
    char32_t c;
    if (!next_code_point(s, i, c)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(s[i]));
      core::fail("tokenizer", source, ": the text is not valid UTF-8 at byte ", i, " (", hex,
                 "); BPE tokenizers are defined on Unicode text");
    }
    r.cp.push_back(c);
  }
  r.at.push_back(s.size());
  return r;
}

std::string code_point_name(char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
  return buf;
}

bool is_space(char32_t c) {
  return u_isUWhiteSpace(static_cast<UChar32>(c));
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (s.find(from) == std::string::npos) return;
  std::string r;
  r.reserve(s.size());
  size_t i = 0;
  for (size_t j; (j = s.find(from, i)) != std::string::npos; i = j + from.size()) {
    r.append(s, i, j - i);
    r.append(to);
  }
  r.append(s, i, std::string::npos);
  s = std::move(r);
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

}  // namespace longseq::tokenizer
