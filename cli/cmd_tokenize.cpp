// `longseq tokenize`: text files -> a token file (src/longseq/train/data.hpp), byte-level by
// default or with the BPE of a Hugging Face tokenizer.json (src/longseq/tokenizer/bpe.hpp).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/tokenizer/bpe.hpp"
#include "longseq/train/data.hpp"

namespace longseq::cli {

namespace {
struct TokenizeArgs {
  std::vector<std::string> in;
  std::string out;
  int64_t show = 0;
  std::string tokenizer;
  std::string eot;
};
}  // namespace

std::function<int()> add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  app.add_option("--in", a->in, "text files, one document each (end-of-text after each)")
      ->required();
  app.add_option("--out", a->out, "token file to write")->required();
  app.add_option("--show", a->show, "print the first N tokens decoded back");
  app.add_option("--tokenizer", a->tokenizer,
                 "Hugging Face tokenizer.json (BPE) to encode with; none: byte-level (ids 0-255 "
                 "bytes, 256 end-of-text)");
  app.add_option("--eot", a->eot,
                 "end-of-text token after each document (with --tokenizer); none: the first of "
                 "<|endoftext|> <|end_of_text|> </s> <|im_end|> in the tokenizer");
  return [a] {
    std::vector<std::string> docs;
    for (const auto& p : a->in) docs.push_back(core::read_file(p));
    std::optional<tokenizer::BpeTokenizer> bpe;
    std::vector<uint32_t> tokens;
    int64_t vocab = train::kByteVocab;
    int32_t eot = train::kByteEot;
    if (a->tokenizer.empty()) {
      core::require(a->eot.empty(), "tokenize", "--eot ", a->eot,
                    " needs --tokenizer (the byte-level end-of-text is id ", train::kByteEot, ")");
      tokens = train::byte_tokenize(docs);
    } else {
      bpe.emplace(tokenizer::BpeTokenizer::load(a->tokenizer));
      vocab = bpe->vocab_size();
      eot = static_cast<int32_t>(bpe->eos_id(a->eot));
      for (size_t i = 0; i < docs.size(); ++i) {
        try {
          const std::vector<uint32_t> t = bpe->encode(docs[i]);
          tokens.insert(tokens.end(), t.begin(), t.end());
        } catch (const core::Error& e) {
          core::fail("tokenize", a->in[i], ": ", e.what());
        }
        tokens.push_back(static_cast<uint32_t>(eot));
      }
    }
    train::write_token_file(a->out, tokens, vocab, eot);
    if (bpe) {
      std::printf(
          "%s: %zu tokens, %zu documents, vocabulary %lld (%s), end-of-text %d (%s), %d-byte ids\n",
          a->out.c_str(), tokens.size(), docs.size(), static_cast<long long>(vocab),
          a->tokenizer.c_str(), eot, bpe->token(static_cast<uint32_t>(eot)).c_str(),
          vocab <= 65536 ? 2 : 4);
    } else {
      std::printf("%s: %zu tokens, %zu documents, vocabulary %lld (bytes + end-of-text %d)\n",
                  a->out.c_str(), tokens.size(), docs.size(),
                  static_cast<long long>(train::kByteVocab), train::kByteEot);
    }
    if (a->show > 0) {
      // Read back, so what is shown is what the file holds.
      const train::TokenFile f = train::read_token_file(a->out);
      const size_t n = std::min<size_t>(static_cast<size_t>(a->show), f.tokens.size());
      const std::vector<uint32_t> head(f.tokens.begin(), f.tokens.begin() + n);
      std::printf("%s\n", (bpe ? bpe->decode(head) : train::byte_detokenize(head)).c_str());
    }
    return 0;
  };
}

}  // namespace longseq::cli
