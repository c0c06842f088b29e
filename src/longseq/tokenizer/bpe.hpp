#pragma once
// A BPE tokenizer read from a Hugging Face `tokenizer.json`, for turning text into token files
// (data.hpp) with the vocabulary of a real checkpoint.
//
// Two families are supported, the ones LLaMA-type checkpoints ship:
//  * byte-level BPE (GPT-2, LLaMA-3, Qwen2): pre_tokenizer ByteLevel, or Sequence[Split(Regex,
//    Isolated), ByteLevel(use_regex false)]; the text's bytes are mapped to printable characters
//    (GPT-2's bytes_to_unicode) before BPE and back by the ByteLevel decoder.
//  * SentencePiece-style BPE (LLaMA-1/2, Mistral): spaces become "▁" (normalizer
//    Sequence[Prepend, Replace] or pre_tokenizer Metaspace), characters missing from the vocabulary
//    fall back to <0xNN> byte tokens (byte_fallback) or unk_token.
//
// Encoding follows Hugging Face `tokenizers` step by step: added tokens (normalized: false) are cut
// out of the raw text; each remaining segment is normalized; added tokens (normalized: true) are
// cut out of that; the pre-tokenizer splits the rest into words; each word is merged by rank.
// The post_processor (BOS insertion) is not applied: token files separate documents by EOS only.
//
// Anything the tokenizer.json asks for that this file does not implement exactly (another model
// type, normalizer, pre-tokenizer, regex or decoder, BPE dropout, a subword prefix/suffix) is
// refused at load with a core::Error naming the file and the value, never approximated: a token
// file with a subtly different encoding would train a model that disagrees with its tokenizer.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace longseq::tokenizer {

/// The pre-tokenizer regexes recognised, by their exact pattern text in tokenizer.json. Each is
/// implemented by a hand-written scanner over code points with the regex's leftmost-first
/// alternation and backtracking (pre_tokenizer.cpp documents each branch), so no regex engine is
/// involved.
enum class SplitRegex {
  kGpt2,    ///< GPT-2 (ByteLevel use_regex): 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|...
  kCl100k,  ///< LLaMA-3 / cl100k: (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|...
  kQwen2,   ///< Qwen2: as kCl100k with \p{N} (single digits) for \p{N}{1,3}.
};

/// The pattern text of `r` exactly as tokenizer.json spells it (after JSON unescaping).
std::string_view split_regex_pattern(SplitRegex r);
/// Which known regex `pattern` is; nullopt for any other pattern.
std::optional<SplitRegex> find_split_regex(std::string_view pattern);
/// Splits valid UTF-8 `text` into the consecutive pieces the regex matches (they cover the whole
/// text, so concatenating them gives `text` back). \p{L}, \p{N} and \s are Unicode's general
/// categories L*, N* and the White_Space property (ICU). Throws core::Error on invalid UTF-8.
std::vector<std::string> split_with_regex(SplitRegex r, std::string_view text);

class BpeTokenizer {
 public:
  /// Reads and validates `path` (a Hugging Face tokenizer.json with model type BPE). Throws
  /// core::Error("[tokenizer] <path>: ...") naming the component and value for anything missing,
  /// malformed or unsupported (see the top of this file and docs/trainer.md "Data").
  static BpeTokenizer load(const std::string& path);
  /// As load() from the JSON text; `source` names it in errors.
  static BpeTokenizer parse(std::string_view json_text, const std::string& source);

  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer();

  /// Token ids of `text` (UTF-8; invalid UTF-8 is refused with the byte offset). Added tokens in
  /// the text are matched literally (longest first) and emitted as their ids. No BOS/EOS is added.
  /// Thread-safe: the per-word merge cache lives for one call.
  std::vector<uint32_t> encode(std::string_view text) const;
  /// The text of `ids` through the tokenizer's decoder. Bytes are returned as decoded, without
  /// replacing invalid UTF-8 (a prefix of an encoding may end inside a character). Throws
  /// core::Error for an id with no token.
  std::string decode(const std::vector<uint32_t>& ids) const;

  /// One more than the largest id of the model vocabulary and the added tokens (every id fits).
  int64_t vocab_size() const;
  /// The id of token `token` (an added token's content or a vocabulary entry), if any.
  std::optional<uint32_t> token_id(std::string_view token) const;
  /// The string of token `id` (vocabulary form: "Ġthe", "▁the", "<0x0A>", "<|endoftext|>");
  /// throws core::Error when no token has that id.
  const std::string& token(uint32_t id) const;
  /// The end-of-text id for token files: the id of `name` when given (refused when absent from
  /// the tokenizer), else the first of kEosCandidates present; refused naming them when none is.
  uint32_t eos_id(std::string_view name = {}) const;
  /// The path or source the tokenizer was read from.
  const std::string& source() const;

  /// End-of-text tokens looked for, in this order, when no name is given to eos_id().
  static constexpr const char* kEosCandidates[] = {"<|endoftext|>", "<|end_of_text|>", "</s>",
                                                   "<|im_end|>"};

  struct Impl;

 private:
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace longseq::tokenizer
