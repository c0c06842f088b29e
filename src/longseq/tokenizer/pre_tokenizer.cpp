// The pre-tokenizer stage: Split with the known regexes (hand-written scanners, no regex engine),
// ByteLevel (GPT-2's bytes_to_unicode) and Metaspace, in sequence.
#include <unicode/uchar.h>

#include "longseq/tokenizer/bpe_impl.hpp"

namespace longseq::tokenizer {

namespace {

// ---- Unicode classes of the regexes ------------------------------------------------------------

// \p{L}: general category L (Lu Ll Lt Lm Lo); \p{N}: N (Nd Nl No); \s: the White_Space property,
// which is what Oniguruma (Hugging Face) and Rust's regex (tiktoken) use for \s in Unicode mode.
bool is_letter(char32_t c) {
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_L_MASK) != 0;
}
bool is_number(char32_t c) {
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0;
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

}  // namespace

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

ByteMap::ByteMap() {
  to_byte.fill(-1);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const char32_t c = self ? static_cast<char32_t>(b) : next++;
    append_utf8(to_char[b], c);
    to_byte[c] = static_cast<int16_t>(b);
  }
}

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

void BpeTokenizer::Impl::load_pre_tokenizer(const json& j, const std::string& where) {
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
    bad(where, " type \"", type, "\" is not supported (Sequence, ByteLevel, Split, Metaspace are)");
  }
  pre.push_back(p);
}

std::vector<std::string> BpeTokenizer::Impl::pre_tokenize(std::string_view segment,
                                                          bool at_start) const {
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
