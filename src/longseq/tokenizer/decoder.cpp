// The decoder stage: ByteLevel, Replace, ByteFallback, Fuse, Strip and Metaspace, in sequence.
#include <cctype>
#include <cstdio>

#include "longseq/tokenizer/bpe_impl.hpp"

namespace longseq::tokenizer {

void BpeTokenizer::Impl::load_decoder(const json& j, const std::string& where) {
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

}  // namespace longseq::tokenizer
