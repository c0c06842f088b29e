#pragma once
// The tokenizer's insides, shared by its rooms (internal to tokenizer/; bpe.hpp is the public
// face). The rooms follow Hugging Face's pipeline, one file per stage:
//   normalizer.cpp     normalizer steps (Prepend, Replace, NFC/NFD/NFKC/NFKD)
//   pre_tokenizer.cpp  pre-tokenizer steps (Split with the known regexes, ByteLevel, Metaspace)
//   model.cpp          the BPE model: vocabulary, merges, merging a word
//   decoder.cpp        decoder steps and BpeTokenizer::decode
//   bpe.cpp            loading tokenizer.json, added tokens, encode and the public accessors
//   text.cpp           UTF-8 and the string helpers every stage uses
#include <unicode/normalizer2.h>

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/tokenizer/bpe.hpp"

namespace longseq::tokenizer {

using json = nlohmann::json;

// ---- text.cpp -----------------------------------------------------------------------------------

void append_utf8(std::string& out, char32_t c);
// Decodes the code point at s[i] and advances i; false (i unchanged) on an invalid sequence
// (truncated, overlong, surrogate, beyond U+10FFFF): the regex classes and the vocabulary are
// defined on code points, so there is no faithful way to tokenize broken UTF-8.
bool next_code_point(std::string_view s, size_t& i, char32_t& c);
// Code points of `s` and the byte offset of each (plus s.size() at the end).
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<size_t> at;
};
/// The code points of `s`; throws core::Error naming `source` and the byte offset of invalid UTF-8.
CodePoints decode_utf8(std::string_view s, const std::string& source);
/// "U+00E9".
std::string code_point_name(char32_t c);
/// \s of the regexes: the White_Space property (ICU).
bool is_space(char32_t c);
void replace_all(std::string& s, std::string_view from, std::string_view to);
bool starts_with(std::string_view s, std::string_view p);

// ---- pre_tokenizer.cpp --------------------------------------------------------------------------

/// The pieces of `text` the regex matches (split_with_regex; `source` names it in errors).
std::vector<std::string> split_pieces(SplitRegex r, std::string_view text,
                                      const std::string& source);
// Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls, space, 0x7F-0xA0,
// 0xAD) take code points 256.. in byte order, so every byte is a visible vocabulary character.
struct ByteMap {
  std::array<std::string, 256> to_char;  // UTF-8 of the character standing for each byte
  std::array<int16_t, 324> to_byte;      // character -> byte (-1: not a byte character)
  ByteMap();
};
const ByteMap& byte_map();

// ---- configuration ------------------------------------------------------------------------------

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

// ---- the tokenizer ------------------------------------------------------------------------------

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

  void normalize(std::string& s) const;

  // Words of one normalized segment; `at_start`: the segment begins the input (Metaspace
  // prepend_scheme "first" prepends only there).
  std::vector<std::string> pre_tokenize(std::string_view segment, bool at_start) const;

  // BPE of one word: its characters (byte fallback / unk for those not in the vocabulary), then
  // the lowest-ranked adjacent pair merged until no pair has a merge. A heap of candidate pairs
  // with lazy invalidation keeps this O(n log n) in the word's length: words are whole documents
  // when no pre-tokenizer splits them (LLaMA-2).
  void bpe_word(const std::string& w, std::vector<uint32_t>& out) const;

  void encode_segment(std::string_view seg, bool at_start, std::vector<uint32_t>& out,
                      std::unordered_map<std::string, std::vector<uint32_t>>& cache) const;

  // ---- loading ----

  std::string str(const json& j, const char* key, const std::string& where) const;
  bool flag(const json& j, const char* key, bool def, const std::string& where) const;
  const json& obj(const json& j, const std::string& where) const;
  // A {"String": s} pattern (Replace, Split); regex patterns are refused by the caller's message.
  std::optional<std::string> string_pattern(const json& j, const std::string& where) const;
  Prepend prepend_scheme(const json& j, const std::string& where) const;
  std::string one_char(const json& j, const char* key, const std::string& where) const;

  void load_normalizer(const json& j, const std::string& where);

  void load_pre_tokenizer(const json& j, const std::string& where);

  void load_decoder(const json& j, const std::string& where);

  void set_token(uint32_t id, const std::string& s);

  uint32_t vocab_id(const std::string& s, const std::string& where) const;

  void load_model(const json& m);

  void load_added(const json& list);
};

}  // namespace longseq::tokenizer
