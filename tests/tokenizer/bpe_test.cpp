// The Hugging Face tokenizer.json BPE (train/bpe.hpp): hand-built byte-level and
// SentencePiece-style tokenizers whose expected ids are worked out by hand below, the regex
// pre-tokenizers on their tricky cases, round trips on the KJV corpus and random UTF-8, every
// refusal by its message, and `longseq tokenize --tokenizer` end to end.
//
// No Python oracle exists here (no `tokenizers` package), so every expectation is derived by hand
// from the Hugging Face semantics (documented in bpe.hpp) rather than by running the reference.
#include "longseq/tokenizer/bpe.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/train/data.hpp"
#include "train/train_test_util.hpp"

namespace {

namespace tr = longseq::train;
namespace tk = longseq::tokenizer;
using json = nlohmann::json;
using longseq::core::Error;
using Ids = std::vector<uint32_t>;
using Strs = std::vector<std::string>;

std::string tmp(const std::string& name) {
  return longseq::testing::temp_path("bpe", name);
}
using longseq::testing::error_of;

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// GPT-2's bytes_to_unicode, written out from its definition: the bytes '!'..'~', '¡'..'¬' and
// '®'..'ÿ' stand for themselves; the others, in order, take U+0100, U+0101, ...
std::string byte_char(int b) {
  const bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  if (self) return utf8(static_cast<char32_t>(b));
  int k = 0;
  for (int x = 0; x < b; ++x)
    if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++k;
  return utf8(static_cast<char32_t>(0x100 + k));
}

// Byte-level fixture (GPT-2 style). Ids 0..255 are the byte characters, id = byte value, so
// 'a' = 97, ' ' (Ġ) = 32. Merges, rank = position, merged ids from 256:
//   0 "Ġ t" -> Ġt 256   1 "h e" -> he 257   2 "Ġt he" -> Ġthe 258   3 "b c" -> bc 259
//   4 "a b" -> ab 260   5 "Ã ©" -> Ã© 261 (é = C3 A9)   6 "Ġ Ġ" -> ĠĠ 262   7 "1 2" -> 12 263
// "Ġxyz" 264 is in the vocabulary but no merge builds it (only ignore_merges emits it);
// <|endoftext|> 265 is an added token. Vocabulary 266.
json byte_level_fixture() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const Strs merged = {"Ġt", "he", "Ġthe", "bc", "ab", "Ã©", "ĠĠ", "12", "Ġxyz"};
  for (size_t i = 0; i < merged.size(); ++i) vocab[merged[i]] = 256 + i;
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 265},
             {"content", "<|endoftext|>"},
             {"single_word", false},
             {"lstrip", false},
             {"rstrip", false},
             {"normalized", false},
             {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "ByteLevel"},
            {"add_prefix_space", false},
            {"trim_offsets", true},
            {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", {"Ġ t", "h e", "Ġt he", "b c", "a b", "Ã ©", "Ġ Ġ", "1 2"}}}}};
}

// The same vocabulary with LLaMA-3's pipeline: Split(cl100k regex, Isolated) then ByteLevel
// without its own regex, and ignore_merges.
json llama3_fixture() {
  json j = byte_level_fixture();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", std::string(tk::split_regex_pattern(tk::SplitRegex::kCl100k))}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"},
         {"add_prefix_space", false},
         {"trim_offsets", true},
         {"use_regex", false}}}}};
  j["model"]["ignore_merges"] = true;
  return j;
}

// SentencePiece-style fixture (LLaMA-2): <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258 (so byte
// b is 3 + b), ▁ 259, a 260, b 261, c 262, e 263, h 264, t 265, then merged: ▁t 266, he 267,
// ▁the 268, bc 269, ab 270. Merges as pairs, rank = position:
//   0 [▁,t]  1 [h,e]  2 [▁t,he]  3 [b,c]  4 [a,b]
json sentencepiece_fixture() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  const Strs rest = {"▁", "a", "b", "c", "e", "h", "t", "▁t", "he", "▁the", "bc", "ab"};
  for (size_t i = 0; i < rest.size(); ++i) vocab[rest[i]] = 259 + i;
  json added = json::array();
  for (auto [id, s] : {std::pair{0, "<unk>"}, {1, "<s>"}, {2, "</s>"}})
    added.push_back({{"id", id},
                     {"content", s},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "▁"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", "<unk>"},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", json::array({json::array({"▁", "t"}), json::array({"h", "e"}),
                                    json::array({"▁t", "he"}), json::array({"b", "c"}),
                                    json::array({"a", "b"})})}}}};
}

