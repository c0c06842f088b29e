#include "longseq/tokenizer/bpe.hpp"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "longseq/core/error.hpp"
#include "longseq/core/io.hpp"

namespace longseq::tokenizer {

namespace {

using json = nlohmann::json;

// ---- UTF-8 -------------------------------------------------------------------------------------

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

// Decodes the code point at s[i] and advances i; false (i unchanged) on an invalid sequence
// (truncated, overlong, surrogate, beyond U+10FFFF): the regex classes and the vocabulary are
// defined on code points, so there is no faithful way to tokenize broken UTF-8.
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

// Code points of `s` and the byte offset of each (plus s.size() at the end).
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<size_t> at;
};

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

// ---- Unicode classes of the regexes ------------------------------------------------------------

// \p{L}: general category L (Lu Ll Lt Lm Lo); \p{N}: N (Nd Nl No); \s: the White_Space property,
// which is what Oniguruma (Hugging Face) and Rust's regex (tiktoken) use for \s in Unicode mode.
bool is_letter(char32_t c) {
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_L_MASK) != 0;
}
bool is_number(char32_t c) {
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0;
}
bool is_space(char32_t c) {
  return u_isUWhiteSpace(static_cast<UChar32>(c));
}
bool is_crlf(char32_t c) {
  return c == U'\r' || c == U'\n';
}
// [^\s\p{L}\p{N}]
bool is_other(char32_t c) {
  return !is_space(c) && !is_letter(c) && !is_number(c);
}

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The regex scanners. Each returns the length in code points of the match starting at i (the
// regex engines try the alternatives left to right at each position and take the first that
// matches, with greedy quantifiers backtracking). Every code point is whitespace, a letter, a
// number or "other", and each class starts some alternative, so a match always exists and the
// matches tile the text (Split behavior Isolated then gives exactly the matches).
class Scanner {
 public:
  explicit Scanner(const std::vector<char32_t>& c) : c_(c), n_(c.size()) {}

  size_t gpt2(size_t i) const {
    if (size_t k = contraction(i, false)) return k;
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: the optional space is taken only when the
    // class follows it (otherwise the regex backtracks and the space is not a class member).
    for (bool (*cls)(char32_t) : {is_letter, is_number, is_other}) {
      const size_t j = i + (c_[i] == U' ' && i + 1 < n_ && cls(c_[i + 1]) ? 1 : 0);
      if (cls(c_[j])) return run(j, cls) - i;
    }
    return spaces(i);
  }

  // cl100k (LLaMA-3) with max_digits 3; Qwen2 with max_digits 1.
  size_t cl100k(size_t i, size_t max_digits) const {
    if (size_t k = contraction(i, true)) return k;
    // `[^\r\n\p{L}\p{N}]?\p{L}+`: one optional non-letter, non-digit, non-newline (a space, a
    // tab, punctuation) glued to the letters after it.
    if (!is_crlf(c_[i]) && !is_letter(c_[i]) && !is_number(c_[i]) && i + 1 < n_ &&
        is_letter(c_[i + 1]))
      return run(i + 1, is_letter) - i;
    if (is_letter(c_[i])) return run(i, is_letter) - i;
    // `\p{N}{1,3}` (or `\p{N}`)
    if (is_number(c_[i])) {
      size_t e = i;
      while (e < n_ && e - i < max_digits && is_number(c_[e])) ++e;
      return e - i;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    const size_t j = i + (c_[i] == U' ' && i + 1 < n_ && is_other(c_[i + 1]) ? 1 : 0);
    if (is_other(c_[j])) return run(run(j, is_other), is_crlf) - i;
    // `\s*[\r\n]+`: \s* first takes the whole whitespace run and gives back until a newline
    // follows, so the match ends just after the last \r or \n of the run.
    if (is_space(c_[i])) {
      const size_t e = run(i, is_space);
      for (size_t k = e; k > i; --k)
        if (is_crlf(c_[k - 1])) return k - i;
    }
    return spaces(i);
  }

 private:
  size_t run(size_t j, bool (*cls)(char32_t)) const {
    while (j < n_ && cls(c_[j])) ++j;
    return j;
  }

  // `'s|'t|'re|'ve|'m|'ll|'d`, case-insensitive in cl100k's `(?i:...)`. Unicode simple case
  // folding adds one more member: U+017F (long s) folds to 's'; no other character folds to
  // t, r, e, v, m, l or d.
  size_t contraction(size_t i, bool ci) const {
    if (c_[i] != U'\'') return 0;
    const auto is = [&](size_t k, char32_t lower) {
      if (k >= n_) return false;
      const char32_t x = c_[k];
      if (x == lower) return true;
      if (!ci) return false;
      return x == lower - 32 || (lower == U's' && x == 0x017F);
    };
    if (is(i + 1, U's') || is(i + 1, U't') || is(i + 1, U'm') || is(i + 1, U'd')) return 2;
    if ((is(i + 1, U'r') && is(i + 2, U'e')) || (is(i + 1, U'v') && is(i + 2, U'e')) ||
        (is(i + 1, U'l') && is(i + 2, U'l')))
      return 3;
    return 0;
  }

  // `\s+(?!\S)|\s+`: a whitespace run, less its last character when a non-space follows (that
  // character then prefixes the next word, e.g. " the"), unless the run is a single character.
  size_t spaces(size_t i) const {
    LONGSEQ_CHECK(is_space(c_[i]));  // every other class matched an earlier alternative
    const size_t e = run(i, is_space);
    if (e == n_ || e - i == 1) return e - i;
    return e - 1 - i;
  }

  const std::vector<char32_t>& c_;
  size_t n_;
};

std::vector<std::string> split_pieces(SplitRegex r, std::string_view text,
                                      const std::string& source) {
  const CodePoints cps = decode_utf8(text, source);
  const Scanner s(cps.cp);
  std::vector<std::string> out;
  for (size_t i = 0; i < cps.cp.size();) {
    const size_t len = r == SplitRegex::kGpt2     ? s.gpt2(i)
                       : r == SplitRegex::kCl100k ? s.cl100k(i, 3)
                                                  : s.cl100k(i, 1);
    out.emplace_back(text.substr(cps.at[i], cps.at[i + len] - cps.at[i]));
    i += len;
  }
  return out;
}

// ---- GPT-2 bytes_to_unicode
// ----------------------------------------------------------------------

// Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls, space, 0x7F-0xA0,
// 0xAD) take code points 256.. in byte order, so every byte is a visible vocabulary character.
struct ByteMap {
  std::array<std::string, 256> to_char;  // UTF-8 of the character standing for each byte
  std::array<int16_t, 324> to_byte;      // character -> byte (-1: not a byte character)
  ByteMap() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const char32_t c = self ? static_cast<char32_t>(b) : next++;
      append_utf8(to_char[b], c);
      to_byte[c] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// ---- configuration
// ---------------------------------------------------------------------------------

enum class Prepend { kAlways, kFirst, kNever };

struct NormStep {
  enum Kind { kPrepend, kReplace, kUnicode } kind;
  std::string a, b;                           // kPrepend: a; kReplace: a -> b
  const icu::Normalizer2* unicode = nullptr;  // kUnicode: NFC/NFD/NFKC/NFKD
};

struct PreStep {
  enum Kind { kSplit, kByteLevel, kMetaspace } kind;
  SplitRegex regex = SplitRegex::kGpt2;  // kSplit
  bool add_prefix_space = false;         // kByteLevel
  bool use_regex = false;                // kByteLevel
  std::string replacement;               // kMetaspace
  Prepend prepend = Prepend::kAlways;    // kMetaspace
  bool split = true;                     // kMetaspace
};

struct DecStep {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string a, b;  // kReplace: a -> b; kStrip: a = the character; kMetaspace: a = replacement
  size_t start = 0, stop = 0;  // kStrip
  bool strip_first = false;    // kMetaspace: drop the prepended replacement of the first token
};

struct Merge {
  uint32_t rank;
  uint32_t id;
};

// Literal matcher for the added tokens of one kind (raw or normalized): leftmost, then longest,
// as Hugging Face's Aho-Corasick (MatchKind::LeftmostLongest). Candidates are bucketed by first
// byte, so text without those bytes costs one table lookup per byte.
struct AddedMatcher {
  struct Entry {
    std::string text;
    uint32_t id;
    bool lstrip, rstrip;
  };
  std::vector<Entry> entries;
  std::array<std::vector<uint32_t>, 256> by_first;

  void add(Entry e) {
    by_first[static_cast<unsigned char>(e.text[0])].push_back(
        static_cast<uint32_t>(entries.size()));
    entries.push_back(std::move(e));
  }
  bool empty() const { return entries.empty(); }
};

// A stretch of text, or an added token's id.
struct Chunk {
  bool token = false;
  uint32_t id = 0;
  std::string_view text;
  size_t offset = 0;  // of text within the string that was split
};

// Code point ending just before byte `e` (s is valid UTF-8).
size_t prev_cp_start(std::string_view s, size_t e) {
  size_t b = e - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return b;
}

std::vector<Chunk> split_added(const AddedMatcher& m, std::string_view s) {
  std::vector<Chunk> out;
  if (m.empty()) {
    if (!s.empty()) out.push_back({false, 0, s, 0});
    return out;
  }
  size_t plain = 0, p = 0;
  while (p < s.size()) {
    int best = -1;
    size_t best_len = 0;
    for (uint32_t k : m.by_first[static_cast<unsigned char>(s[p])]) {
      const std::string& t = m.entries[k].text;
      if (t.size() > best_len && s.substr(p, t.size()) == t)
        best = static_cast<int>(k), best_len = t.size();
    }
    if (best < 0) {
      ++p;
      continue;
    }
    const AddedMatcher::Entry& e = m.entries[best];
    size_t b = p, end = p + best_len;
    // lstrip / rstrip: the token swallows the whitespace beside it.
    while (e.lstrip && b > plain) {
      const size_t q = prev_cp_start(s, b);
      size_t i = q;
      char32_t c;
      if (!next_code_point(s, i, c) || !is_space(c)) break;
      b = q;
    }
    while (e.rstrip && end < s.size()) {
      size_t i = end;
      char32_t c;
      if (!next_code_point(s, i, c) || !is_space(c)) break;
      end = i;
    }
    if (b > plain) out.push_back({false, 0, s.substr(plain, b - plain), plain});
    out.push_back({true, e.id, {}, b});
    p = plain = end;
  }
  if (plain < s.size()) out.push_back({false, 0, s.substr(plain), plain});
  return out;
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

}  // namespace

// ---- the tokenizer
// ---------------------------------------------------------------------------------

struct BpeTokenizer::Impl {
  std::string source;
  std::vector<NormStep> normalizer;
  std::vector<PreStep> pre;
  bool has_decoder = false;
  std::vector<DecStep> decoder;

  std::unordered_map<std::string, uint32_t> vocab;
  std::vector<std::string> tokens;  // by id; "" with has[id] false for ids no token uses
  std::vector<uint8_t> has;
  std::unordered_map<uint64_t, Merge> merges;  // (left id << 32 | right id) -> rank, merged id
  std::optional<uint32_t> unk;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  std::array<int64_t, 256> byte_token;  // id of <0xNN> (-1: absent)

  std::unordered_map<std::string, uint32_t> added;  // content -> id
  AddedMatcher added_raw, added_normalized;

  [[noreturn]] void bad(const auto&... parts) const {
    core::fail("tokenizer", source, ": ", parts...);
  }

  void normalize(std::string& s) const {
    for (const NormStep& n : normalizer) {
      switch (n.kind) {
        case NormStep::kPrepend:
          if (!s.empty()) s.insert(0, n.a);
          break;
        case NormStep::kReplace:
          replace_all(s, n.a, n.b);
          break;
        case NormStep::kUnicode: {
          UErrorCode st = U_ZERO_ERROR;
          const icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
          if (n.unicode->isNormalized(u, st) && U_SUCCESS(st)) break;
          st = U_ZERO_ERROR;
          const icu::UnicodeString v = n.unicode->normalize(u, st);
          if (U_FAILURE(st)) bad("normalizer ", n.a, " failed: ", u_errorName(st));
          s.clear();
          v.toUTF8String(s);
          break;
        }
      }
    }
  }

  // Words of one normalized segment; `at_start`: the segment begins the input (Metaspace
  // prepend_scheme "first" prepends only there).
  std::vector<std::string> pre_tokenize(std::string_view segment, bool at_start) const {
    struct Piece {
      std::string text;
      bool at_start;
    };
    std::vector<Piece> pieces{{std::string(segment), at_start}};
    for (const PreStep& p : pre) {
      std::vector<Piece> next;
      for (Piece& w : pieces) {
        switch (p.kind) {
          case PreStep::kSplit: {
            bool first = w.at_start;
            for (std::string& s : split_pieces(p.regex, w.text, source)) {
              next.push_back({std::move(s), first});
              first = false;
            }
            break;
          }
          case PreStep::kByteLevel: {
            if (p.add_prefix_space && !starts_with(w.text, " ")) w.text.insert(0, " ");
            std::vector<std::string> parts;
            if (p.use_regex)
              parts = split_pieces(SplitRegex::kGpt2, w.text, source);
            else
              parts.push_back(std::move(w.text));
            bool first = w.at_start;
            for (const std::string& s : parts) {
              std::string mapped;
              mapped.reserve(2 * s.size());
              for (unsigned char ch : s) mapped += byte_map().to_char[ch];
              next.push_back({std::move(mapped), first});
              first = false;
            }
            break;
          }
          case PreStep::kMetaspace: {
            replace_all(w.text, " ", p.replacement);
            const bool prepend =
                p.prepend == Prepend::kAlways || (p.prepend == Prepend::kFirst && w.at_start);
            if (prepend && !starts_with(w.text, p.replacement)) w.text.insert(0, p.replacement);
            if (!p.split) {
              next.push_back(std::move(w));
              break;
            }
            // Split behavior MergedWithNext: each replacement starts a new word.
            bool first = w.at_start;
            size_t b = 0;
            for (size_t j = w.text.find(p.replacement, 1); j != std::string::npos;
                 j = w.text.find(p.replacement, j + 1)) {
              next.push_back({w.text.substr(b, j - b), first});
              first = false;
              b = j;
            }
            next.push_back({w.text.substr(b), first});
            break;
          }
        }
      }
      pieces.clear();
      for (Piece& w : next)
        if (!w.text.empty()) pieces.push_back(std::move(w));
    }
    std::vector<std::string> out;
    out.reserve(pieces.size());
    for (Piece& w : pieces)
      if (!w.text.empty()) out.push_back(std::move(w.text));
    return out;
  }

  // BPE of one word: its characters (byte fallback / unk for those not in the vocabulary), then
  // the lowest-ranked adjacent pair merged until no pair has a merge. A heap of candidate pairs
  // with lazy invalidation keeps this O(n log n) in the word's length: words are whole documents
  // when no pre-tokenizer splits them (LLaMA-2).
  void bpe_word(const std::string& w, std::vector<uint32_t>& out) const {
    if (ignore_merges) {
      // LLaMA-3: a word that is itself a vocabulary entry is emitted whole, whatever the merges.
      if (auto it = vocab.find(w); it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    struct Sym {
      uint32_t id;
      int32_t prev, next;
      bool alive;
    };
    std::vector<Sym> sym;
    sym.reserve(w.size());
    bool last_unk = false;
    std::string ch;
    for (size_t i = 0; i < w.size();) {
      const size_t b = i;
      char32_t c;
      if (!next_code_point(w, i, c)) bad("invalid UTF-8 in a word (internal)");
      ch.assign(w, b, i - b);
      const auto push = [&](uint32_t id) {
        const int32_t k = static_cast<int32_t>(sym.size());
        sym.push_back({id, k - 1, -1, true});
        if (k > 0) sym[k - 1].next = k;
      };
      if (auto it = vocab.find(ch); it != vocab.end()) {
        push(it->second);
        last_unk = false;
        continue;
      }
      if (byte_fallback) {
        bool all = true;
        for (unsigned char x : ch) all = all && byte_token[x] >= 0;
        if (all) {
          for (unsigned char x : ch) push(static_cast<uint32_t>(byte_token[x]));
          last_unk = false;
          continue;
        }
      }
      if (!unk)
        bad("character ", code_point_name(c), " ('", ch,
            "') is not in the vocabulary and the model has ",
            byte_fallback ? "byte_fallback but not all of its <0xNN> byte tokens"
                          : "no byte_fallback",
            " and no unk_token: it cannot be encoded");
      if (!(fuse_unk && last_unk)) push(*unk);
      last_unk = true;
    }
    struct Cand {
      uint32_t rank;
      int32_t pos;
      uint32_t id;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    const auto consider = [&](int32_t pos) {
      const int32_t nx = sym[pos].next;
      if (nx < 0) return;
      const auto it = merges.find(uint64_t{sym[pos].id} << 32 | sym[nx].id);
      if (it != merges.end()) heap.push({it->second.rank, pos, it->second.id});
    };
    for (int32_t k = 0; k + 1 < static_cast<int32_t>(sym.size()); ++k) consider(k);
    while (!heap.empty()) {
      const Cand top = heap.top();
      heap.pop();
      Sym& s = sym[top.pos];
      if (!s.alive || s.next < 0) continue;
      // Stale entry: the pair at pos changed since it was pushed (a neighbour merged).
      const auto it = merges.find(uint64_t{s.id} << 32 | sym[s.next].id);
      if (it == merges.end() || it->second.rank != top.rank) continue;
      Sym& r = sym[s.next];
      s.id = top.id;
      r.alive = false;
      s.next = r.next;
      if (r.next >= 0) sym[r.next].prev = top.pos;
      if (s.prev >= 0) consider(s.prev);
      consider(top.pos);
    }
    for (const Sym& s : sym)
      if (s.alive) out.push_back(s.id);
  }

  void encode_segment(std::string_view seg, bool at_start, std::vector<uint32_t>& out,
                      std::unordered_map<std::string, std::vector<uint32_t>>& cache) const {
    std::string norm(seg);
    normalize(norm);
    for (const Chunk& c : split_added(added_normalized, norm)) {
      if (c.token) {
        out.push_back(c.id);
        continue;
      }
      for (const std::string& w : pre_tokenize(c.text, at_start && c.offset == 0)) {
        // Long words (whole documents without pre-tokenization) are not worth caching.
        if (w.size() > 128) {
          bpe_word(w, out);
          continue;
        }
        auto it = cache.find(w);
        if (it == cache.end()) {
          std::vector<uint32_t> ids;
          bpe_word(w, ids);
          if (cache.size() > (1u << 20)) cache.clear();
          it = cache.emplace(w, std::move(ids)).first;
        }
        out.insert(out.end(), it->second.begin(), it->second.end());
      }
    }
  }

  // ---- loading ----

  std::string str(const json& j, const char* key, const std::string& where) const {
    if (!j.contains(key)) bad(where, " has no \"", key, "\"");
    if (!j[key].is_string()) bad(where, ".", key, " is ", j[key].dump(), ", not a string");
    return j[key].get<std::string>();
  }
  bool flag(const json& j, const char* key, bool def, const std::string& where) const {
    if (!j.contains(key) || j[key].is_null()) return def;
    if (!j[key].is_boolean()) bad(where, ".", key, " is ", j[key].dump(), ", not true/false");
    return j[key].get<bool>();
  }
  const json& obj(const json& j, const std::string& where) const {
    if (!j.is_object()) bad(where, " is ", j.dump().substr(0, 200), ", not an object");
    return j;
  }
  // A {"String": s} pattern (Replace, Split); regex patterns are refused by the caller's message.
  std::optional<std::string> string_pattern(const json& j, const std::string& where) const {
    if (!j.contains("pattern") || !j["pattern"].is_object())
      bad(where, " has no \"pattern\" object");
    const json& p = j["pattern"];
    if (p.contains("String") && p["String"].is_string()) return p["String"].get<std::string>();
    return std::nullopt;
  }
  Prepend prepend_scheme(const json& j, const std::string& where) const {
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      const std::string s = str(j, "prepend_scheme", where);
      if (s == "always") return Prepend::kAlways;
      if (s == "first") return Prepend::kFirst;
      if (s == "never") return Prepend::kNever;
      bad(where, ".prepend_scheme \"", s, "\" is not always|first|never");
    }
    // Files written before prepend_scheme existed say add_prefix_space.
    return flag(j, "add_prefix_space", true, where) ? Prepend::kAlways : Prepend::kNever;
  }
  std::string one_char(const json& j, const char* key, const std::string& where) const {
    const std::string s = str(j, key, where);
    size_t i = 0;
    char32_t c;
    if (s.empty() || !next_code_point(s, i, c) || i != s.size())
      bad(where, ".", key, " \"", s, "\" is not one character");
    return s;
  }

  void load_normalizer(const json& j, const std::string& where) {
    if (j.is_null()) return;
    obj(j, where);
    const std::string type = str(j, "type", where);
    if (type == "Sequence") {
      if (!j.contains("normalizers") || !j["normalizers"].is_array())
        bad(where, " (Sequence) has no \"normalizers\" array");
      for (size_t i = 0; i < j["normalizers"].size(); ++i)
        load_normalizer(j["normalizers"][i], where + ".normalizers[" + std::to_string(i) + "]");
    } else if (type == "Prepend") {
      normalizer.push_back({NormStep::kPrepend, str(j, "prepend", where), "", nullptr});
    } else if (type == "Replace") {
      const auto pat = string_pattern(j, where);
      if (!pat || pat->empty())
        bad(where, " Replace pattern ", j["pattern"].dump(),
            " is not supported (only a non-empty {\"String\": ...})");
      normalizer.push_back({NormStep::kReplace, *pat, str(j, "content", where), nullptr});
    } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
      UErrorCode st = U_ZERO_ERROR;
      const icu::Normalizer2* n = type == "NFC"    ? icu::Normalizer2::getNFCInstance(st)
                                  : type == "NFD"  ? icu::Normalizer2::getNFDInstance(st)
                                  : type == "NFKC" ? icu::Normalizer2::getNFKCInstance(st)
                                                   : icu::Normalizer2::getNFKDInstance(st);
      if (U_FAILURE(st) || !n)
        bad(where, " ", type, ": ICU has no such normalizer (", u_errorName(st), ")");
      normalizer.push_back({NormStep::kUnicode, type, "", n});
    } else {
      bad(where, " type \"", type,
          "\" is not supported (Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD are)");
    }
  }

  void load_pre_tokenizer(const json& j, const std::string& where) {
    if (j.is_null()) return;
    obj(j, where);
    const std::string type = str(j, "type", where);
    PreStep p;
    if (type == "Sequence") {
      if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
        bad(where, " (Sequence) has no \"pretokenizers\" array");
      for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
        load_pre_tokenizer(j["pretokenizers"][i],
                           where + ".pretokenizers[" + std::to_string(i) + "]");
      return;
    } else if (type == "ByteLevel") {
      p.kind = PreStep::kByteLevel;
      p.add_prefix_space = flag(j, "add_prefix_space", true, where);
      p.use_regex = flag(j, "use_regex", true, where);
    } else if (type == "Split") {
      p.kind = PreStep::kSplit;
      if (!j.contains("pattern") || !j["pattern"].is_object())
        bad(where, " (Split) has no \"pattern\" object");
      const json& pat = j["pattern"];
      if (!pat.contains("Regex") || !pat["Regex"].is_string())
        bad(where, " Split pattern ", pat.dump(),
            " is not supported (only the known {\"Regex\": ...} patterns)");
      const std::string re = pat["Regex"].get<std::string>();
      const auto known = find_split_regex(re);
      if (!known)
        bad(where, " Split regex \"", re, "\" is not supported: the known patterns are GPT-2's \"",
            kGpt2Pattern, "\", LLaMA-3's \"", kCl100kPattern, "\" and Qwen2's \"", kQwen2Pattern,
            "\"");
      p.regex = *known;
      const std::string behavior = str(j, "behavior", where);
      if (behavior != "Isolated")
        bad(where, " Split behavior \"", behavior, "\" is not supported (only Isolated)");
      if (flag(j, "invert", false, where)) bad(where, " Split invert true is not supported");
    } else if (type == "Metaspace") {
      p.kind = PreStep::kMetaspace;
      p.replacement = one_char(j, "replacement", where);
      p.prepend = prepend_scheme(j, where);
      p.split = flag(j, "split", true, where);
    } else {
      bad(where, " type \"", type,
          "\" is not supported (Sequence, ByteLevel, Split, Metaspace are)");
    }
    pre.push_back(p);
  }

  void load_decoder(const json& j, const std::string& where) {
    if (j.is_null()) return;
    obj(j, where);
    has_decoder = true;
    const std::string type = str(j, "type", where);
    DecStep d;
    if (type == "Sequence") {
      if (!j.contains("decoders") || !j["decoders"].is_array())
        bad(where, " (Sequence) has no \"decoders\" array");
      for (size_t i = 0; i < j["decoders"].size(); ++i)
        load_decoder(j["decoders"][i], where + ".decoders[" + std::to_string(i) + "]");
      return;
    } else if (type == "ByteLevel") {
      d.kind = DecStep::kByteLevel;
    } else if (type == "Replace") {
      d.kind = DecStep::kReplace;
      const auto pat = string_pattern(j, where);
      if (!pat || pat->empty())
        bad(where, " Replace pattern ", j["pattern"].dump(),
            " is not supported (only a non-empty {\"String\": ...})");
      d.a = *pat;
      d.b = str(j, "content", where);
    } else if (type == "ByteFallback") {
      d.kind = DecStep::kByteFallback;
    } else if (type == "Fuse") {
      d.kind = DecStep::kFuse;
    } else if (type == "Strip") {
      d.kind = DecStep::kStrip;
      d.a = one_char(j, "content", where);
      for (const char* k : {"start", "stop"}) {
        if (!j.contains(k) || !j[k].is_number_unsigned())
          bad(where, " (Strip) has no unsigned \"", k, "\"");
        (std::string_view(k) == "start" ? d.start : d.stop) = j[k].get<size_t>();
      }
    } else if (type == "Metaspace") {
      d.kind = DecStep::kMetaspace;
      d.a = one_char(j, "replacement", where);
      d.strip_first = prepend_scheme(j, where) != Prepend::kNever;
    } else {
      bad(where, " type \"", type,
          "\" is not supported (Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace "
          "are)");
    }
    decoder.push_back(d);
  }

  void set_token(uint32_t id, const std::string& s) {
    if (id >= tokens.size()) {
      tokens.resize(static_cast<size_t>(id) + 1);
      has.resize(static_cast<size_t>(id) + 1, 0);
    }
    tokens[id] = s;
    has[id] = 1;
  }

  uint32_t vocab_id(const std::string& s, const std::string& where) const {
    const auto it = vocab.find(s);
    if (it == vocab.end()) bad(where, " names \"", s, "\", which is not in model.vocab");
    return it->second;
  }

  void load_model(const json& m) {
    obj(m, "model");
    if (m.contains("type")) {
      const std::string type = str(m, "type", "model");
      if (type != "BPE") bad("model.type \"", type, "\" is not supported (only BPE)");
    } else if (!m.contains("merges")) {
      bad("model has no \"type\" and no \"merges\": not a BPE model");
    }
    if (m.contains("dropout") && !m["dropout"].is_null() &&
        !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0))
      bad("model.dropout ", m["dropout"].dump(),
          " is not supported (BPE dropout makes encoding random)");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(k) && !m[k].is_null() &&
          !(m[k].is_string() && m[k].get<std::string>().empty()))
        bad("model.", k, " ", m[k].dump(), " is not supported");
    fuse_unk = flag(m, "fuse_unk", false, "model");
    byte_fallback = flag(m, "byte_fallback", false, "model");
    ignore_merges = flag(m, "ignore_merges", false, "model");

    if (!m.contains("vocab") || !m["vocab"].is_object())
      bad("model.vocab is missing or not an object");
    std::unordered_map<uint32_t, std::string> by_id;
    vocab.reserve(m["vocab"].size());
    for (const auto& [tok, v] : m["vocab"].items()) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() >= (uint64_t{1} << 31))
        bad("model.vocab[\"", tok, "\"] = ", v.dump(), " is not an id in [0, 2^31)");
      const uint32_t id = v.get<uint32_t>();
      if (auto [it, fresh] = by_id.emplace(id, tok); !fresh)
        bad("model.vocab gives id ", id, " to both \"", it->second, "\" and \"", tok, "\"");
      vocab.emplace(tok, id);
      set_token(id, tok);
    }
    byte_token.fill(-1);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      if (auto it = vocab.find(name); it != vocab.end()) byte_token[b] = it->second;
    }
    if (m.contains("unk_token") && !m["unk_token"].is_null())
      unk = vocab_id(str(m, "unk_token", "model"), "model.unk_token");

    if (!m.contains("merges") || !m["merges"].is_array())
      bad("model.merges is missing or not an array");
    const json& ms = m["merges"];
    merges.reserve(ms.size());
    for (size_t r = 0; r < ms.size(); ++r) {
      const json& e = ms[r];
      std::string a, b;
      // Two spellings exist: "a b" (older files, tokens never contain a space) and ["a", "b"]
      // (tokenizers >= 0.20, which allows spaces in tokens).
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
            s.find(' ', sp + 1) != std::string::npos)
          bad("model.merges[", r, "] \"", s, "\" is not two tokens separated by one space");
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>(), b = e[1].get<std::string>();
      } else {
        bad("model.merges[", r, "] ", e.dump(), " is neither \"a b\" nor [\"a\", \"b\"]");
      }
      const std::string where = "model.merges[" + std::to_string(r) + "]";
      const uint32_t ia = vocab_id(a, where), ib = vocab_id(b, where), im = vocab_id(a + b, where);
      // A repeated pair keeps its first (lowest) rank, as a rank map built in order would.
      merges.emplace(uint64_t{ia} << 32 | ib, Merge{static_cast<uint32_t>(r), im});
    }
  }

  void load_added(const json& list) {
    if (list.is_null()) return;
    if (!list.is_array()) bad("added_tokens is not an array");
    std::vector<json> normalized_later;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      const json& t = obj(list[i], where);
      const std::string content = str(t, "content", where);
      if (content.empty()) bad(where, " has empty content");
      if (!t.contains("id") || !t["id"].is_number_unsigned() ||
          t["id"].get<uint64_t>() >= (uint64_t{1} << 31))
        bad(where, " (\"", content, "\") has no id in [0, 2^31)");
      const uint32_t id = t["id"].get<uint32_t>();
      if (flag(t, "single_word", false, where))
        bad(where, " (\"", content, "\") single_word true is not supported");
      if (auto it = vocab.find(content); it != vocab.end() && it->second != id)
        bad(where, " (\"", content, "\") has id ", id, " but model.vocab gives it ", it->second);
      if (id < has.size() && has[id] && tokens[id] != content)
        bad(where, " (\"", content, "\") has id ", id, ", already the token \"", tokens[id], "\"");
      if (!added.emplace(content, id).second)
        bad(where, " repeats the added token \"", content, "\"");
      set_token(id, content);
      const bool special = flag(t, "special", false, where);
      // Hugging Face's default: special tokens match the raw text, others the normalized text.
      const bool normalized = flag(t, "normalized", !special, where);
      AddedMatcher::Entry e{content, id, flag(t, "lstrip", false, where),
                            flag(t, "rstrip", false, where)};
      if (normalized) {
        // Matched in normalized text, so Hugging Face matches the content's normalized form.
        normalize(e.text);
        if (e.text.empty()) bad(where, " (\"", content, "\") normalizes to nothing");
        added_normalized.add(std::move(e));
      } else {
        added_raw.add(std::move(e));
      }
    }
  }
};

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  std::ifstream probe(path, std::ios::binary);
  core::require(static_cast<bool>(probe), "tokenizer", path,
                ": cannot open (--tokenizer wants a Hugging Face tokenizer.json)");
  return parse(core::read_file(path), path);
}

