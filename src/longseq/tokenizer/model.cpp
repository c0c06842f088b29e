// The BPE model: the vocabulary and merges of tokenizer.json, and merging one word by rank.
#include <cstdio>
#include <queue>

#include "longseq/tokenizer/bpe_impl.hpp"

namespace longseq::tokenizer {

void BpeTokenizer::Impl::set_token(uint32_t id, const std::string& s) {
  if (id >= tokens.size()) {
    tokens.resize(static_cast<size_t>(id) + 1);
    has.resize(static_cast<size_t>(id) + 1, 0);
  }
  tokens[id] = s;
  has[id] = 1;
}

uint32_t BpeTokenizer::Impl::vocab_id(const std::string& s, const std::string& where) const {
  const auto it = vocab.find(s);
  if (it == vocab.end()) bad(where, " names \"", s, "\", which is not in model.vocab");
  return it->second;
}

void BpeTokenizer::Impl::load_model(const json& m) {
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
    if (m.contains(k) && !m[k].is_null() && !(m[k].is_string() && m[k].get<std::string>().empty()))
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

void BpeTokenizer::Impl::bpe_word(const std::string& w, std::vector<uint32_t>& out) const {
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

}  // namespace longseq::tokenizer
