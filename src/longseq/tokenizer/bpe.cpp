// The tokenizer as a whole: reading tokenizer.json (its JSON helpers), the added tokens, encode
// (added tokens, then each stage per segment) and the accessors. bpe_impl.hpp lists the stages.
#include <fstream>

#include "longseq/core/io.hpp"
#include "longseq/tokenizer/bpe_impl.hpp"

namespace longseq::tokenizer {

namespace {

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

}  // namespace

std::string BpeTokenizer::Impl::str(const json& j, const char* key,
                                    const std::string& where) const {
  if (!j.contains(key)) bad(where, " has no \"", key, "\"");
  if (!j[key].is_string()) bad(where, ".", key, " is ", j[key].dump(), ", not a string");
  return j[key].get<std::string>();
}

bool BpeTokenizer::Impl::flag(const json& j, const char* key, bool def,
                              const std::string& where) const {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) bad(where, ".", key, " is ", j[key].dump(), ", not true/false");
  return j[key].get<bool>();
}

const json& BpeTokenizer::Impl::obj(const json& j, const std::string& where) const {
  if (!j.is_object()) bad(where, " is ", j.dump().substr(0, 200), ", not an object");
  return j;
}

std::optional<std::string> BpeTokenizer::Impl::string_pattern(const json& j,
                                                              const std::string& where) const {
  if (!j.contains("pattern") || !j["pattern"].is_object()) bad(where, " has no \"pattern\" object");
  const json& p = j["pattern"];
  if (p.contains("String") && p["String"].is_string()) return p["String"].get<std::string>();
  return std::nullopt;
}

Prepend BpeTokenizer::Impl::prepend_scheme(const json& j, const std::string& where) const {
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

std::string BpeTokenizer::Impl::one_char(const json& j, const char* key,
                                         const std::string& where) const {
  const std::string s = str(j, key, where);
  size_t i = 0;
  char32_t c;
  if (s.empty() || !next_code_point(s, i, c) || i != s.size())
    bad(where, ".", key, " \"", s, "\" is not one character");
  return s;
}

void BpeTokenizer::Impl::load_added(const json& list) {
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

void BpeTokenizer::Impl::encode_segment(
    std::string_view seg, bool at_start, std::vector<uint32_t>& out,
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

}  // namespace longseq::tokenizer