BpeTokenizer BpeTokenizer::parse(std::string_view json_text, const std::string& source) {
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    impl->bad("malformed JSON: ", e.what());
  }
  impl->obj(j, "the top level");
  try {
    if (!j.contains("model")) impl->bad("no \"model\": not a tokenizer.json");
    impl->load_normalizer(j.value("normalizer", json()), "normalizer");
    impl->load_pre_tokenizer(j.value("pre_tokenizer", json()), "pre_tokenizer");
    impl->load_decoder(j.value("decoder", json()), "decoder");
    impl->load_model(j["model"]);
    impl->load_added(j.value("added_tokens", json()));
  } catch (const json::exception& e) {
    // The explicit checks above name the field; this catches what they do not foresee.
    impl->bad("unexpected JSON content: ", e.what());
  }
  if (impl->tokens.empty()) impl->bad("the vocabulary is empty");
  return BpeTokenizer(std::move(impl));
}

std::vector<uint32_t> BpeTokenizer::encode(std::string_view text) const {
  const Impl& m = *impl_;
  // Validated once up front so every later step may assume well-formed UTF-8.
  (void)decode_utf8(text, m.source + " (input)").cp.size();
  std::vector<uint32_t> out;
  std::unordered_map<std::string, std::vector<uint32_t>> cache;
  for (const Chunk& c : split_added(m.added_raw, text)) {
    if (c.token)
      out.push_back(c.id);
    else
      m.encode_segment(c.text, c.offset == 0, out, cache);
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<uint32_t>& ids) const {
  const Impl& m = *impl_;
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (uint32_t id : ids) toks.push_back(token(id));
  if (!m.has_decoder) {
    // Hugging Face's behaviour without a decoder: the tokens joined by spaces.
    std::string s;
    for (size_t i = 0; i < toks.size(); ++i) s += (i ? " " : "") + toks[i];
    return s;
  }
  for (const DecStep& d : m.decoder) {
    switch (d.kind) {
      case DecStep::kByteLevel:
        // Per token: all characters byte characters -> those bytes; otherwise (an added token
        // such as "\n" or a non-byte-level string) the token's own text.
        for (std::string& t : toks) {
          std::string bytes;
          size_t i = 0;
          bool all = true;
          while (i < t.size() && all) {
            char32_t c;
            all = next_code_point(t, i, c) && c < byte_map().to_byte.size() &&
                  byte_map().to_byte[c] >= 0;
            if (all) bytes.push_back(static_cast<char>(byte_map().to_byte[c]));
          }
          if (all) t = std::move(bytes);
        }
        break;
      case DecStep::kReplace:
        for (std::string& t : toks) replace_all(t, d.a, d.b);
        break;
      case DecStep::kByteFallback: {
        // Runs of <0xNN> tokens become their bytes, kept as one token (a character split across
        // byte tokens is whole again once the run is joined).
        std::vector<std::string> next;
        std::string run;
        bool in_run = false;
        for (std::string& t : toks) {
          unsigned v = 0;
          const bool byte = t.size() == 6 && starts_with(t, "<0x") && t[5] == '>' &&
                            std::isxdigit(static_cast<unsigned char>(t[3])) &&
                            std::isxdigit(static_cast<unsigned char>(t[4])) &&
                            std::sscanf(t.c_str() + 3, "%2x", &v) == 1;
          if (byte) {
            run.push_back(static_cast<char>(v));
            in_run = true;
            continue;
          }
          if (in_run) next.push_back(std::move(run)), run.clear(), in_run = false;
          next.push_back(std::move(t));
        }
        if (in_run) next.push_back(std::move(run));
        toks = std::move(next);
        break;
      }
      case DecStep::kFuse: {
        std::string all;
        for (const std::string& t : toks) all += t;
        toks.assign(1, std::move(all));
        break;
      }
      case DecStep::kStrip:
        for (std::string& t : toks) {
          size_t b = 0, e = t.size();
          for (size_t k = 0; k < d.start && starts_with(std::string_view(t).substr(b, e - b), d.a);
               ++k)
            b += d.a.size();
          for (size_t k = 0;
               k < d.stop && e - b >= d.a.size() && t.compare(e - d.a.size(), d.a.size(), d.a) == 0;
               ++k)
            e -= d.a.size();
          t = t.substr(b, e - b);
        }
        break;
      case DecStep::kMetaspace:
        // The replacement becomes a space, except the one prepended at encoding: the first
        // character of the first token. (Hugging Face drops every replacement of the first
        // token; dropping only the leading one keeps "▁▁" at the start as the space it was.)
        for (size_t i = 0; i < toks.size(); ++i) {
          if (i == 0 && d.strip_first && starts_with(toks[i], d.a)) toks[i].erase(0, d.a.size());
          replace_all(toks[i], d.a, " ");
        }
        break;
    }
  }
  std::string s;
  for (const std::string& t : toks) s += t;
  return s;
}

int64_t BpeTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->tokens.size());
}