tk::BpeTokenizer make(const json& j) {
  return tk::BpeTokenizer::parse(j.dump(), "fixture.json");
}

std::string kjv() {
  return longseq::core::read_file(std::string(LONGSEQ_SOURCE_DIR) + "/data/kjv-genesis-exodus.txt");
}

// Random valid UTF-8: ASCII (letters, digits, punctuation, spaces, tabs, newlines) most of the
// time, then Latin-1, combining marks, CJK, emoji, other whitespace (NBSP, ideographic space),
// and anything up to U+10FFFF except surrogates and `exclude`.
std::string random_utf8(std::mt19937& rng, size_t len, char32_t exclude) {
  static const char32_t picks[] = {' ',     ' ',    '\n',  '\t',  '\r',   '\'',   '1',
                                   '9',     'a',    'Z',   's',   '!',    0xA0,   0x3000,
                                   0x2028,  0x85,   0xE9,  0x301, 0x65E5, 0x672C, 0x1F642,
                                   0x1F468, 0x200D, 0x17F, 0x660, 0xFFFD};
  std::string s;
  for (size_t i = 0; i < len; ++i) {
    char32_t c;
    do {
      const int kind = static_cast<int>(rng() % 4);
      if (kind == 0)
        c = 0x20 + rng() % 95;
      else if (kind == 1)
        c = picks[rng() % (sizeof picks / sizeof picks[0])];
      else if (kind == 2)
        c = rng() % 0x800;
      else
        c = rng() % 0x110000;
    } while ((c >= 0xD800 && c <= 0xDFFF) || c == exclude || c == 0);
    s += utf8(c);
  }
  return s;
}

// ---- the regex pre-tokenizers -----------------------------------------------------------------

Strs split(tk::SplitRegex r, const std::string& s) {
  return tk::split_with_regex(r, s);
}

