#pragma once
// Token files, the byte-level tokenizer, and the loader that hands each rank its tokens.
//
// Token file (llm.c style): a header of 256 little-endian int32, then the tokens.
//   header[0] = kTokenMagic (0x4C53544B, "LSTK"), header[1] = version (1),
//   header[2], header[3] = token count (low, high 32 bits), header[4] = bytes per token (2: uint16,
//   4: uint32), header[5] = vocabulary size, header[6] = end-of-text token id marking document
//   boundaries (-1: none; each document is followed by one EOT), the rest 0.
//
// Sequences: sequence i is tokens [i*N, (i+1)*N) of the file (i < count / N; the remainder is
// never used). The label of sequence position p is the token at p + 1 *in global order*, wherever
// the layout puts p and p + 1; the last position's label is ignored. Every rank reads its own
// positions' tokens and labels straight from the (memory-resident) file, so the cross-rank shift
// needs no communication. Document ids (when the file marks boundaries): the number of EOT tokens
// strictly before p within the sequence, so an EOT belongs to the document it ends.
#include <cstdint>
#include <string>
#include <vector>

#include "longseq/attention/layout.hpp"

namespace longseq::train {

inline constexpr int32_t kTokenMagic = 0x4C53544B;
inline constexpr int32_t kTokenVersion = 1;
/// Byte-level tokenizer: ids 0..255 are bytes, 256 is end-of-text; vocabulary 257.
inline constexpr int32_t kByteEot = 256;
inline constexpr int64_t kByteVocab = 257;

struct TokenFile {
  std::vector<uint32_t> tokens;
  int64_t vocab = 0;
  int32_t eot = -1;
  std::string path;
};

/// Writes a token file (uint16 when every id < 65536, else uint32), atomically.
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens, int64_t vocab,
                      int32_t eot);
/// Reads and validates: magic, version, sizes, token ids < vocab. Throws core::Error("[data]
/// <path>: ...") naming what is wrong.
TokenFile read_token_file(const std::string& path);

/// Byte-level tokenization of documents: each document's bytes, then kByteEot.
std::vector<uint32_t> byte_tokenize(const std::vector<std::string>& documents);
/// The inverse for display (EOT shown as "<|eot|>").
std::string byte_detokenize(const std::vector<uint32_t>& tokens);

/// One rank's share of one sequence, in layout order (padding: token 0, label ignored, pos -1).
struct RankTokens {
  std::vector<int32_t> tokens, labels;
  std::vector<int64_t> pos;
};

class Loader {
 public:
  /// Sequences of `seq_len` tokens; throws core::Error naming the sizes when the file holds fewer
  /// than seq_len tokens.
  Loader(const TokenFile& file, int64_t seq_len);
  int64_t num_sequences() const { return num_seqs_; }
  int64_t seq_len() const { return n_; }
  /// Index of the sequence that data-parallel replica `replica` of `replicas` trains on at `step`
  /// (round robin through the file, wrapping around: epochs).
  int64_t sequence_index(int64_t step, int replica, int replicas) const;
  /// The tokens, labels and positions of `rank` under `layout` for sequence number `index`
  /// (sequence_index(); not a length, which `seq` names everywhere else).
  RankTokens rank_tokens(int64_t index, const attention::Layout& layout, int rank,
                         int32_t ignore_index) const;
  /// Document ids of the whole sequence [N] (empty when the file marks no boundaries).
  std::vector<int32_t> document_ids(int64_t index) const;

 private:
  const TokenFile& file_;
  int64_t n_;
  int64_t num_seqs_;
};

}  // namespace longseq::train
