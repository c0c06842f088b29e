// The normalizer stage: Prepend, Replace and the Unicode normal forms (ICU), in sequence.

#include "longseq/tokenizer/bpe_impl.hpp"

namespace longseq::tokenizer {

void BpeTokenizer::Impl::load_normalizer(const json& j, const std::string& where) {
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

void BpeTokenizer::Impl::normalize(std::string& s) const {
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

}  // namespace longseq::tokenizer
