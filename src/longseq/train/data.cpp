#include "longseq/train/data.hpp"

#include <cstring>

#include "longseq/core/checked.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/safetensors.hpp"

namespace longseq::train {

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens, int64_t vocab,
                      int32_t eot) {
  core::require(vocab > 0 && vocab <= (int64_t{1} << 32), "data", path, ": vocabulary ", vocab,
                " out of range");
  const int bytes = vocab <= 65536 ? 2 : 4;
  std::vector<int32_t> header(256, 0);
  header[0] = kTokenMagic;
  header[1] = kTokenVersion;
  const uint64_t n = tokens.size();
  header[2] = static_cast<int32_t>(n & 0xffffffffu);
  header[3] = static_cast<int32_t>(n >> 32);
  header[4] = bytes;
  header[5] = static_cast<int32_t>(vocab);
  header[6] = eot;
  std::string out(256 * 4 + n * bytes, '\0');
  std::memcpy(out.data(), header.data(), 256 * 4);
  char* p = out.data() + 256 * 4;
  for (uint64_t i = 0; i < n; ++i) {
    core::require(tokens[i] < vocab, "data", path, ": token ", tokens[i], " at ", i,
                  " outside the vocabulary ", vocab);
    if (bytes == 2) {
      const uint16_t v = static_cast<uint16_t>(tokens[i]);
      std::memcpy(p + i * 2, &v, 2);
    } else {
      std::memcpy(p + i * 4, &tokens[i], 4);
    }
  }
  core::write_file_atomic(path, out);
}

TokenFile read_token_file(const std::string& path) {
  const std::string all = core::read_file(path);
  core::require(all.size() >= 1024, "data", path, ": ", all.size(),
                " bytes, shorter than the 1024-byte header (not a token file?)");
  int32_t h[256];
  std::memcpy(h, all.data(), sizeof h);
  core::require(h[0] == kTokenMagic, "data", path, ": bad magic ", h[0], " (expected ", kTokenMagic,
                "; write token files with `longseq tokenize`)");
  core::require(h[1] == kTokenVersion, "data", path, ": version ", h[1], ", this build reads ",
                kTokenVersion);
  const uint64_t n =
      static_cast<uint32_t>(h[2]) | (static_cast<uint64_t>(static_cast<uint32_t>(h[3])) << 32);
  const int bytes = h[4];
  core::require(bytes == 2 || bytes == 4, "data", path, ": ", bytes, " bytes per token (2 or 4)");
  // Compared by division: 1024 + n * bytes wraps around for a corrupted count near 2^64.
  const uint64_t data_bytes = all.size() - 1024;
  core::require(data_bytes % static_cast<uint64_t>(bytes) == 0 &&
                    n == data_bytes / static_cast<uint64_t>(bytes),
                "data", path, ": header says ", n, " tokens of ", bytes, " bytes, the file has ",
                data_bytes, " data bytes");
  TokenFile f;
  f.path = path;
  f.vocab = static_cast<uint32_t>(h[5]);
  f.eot = h[6];
  core::require(f.vocab > 0, "data", path, ": vocabulary ", f.vocab, " in the header must be > 0");
  core::require(f.eot >= -1 && f.eot < f.vocab, "data", path, ": end-of-text id ", f.eot,
                " outside the vocabulary ", f.vocab);
  f.tokens.resize(n);
  const char* p = all.data() + 1024;
  for (uint64_t i = 0; i < n; ++i) {
    if (bytes == 2) {
      uint16_t v;
      std::memcpy(&v, p + i * 2, 2);
      f.tokens[i] = v;
    } else {
      std::memcpy(&f.tokens[i], p + i * 4, 4);
    }
    core::require(f.tokens[i] < f.vocab, "data", path, ": token ", f.tokens[i], " at ", i,
                  " outside the vocabulary ", f.vocab);
  }
  return f;
}

std::vector<uint32_t> byte_tokenize(const std::vector<std::string>& documents) {
  std::vector<uint32_t> out;
  for (const std::string& d : documents) {
    for (unsigned char ch : d) out.push_back(ch);
    out.push_back(kByteEot);
  }
  return out;
}

std::string byte_detokenize(const std::vector<uint32_t>& tokens) {
  std::string s;
  for (uint32_t t : tokens) {
    if (t < 256)
      s.push_back(static_cast<char>(t));
    else
      s += "<|eot|>";
  }
  return s;
}

Loader::Loader(const TokenFile& file, int64_t seq_len) : file_(file), n_(seq_len) {
  core::require(seq_len >= 2, "data", "--seq ", seq_len, " must be >= 2");
  const int64_t count = static_cast<int64_t>(file.tokens.size());
  core::require(count >= seq_len, "data", file.path, " holds ", count,
                " tokens, fewer than one sequence of --seq ", seq_len);
  num_seqs_ = count / seq_len;
}

int64_t Loader::sequence_index(int64_t step, int replica, int replicas) const {
  // A step read from a file (trainer_state.json) reaches here: a negative one would index before
  // the tokens (issue 20: heap-use-after-free at --resume with step -2147483648).
  core::require(step >= 0 && replicas >= 1 && replica >= 0 && replica < replicas, "data",
                file_.path, ": step ", step, " replica ", replica, " of ", replicas,
                " out of range");
  int64_t k = 0;
  core::require(core::checked_mul(step, replicas, k) && k <= INT64_MAX - replica, "data",
                file_.path, ": step ", step, " times ", replicas, " replicas overflows");
  return (k + replica) % num_seqs_;
}

RankTokens Loader::rank_tokens(int64_t index, const attention::Layout& layout, int rank,
                               int32_t ignore_index) const {
  LONGSEQ_CHECK(layout.global_len() == n_);
  core::require(index >= 0 && index < num_seqs_, "data", file_.path, ": sequence ", index,
                " out of range (the file holds ", num_seqs_, " of ", n_, " tokens)");
  RankTokens r;
  r.pos = layout.positions(rank);
  const size_t l = r.pos.size();
  r.tokens.assign(l, 0);
  r.labels.assign(l, ignore_index);
  const uint32_t* base = file_.tokens.data() + index * n_;
  for (size_t i = 0; i < l; ++i) {
    const int64_t p = r.pos[i];
    if (p < 0) continue;
    r.tokens[i] = static_cast<int32_t>(base[p]);
    if (p + 1 < n_) r.labels[i] = static_cast<int32_t>(base[p + 1]);
  }
  return r;
}

std::vector<int32_t> Loader::document_ids(int64_t index) const {
  if (file_.eot < 0) return {};
  core::require(index >= 0 && index < num_seqs_, "data", file_.path, ": sequence ", index,
                " out of range (the file holds ", num_seqs_, ")");
  std::vector<int32_t> d(static_cast<size_t>(n_));
  const uint32_t* base = file_.tokens.data() + index * n_;
  int32_t doc = 0;
  for (int64_t p = 0; p < n_; ++p) {
    d[p] = doc;
    if (base[p] == static_cast<uint32_t>(file_.eot)) ++doc;
  }
  return d;
}

}  // namespace longseq::train