std::optional<uint32_t> BpeTokenizer::token_id(std::string_view token) const {
  const std::string t(token);
  if (auto it = impl_->added.find(t); it != impl_->added.end()) return it->second;
  if (auto it = impl_->vocab.find(t); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

const std::string& BpeTokenizer::token(uint32_t id) const {
  if (id >= impl_->tokens.size() || !impl_->has[id])
    impl_->bad("no token has id ", id, " (vocabulary size ", vocab_size(), ")");
  return impl_->tokens[id];
}

uint32_t BpeTokenizer::eos_id(std::string_view name) const {
  if (!name.empty()) {
    const auto id = token_id(name);
    if (!id) impl_->bad("end-of-text token \"", name, "\" (--eot) is not in the tokenizer");
    return *id;
  }
  for (const char* c : kEosCandidates)
    if (const auto id = token_id(c)) return *id;
  impl_->bad(
      "none of the end-of-text tokens <|endoftext|>, <|end_of_text|>, </s>, <|im_end|> is in "
      "the tokenizer; name one with --eot");
}

const std::string& BpeTokenizer::source() const {
  return impl_->source;
}

std::string_view split_regex_pattern(SplitRegex r) {
  switch (r) {
    case SplitRegex::kGpt2:
      return kGpt2Pattern;
    case SplitRegex::kCl100k:
      return kCl100kPattern;
    case SplitRegex::kQwen2:
      return kQwen2Pattern;
  }
  return {};
}

std::optional<SplitRegex> find_split_regex(std::string_view pattern) {
  for (SplitRegex r : {SplitRegex::kGpt2, SplitRegex::kCl100k, SplitRegex::kQwen2})
    if (pattern == split_regex_pattern(r)) return r;
  // GPT-2's pattern as some Split pre-tokenizers spell it, without the final `|\s+`: the only
  // text that alternative matches is a lone whitespace character before a non-space, which
  // Isolated then keeps as an unmatched piece of its own, so the pieces are the same.
  if (pattern == kGpt2Pattern.substr(0, kGpt2Pattern.size() - 4)) return SplitRegex::kGpt2;
  return std::nullopt;
}

std::vector<std::string> split_with_regex(SplitRegex r, std::string_view text) {
  return split_pieces(r, text, "split_with_regex");
}

}  // namespace longseq::tokenizer