TEST(BpeRegex, KnownPatternsAreRecognisedExactly) {
  const std::string gpt2 =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  EXPECT_EQ(tk::find_split_regex(gpt2), tk::SplitRegex::kGpt2);
  EXPECT_EQ(
      tk::find_split_regex(
          R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
      tk::SplitRegex::kCl100k);
  EXPECT_EQ(
      tk::find_split_regex(
          R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
      tk::SplitRegex::kQwen2);
  // GPT-2's without the final |\s+ splits identically (a lone space is then an unmatched piece).
  EXPECT_EQ(tk::find_split_regex(gpt2.substr(0, gpt2.size() - 4)), tk::SplitRegex::kGpt2);
  EXPECT_EQ(tk::find_split_regex(gpt2 + "|x"), std::nullopt);
  EXPECT_EQ(tk::find_split_regex(R"(\w+)"), std::nullopt);
}

TEST(BpeRegex, Gpt2) {
  const auto g = tk::SplitRegex::kGpt2;
  // Contractions are case-sensitive; a space joins the letters, digits or punctuation after it;
  // a whitespace run gives its last space to the next word; "\n\n" before a letter: the first
  // "\n" by \s+(?!\S), the second alone by \s+.
  EXPECT_EQ(split(g, "Hello world's  123 foo!!\n\nbar"),
            (Strs{"Hello", " world", "'s", " ", " 123", " foo", "!!", "\n", "\n", "bar"}));
  EXPECT_EQ(split(g, "I'M we'll they're"), (Strs{"I", "'", "M", " we", "'ll", " they", "'re"}));
  EXPECT_EQ(split(g, "1234567"), (Strs{"1234567"}));
  EXPECT_EQ(split(g, "\thello  "), (Strs{"\t", "hello", "  "}));
  // é and 日本 are letters; the emoji is a symbol (So), so it joins the following '!'.
  EXPECT_EQ(split(g, "café 日本語 🙂! x"), (Strs{"café", " 日本語", " 🙂!", " x"}));
  EXPECT_EQ(split(g, ""), Strs{});
}

TEST(BpeRegex, Llama3Cl100k) {
  const auto l = tk::SplitRegex::kCl100k;
  // Contractions case-insensitive; digits in groups of at most three, never with a space;
  // "  123": the first space by \s+(?!\S) (the run less its last), the second by \s+ alone.
  EXPECT_EQ(split(l, "Hello world's  1234567 I'M"),
            (Strs{"Hello", " world", "'s", " ", " ", "123", "456", "7", " I", "'M"}));
  // Punctuation takes the newlines after it; a whitespace run ending in newlines is one piece;
  // "\n\n  b": the newlines, then "  " split as above, then " b".
  EXPECT_EQ(split(l, "foo!!\n\nbar\n\n  b"), (Strs{"foo", "!!\n\n", "bar", "\n\n", " ", " b"}));
  EXPECT_EQ(split(l, "a  \n b"), (Strs{"a", "  \n", " b"}));
  // One non-letter, non-digit, non-newline character (tab, ',') glues to the letters after it;
  // " $x": the space cannot (a second such character follows), so " $" is punctuation.
  EXPECT_EQ(split(l, "\thello,world $x"), (Strs{"\thello", ",world", " $", "x"}));
  EXPECT_EQ(split(l, "café 日本語 🙂! x"), (Strs{"café", " 日本語", " 🙂!", " x"}));
  // Arabic-Indic digits are \p{N} too.
  EXPECT_EQ(split(l, "٠١٢٣"), (Strs{"٠١٢", "٣"}));
  EXPECT_EQ(split(l, "x\r\n"), (Strs{"x", "\r\n"}));
  // (?i:...) uses Unicode case folding, under which U+017F (long s) is an 's'.
  EXPECT_EQ(split(l, "I'\u017F"), (Strs{"I", "'\u017F"}));
}

TEST(BpeRegex, Qwen2DigitsOneByOne) {
  EXPECT_EQ(split(tk::SplitRegex::kQwen2, "abc 1234"), (Strs{"abc", " ", "1", "2", "3", "4"}));
}

TEST(BpeRegex, PiecesTileRandomText) {
  std::mt19937 rng(7);
  for (auto r : {tk::SplitRegex::kGpt2, tk::SplitRegex::kCl100k, tk::SplitRegex::kQwen2}) {
    for (int i = 0; i < 300; ++i) {
      const std::string s = random_utf8(rng, rng() % 40, 0);
      std::string joined;
      for (const std::string& p : split(r, s)) {
        EXPECT_FALSE(p.empty());
        joined += p;
      }
      EXPECT_EQ(joined, s);
    }
  }
}

// ---- byte-level BPE ----------------------------------------------------------------------------

TEST(BpeByteLevel, HandWorkedIds) {
  const tk::BpeTokenizer t = make(byte_level_fixture());
  EXPECT_EQ(t.vocab_size(), 266);
  // "the": t h e -> (h,e) rank 1 -> t he; no merge (t,he) -> [116, 257].
  EXPECT_EQ(t.encode("the"), (Ids{116, 257}));
  // " the": Ġ t h e -> (Ġ,t) rank 0 -> Ġt h e -> (h,e) rank 1 -> Ġt he -> rank 2 -> Ġthe.
  EXPECT_EQ(t.encode(" the"), (Ids{258}));
  // " cat": no merge applies: Ġ c a t.
  EXPECT_EQ(t.encode(" cat"), (Ids{32, 99, 97, 116}));
  // "café": é is the bytes C3 A9, characters Ã ©, merged by rank 5.
  EXPECT_EQ(t.encode("café"), (Ids{99, 97, 102, 261}));
  // "a   b": pieces "a", "  ", " b" -> ĠĠ is one merge.
  EXPECT_EQ(t.encode("a   b"), (Ids{97, 262, 32, 98}));
  // Newline byte 0x0A is the character Ċ, id 10.
  EXPECT_EQ(t.encode("\n"), (Ids{10}));
  EXPECT_EQ(t.decode({116, 257, 258, 32, 99, 97, 116}), "the the cat");
  EXPECT_EQ(t.decode({99, 97, 102, 261, 10}), "café\n");
}

TEST(BpeByteLevel, MergesApplyInRankOrderNotLeftToRight) {
  const tk::BpeTokenizer t = make(byte_level_fixture());
  // "abc": pairs (a,b) rank 4 and (b,c) rank 3. By rank, (b,c) merges first: a bc -> [97, 259].
  // Greedy left to right would have merged (a,b) first: ab c -> [260, 99].
  EXPECT_EQ(t.encode("abc"), (Ids{97, 259}));
  EXPECT_EQ(t.encode("ab"), (Ids{260}));
  // Equal ranks: the leftmost pair first ("12" + "1" + "2" -> "12" "12").
  EXPECT_EQ(t.encode("1212"), (Ids{263, 263}));
  EXPECT_EQ(t.encode("121"), (Ids{263, 49}));
}

// The merge loop (a heap with lazy invalidation) against the textbook definition, rescanning
// every adjacent pair per merge: random merge tables over {a, b, c} (merges of merges, ranks in
// any order) and random words.
TEST(BpeMerge, AgreesWithTheNaiveRescanOnRandomMerges) {
  std::mt19937 rng(5);
  for (int table = 0; table < 20; ++table) {
    Strs tokens = {"a", "b", "c"};
    json vocab = {{"a", 0}, {"b", 1}, {"c", 2}};
    std::vector<std::pair<std::string, std::string>> merges;
    while (merges.size() < 12) {
      const std::string l = tokens[rng() % tokens.size()], r = tokens[rng() % tokens.size()];
      if (vocab.contains(l + r) || l.size() + r.size() > 6) continue;
      vocab[l + r] = tokens.size();
      tokens.push_back(l + r);
      merges.emplace_back(l, r);
    }
    std::shuffle(merges.begin(), merges.end(), rng);  // ranks need not follow creation order
    json ms = json::array();
    for (const auto& [l, r] : merges) ms.push_back(l + " " + r);
    const tk::BpeTokenizer t =
        make({{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", ms}}}});
    for (int w = 0; w < 50; ++w) {
      std::string word;
      for (size_t n = 1 + rng() % 30; n > 0; --n) word += "abc"[rng() % 3];
      Strs sym;
      for (char ch : word) sym.emplace_back(1, ch);
      for (;;) {
        size_t best = sym.size(), best_rank = merges.size();
        for (size_t i = 0; i + 1 < sym.size(); ++i)
          for (size_t r = 0; r < best_rank; ++r)
            if (merges[r].first == sym[i] && merges[r].second == sym[i + 1])
              best = i, best_rank = r;
        if (best == sym.size()) break;
        sym[best] += sym[best + 1];
        sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      }
      Ids expected;
      for (const std::string& x : sym) expected.push_back(vocab[x].get<uint32_t>());
      ASSERT_EQ(t.encode(word), expected) << "table " << table << " word " << word;
    }
  }
}

TEST(BpeByteLevel, AddedTokensSplitTheText) {
  const tk::BpeTokenizer t = make(byte_level_fixture());
  // "the the" | <|endoftext|> | "abc café  x" (pieces "abc", " café", " ", " x").
  EXPECT_EQ(t.encode("the the<|endoftext|>abc café  x"),
            (Ids{116, 257, 258, 265, 97, 259, 32, 99, 97, 102, 261, 32, 32, 120}));
  EXPECT_EQ(t.encode("<|endoftext|><|endoftext|>"), (Ids{265, 265}));
  // A near miss is ordinary text.
  EXPECT_EQ(t.encode("<|endoftext"), t.encode("<|endoftext"));
  EXPECT_EQ(t.decode(t.encode("x<|endoftext|>y")), "x<|endoftext|>y");
  EXPECT_EQ(t.eos_id(), 265u);
  EXPECT_EQ(t.token_id("<|endoftext|>"), 265u);
  EXPECT_EQ(t.token(258), "Ġthe");
}

TEST(BpeByteLevel, LongestAddedTokenWinsAndStripOptionsSwallowSpaces) {
  json j = byte_level_fixture();
  j["added_tokens"].push_back({{"id", 266}, {"content", "<|end"}, {"special", true}});
  j["added_tokens"].push_back(
      {{"id", 267}, {"content", "<m>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}});
  const tk::BpeTokenizer t = make(j);
  EXPECT_EQ(t.vocab_size(), 268);
  EXPECT_EQ(t.encode("<|endoftext|><|end"), (Ids{265, 266}));
  // lstrip/rstrip: the spaces around <m> belong to it.
  EXPECT_EQ(t.encode("a <m>  b"), (Ids{97, 267, 98}));
}

TEST(BpeByteLevel, IgnoreMergesEmitsVocabularyWordsWhole) {
  json j = byte_level_fixture();
  // No merge builds "Ġxyz": without ignore_merges " xyz" stays four byte tokens.
  EXPECT_EQ(make(j).encode(" xyz"), (Ids{32, 120, 121, 122}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(make(j).encode(" xyz"), (Ids{264}));
  EXPECT_EQ(make(j).encode(" xyzz"), (Ids{32, 120, 121, 122, 122}));
}

TEST(BpeByteLevel, BothMergeSpellingsGiveTheSameTokenizer) {
  json pairs = byte_level_fixture();
  json list = json::array();
  for (const auto& m : pairs["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    list.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  pairs["model"]["merges"] = list;
  const std::string text = "the the abc café 1212 xyz";
  EXPECT_EQ(make(pairs).encode(text), make(byte_level_fixture()).encode(text));
  EXPECT_EQ(make(pairs).encode("abc"), (Ids{97, 259}));
}

TEST(BpeByteLevel, AddPrefixSpace) {
  json j = byte_level_fixture();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  // "the" -> " the" -> Ġthe; already starting with a space: unchanged.
  EXPECT_EQ(make(j).encode("the"), (Ids{258}));
  EXPECT_EQ(make(j).encode(" the"), (Ids{258}));
}

TEST(BpeByteLevel, Llama3Pipeline) {
  const tk::BpeTokenizer t = make(llama3_fixture());
  // Digits in threes: "1212" -> "121" "2" -> [12, 1] [2].
  EXPECT_EQ(t.encode("1212"), (Ids{263, 49, 50}));
  // "  the": " " then " the" (cl100k) -> [32] [258].
  EXPECT_EQ(t.encode("  the"), (Ids{32, 258}));
  // ignore_merges is on: " xyz" is a vocabulary entry.
  EXPECT_EQ(t.encode(" xyz"), (Ids{264}));
  EXPECT_EQ(t.decode(t.encode("x\r\n\n  y")), "x\r\n\n  y");
}

TEST(BpeByteLevel, Qwen2NfcNormalizer) {
  json j = llama3_fixture();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      std::string(tk::split_regex_pattern(tk::SplitRegex::kQwen2));
  j["normalizer"] = {{"type", "NFC"}};
  const tk::BpeTokenizer t = make(j);
  // e + U+0301 (combining acute) is NFC é = C3 A9 -> Ã© 261.
  EXPECT_EQ(t.encode("cafe\u0301"), (Ids{99, 97, 102, 261}));
  // Qwen2 splits digits one by one: "12" never merges.
  EXPECT_EQ(t.encode("12"), (Ids{49, 50}));
}

TEST(BpeByteLevel, RoundTripsKjvAndRandomUtf8) {
  const std::string text = kjv();
  for (const json& j : {byte_level_fixture(), llama3_fixture()}) {
    const tk::BpeTokenizer t = make(j);
    const Ids ids = t.encode(text);
    EXPECT_LT(ids.size(), text.size());  // the merges do something
    EXPECT_EQ(t.decode(ids), text);
    std::mt19937 rng(11);
    for (int i = 0; i < 400; ++i) {
      const std::string s = random_utf8(rng, rng() % 60, 0);
      ASSERT_EQ(t.decode(t.encode(s)), s) << "case " << i;
    }
  }
}

// ---- SentencePiece-style BPE -------------------------------------------------------------------

TEST(BpeSentencePiece, HandWorkedIds) {
  const tk::BpeTokenizer t = make(sentencepiece_fixture());
  EXPECT_EQ(t.vocab_size(), 271);
  // "the cat" -> "▁the▁cat", one word: ▁ t h e ▁ c a t; (▁,t) rank 0 at the first ▁ only
  // ("▁c" has no merge), (h,e) rank 1, (▁t,he) rank 2 -> ▁the ▁ c a t.
  EXPECT_EQ(t.encode("the cat"), (Ids{268, 259, 262, 260, 265}));
  EXPECT_EQ(t.decode({268, 259, 262, 260, 265}), "the cat");
  // Rank order: ▁ a b c: (b,c) rank 3 before (a,b) rank 4 -> ▁ a bc.
  EXPECT_EQ(t.encode("abc"), (Ids{259, 260, 269}));
  EXPECT_EQ(t.encode(""), Ids{});
}

TEST(BpeSentencePiece, ByteFallbackAndUnk) {
  json j = sentencepiece_fixture();
  // é is not in the vocabulary: its bytes C3 A9 -> <0xC3> 3+0xC3 = 198, <0xA9> 3+0xA9 = 172.
  EXPECT_EQ(make(j).encode("aé"), (Ids{259, 260, 198, 172}));
  EXPECT_EQ(make(j).decode({259, 260, 198, 172}), "aé");
  // Without byte fallback: unk, fused over the run of unknown characters.
  j["model"]["byte_fallback"] = false;
  EXPECT_EQ(make(j).encode("aéé a"), (Ids{259, 260, 0, 259, 260}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(make(j).encode("aéé"), (Ids{259, 260, 0, 0}));
  // A byte token missing: that character falls back to unk.
  j = sentencepiece_fixture();
  j["model"]["vocab"].erase("<0xA9>");
  EXPECT_EQ(make(j).encode("aé"), (Ids{259, 260, 0}));
}

TEST(BpeSentencePiece, AddedTokensAndPrependPerSegment) {
  const tk::BpeTokenizer t = make(sentencepiece_fixture());
  // Each text segment between added tokens is normalized on its own, so both get "▁".
  EXPECT_EQ(t.encode("<s>the</s>the"), (Ids{1, 268, 2, 268}));
  // The decoder strips one leading space of the whole text, as Hugging Face's does.
  EXPECT_EQ(t.decode({1, 268, 2, 268}), "<s> the</s> the");
  EXPECT_EQ(t.eos_id(), 2u);
}

TEST(BpeSentencePiece, MetaspacePreTokenizer) {
  json j = sentencepiece_fixture();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Metaspace"},
                     {"replacement", "▁"},
                     {"prepend_scheme", "always"},
                     {"split", true}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}}}}};
  EXPECT_EQ(make(j).encode("the cat"), (Ids{268, 259, 262, 260, 265}));
  EXPECT_EQ(make(j).encode("the</s>the"), (Ids{268, 2, 268}));
  EXPECT_EQ(make(j).decode(make(j).encode("the cat")), "the cat");
  // prepend_scheme "first": only the segment at the start of the input gets "▁".
  // "the" after </s>: t h e -> t he (no (t,he) merge) -> [265, 267].
  j["pre_tokenizer"]["prepend_scheme"] = "first";
  EXPECT_EQ(make(j).encode("the</s>the"), (Ids{268, 2, 265, 267}));
}

TEST(BpeSentencePiece, RoundTripsKjvAndRandomUtf8) {
  const tk::BpeTokenizer t = make(sentencepiece_fixture());
  const std::string text = kjv();
  EXPECT_EQ(t.decode(t.encode(text)), text);
  std::mt19937 rng(13);
  for (int i = 0; i < 400; ++i) {
    // "▁" itself would come back as a space: the normalizer cannot tell it from one.
    const std::string s = random_utf8(rng, rng() % 60, U'\u2581');
    ASSERT_EQ(t.decode(t.encode(s)), s) << "case " << i;
  }
}

TEST(BpeSentencePiece, LongWordIsNotQuadratic) {
  // Without a pre-tokenizer a whole document is one word; 400k characters must merge quickly
  // (a rescan per merge would take minutes).
  const tk::BpeTokenizer t = make(sentencepiece_fixture());
  std::string s;
  for (int i = 0; i < 100000; ++i) s += "the ";
  const Ids ids = t.encode(s);
  ASSERT_EQ(ids.size(), 100000u + 1);  // ▁the x 100000, then the trailing ▁
  EXPECT_EQ(ids[0], 268u);
  EXPECT_EQ(ids.back(), 259u);
}

// ---- refusals
// ------------------------------------------------------------------------------------

std::string load_error(const json& j) {
  return error_of([&] { make(j); });
}

TEST(BpeRefuses, FilesAndJson) {
  EXPECT_NE(error_of([] {
              tk::BpeTokenizer::load("/nonexistent/tokenizer.json");
            }).find("/nonexistent/tokenizer.json"),
            std::string::npos);
  const std::string e = error_of([] { tk::BpeTokenizer::parse("{\"model\": [1,", "broken.json"); });
  EXPECT_NE(e.find("[tokenizer] broken.json: malformed JSON"), std::string::npos) << e;
  EXPECT_NE(error_of([] { tk::BpeTokenizer::parse("{}", "empty.json"); }).find("no \"model\""),
            std::string::npos);
}

TEST(BpeRefuses, UnsupportedComponentsByName) {
  const auto with = [](const char* key, const json& v) {
    json j = byte_level_fixture();
    j[key] = v;
    return j;
  };
  const auto expect = [](const json& j, const std::string& what) {
    const std::string e = load_error(j);
    EXPECT_NE(e.find("fixture.json"), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << "expected '" << what << "' in: " << e;
  };
  json j = byte_level_fixture();
  j["model"]["type"] = "WordPiece";
  expect(j, "model.type \"WordPiece\"");
  j["model"]["type"] = "Unigram";
  expect(j, "\"Unigram\"");
  expect(with("normalizer", {{"type", "Lowercase"}}), "normalizer type \"Lowercase\"");
  expect(with("normalizer",
              {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Strip"}}}}}),
         "normalizer.normalizers[1] type \"Strip\"");
  expect(
      with("normalizer", {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "▁"}}),
      "{\"Regex\":\" +\"}");
  expect(with("pre_tokenizer", {{"type", "Whitespace"}}), "pre_tokenizer type \"Whitespace\"");
  expect(with("decoder", {{"type", "WordPiece"}}), "decoder type \"WordPiece\"");
  j = llama3_fixture();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|\\s+";
  expect(j, "Split regex \"\\w+|\\s+\" is not supported");
  j = llama3_fixture();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect(j, "behavior \"Removed\"");
  j = llama3_fixture();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};
  expect(j, "Split pattern {\"String\":\" \"}");
  j = byte_level_fixture();
  j["model"]["dropout"] = 0.1;
  expect(j, "model.dropout 0.1");
  j = byte_level_fixture();
  j["model"]["continuing_subword_prefix"] = "##";
  expect(j, "continuing_subword_prefix \"##\"");
  j = byte_level_fixture();
  j["added_tokens"][0]["single_word"] = true;
  expect(j, "single_word");
}

TEST(BpeRefuses, BadVocabularyAndMerges) {
  const auto expect = [](const json& j, const std::string& what) {
    const std::string e = load_error(j);
    EXPECT_NE(e.find(what), std::string::npos) << "expected '" << what << "' in: " << e;
  };
  json j = byte_level_fixture();
  j["model"]["merges"].push_back("a q");
  expect(j, "model.merges[8] names \"aq\"");  // "a" and "q" exist; their merge does not
  j = byte_level_fixture();
  j["model"]["merges"].push_back("a qq");
  expect(j, "model.merges[8] names \"qq\", which is not in model.vocab");
  j = byte_level_fixture();
  j["model"]["merges"].push_back("abc");
  expect(j, "model.merges[8] \"abc\" is not two tokens");
  j = byte_level_fixture();
  j["model"]["merges"].push_back({"a"});
  expect(j, "model.merges[8] [\"a\"]");
  j = byte_level_fixture();
  j["model"]["vocab"]["dup"] = 5;
  expect(j, "gives id 5 to both");
  j = byte_level_fixture();
  j["model"]["vocab"]["neg"] = -1;
  expect(j, "model.vocab[\"neg\"] = -1");
  j = byte_level_fixture();
  j["model"]["unk_token"] = "<unk>";
  expect(j, "model.unk_token names \"<unk>\"");
  j = byte_level_fixture();
  j["added_tokens"][0]["id"] = 97;
  expect(j, "has id 97, already the token \"a\"");
  j = byte_level_fixture();
  j["model"].erase("vocab");
  expect(j, "model.vocab is missing");
}

TEST(BpeRefuses, TextItCannotEncodeAndIdsItCannotDecode) {
  json j = sentencepiece_fixture();
  j["model"]["byte_fallback"] = false;
  j["model"]["unk_token"] = nullptr;
  const std::string e = error_of([&] { make(j).encode("aé"); });
  EXPECT_NE(e.find("character U+00E9 ('é') is not in the vocabulary"), std::string::npos) << e;
  const std::string bad_utf8 =
      error_of([] { make(byte_level_fixture()).encode(std::string("ab\xff", 3)); });
  EXPECT_NE(bad_utf8.find("not valid UTF-8 at byte 2 (0xFF)"), std::string::npos) << bad_utf8;
  EXPECT_NE(error_of([] { make(byte_level_fixture()).decode({266}); }).find("no token has id 266"),
            std::string::npos);
  // Ids with no token inside the range (a gap in the vocabulary) are refused too.
  json gap = byte_level_fixture();
  gap["added_tokens"][0]["id"] = 300;
  EXPECT_EQ(make(gap).vocab_size(), 301);
  EXPECT_NE(error_of([&] { make(gap).decode({290}); }).find("no token has id 290"),
            std::string::npos);
}

TEST(BpeRefuses, EndOfTextThatIsNotThere) {
  const tk::BpeTokenizer t = make(byte_level_fixture());
  EXPECT_EQ(t.eos_id("Ġthe"), 258u);
  EXPECT_NE(error_of([&] {
              t.eos_id("<|eot_id|>");
            }).find("\"<|eot_id|>\" (--eot) is not in the tokenizer"),
            std::string::npos);
  json j = byte_level_fixture();
  j["added_tokens"] = json::array();
  const std::string e = error_of([&] { make(j).eos_id(); });
  EXPECT_NE(e.find("<|endoftext|>, <|end_of_text|>, </s>, <|im_end|>"), std::string::npos) << e;
}

// ---- the CLI
// -------------------------------------------------------------------------------------

// Runs a shell command; returns its exit status and fills `out` with stdout and stderr.
using longseq::testing::run;

TEST(BpeCli, TokenizeWithATokenizerJson) {
  const std::string tok = tmp("tokenizer.json"), a = tmp("a.txt"), b = tmp("b.txt"),
                    out = tmp("tokens.bin");
  longseq::core::write_file_atomic(tok, byte_level_fixture().dump(2));
  longseq::core::write_file_atomic(a, "the cat");
  longseq::core::write_file_atomic(b, "abc café");
  const std::string cli = LONGSEQ_CLI;
  std::string log;
  ASSERT_EQ(run(cli + " tokenize --in " + a + " " + b + " --tokenizer " + tok + " --out " + out +
                    " --show 100",
                log),
            0)
      << log;
  // The token file: each document's ids, then <|endoftext|> (265); vocabulary 266, uint16.
  const tr::TokenFile f = tr::read_token_file(out);
  EXPECT_EQ(f.tokens, (Ids{116, 257, 32, 99, 97, 116, 265, 97, 259, 32, 99, 97, 102, 261, 265}));
  EXPECT_EQ(f.vocab, 266);
  EXPECT_EQ(f.eot, 265);
  // --show decodes with the same tokenizer.
  EXPECT_NE(log.find("the cat<|endoftext|>abc café<|endoftext|>"), std::string::npos) << log;

  // --eot picks another token; one the tokenizer lacks is refused naming it.
  ASSERT_EQ(
      run(cli + " tokenize --in " + a + " --tokenizer " + tok + " --eot Ġthe --out " + out, log), 0)
      << log;
  EXPECT_EQ(tr::read_token_file(out).tokens, (Ids{116, 257, 32, 99, 97, 116, 258}));
  EXPECT_NE(
      run(cli + " tokenize --in " + a + " --tokenizer " + tok + " --eot '<|eot_id|>' --out " + out,
          log),
      0);
  EXPECT_NE(log.find("<|eot_id|>"), std::string::npos) << log;
  EXPECT_NE(run(cli + " tokenize --in " + a + " --tokenizer /nonexistent.json --out " + out, log),
            0);
  EXPECT_NE(log.find("/nonexistent.json"), std::string::npos) << log;

  // A vocabulary beyond 65536 ids is written as uint32.
  json big = byte_level_fixture();
  big["added_tokens"][0]["id"] = 70000;
  longseq::core::write_file_atomic(tok, big.dump());
  ASSERT_EQ(run(cli + " tokenize --in " + a + " --tokenizer " + tok + " --out " + out, log), 0)
      << log;
  const tr::TokenFile g = tr::read_token_file(out);
  EXPECT_EQ(g.vocab, 70001);
  EXPECT_EQ(g.eot, 70000);
  EXPECT_EQ(g.tokens, (Ids{116, 257, 32, 99, 97, 116, 70000}));
  const std::string raw = longseq::core::read_file(out);
  int32_t bytes_per_token = 0;
  std::memcpy(&bytes_per_token, raw.data() + 16, 4);
  EXPECT_EQ(bytes_per_token, 4);

  // The flags are listed in the help with their defaults, by `longseq --help` and by the
  // command's own --help, which wins over the missing required --in.
  ASSERT_EQ(run(cli + " --help", log), 0) << log;
  EXPECT_NE(log.find("--tokenizer"), std::string::npos) << log;
  EXPECT_NE(log.find("--eot"), std::string::npos) << log;
  ASSERT_EQ(run(cli + " tokenize --help", log), 0) << log;
  EXPECT_NE(log.find("--tokenizer"), std::string::npos) << log;
  EXPECT_NE(log.find("--in"), std::string::npos) << log;
  EXPECT_EQ(log.find("--checkpoint"), std::string::npos) << log;  // tokenize's flags only
  for (const std::string& p : {tok, a, b, out}) std::remove(p.c_str());
}

}  // namespace
