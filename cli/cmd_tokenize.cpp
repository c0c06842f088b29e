// `longseq tokenize`: text files -> a token file (src/longseq/train/data.hpp), byte-level.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/train/data.hpp"

namespace longseq::cli {

namespace {
struct TokenizeArgs {
  std::vector<std::string> in;
  std::string out;
  int64_t show = 0;
};
}  // namespace

std::function<int()> add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  app.add_option("--in", a->in, "text files, one document each (end-of-text after each)")->required();
  app.add_option("--out", a->out, "token file to write")->required();
  app.add_option("--show", a->show, "print the first N tokens decoded back");
  return [a] {
    std::vector<std::string> docs;
    for (const auto& p : a->in) docs.push_back(core::read_file(p));
    const std::vector<uint32_t> tokens = train::byte_tokenize(docs);
    train::write_token_file(a->out, tokens, train::kByteVocab, train::kByteEot);
    std::printf("%s: %zu tokens, %zu documents, vocabulary %lld (bytes + end-of-text %d)\n",
                a->out.c_str(), tokens.size(), docs.size(),
                static_cast<long long>(train::kByteVocab), train::kByteEot);
    if (a->show > 0) {
      const train::TokenFile f = train::read_token_file(a->out);
      const size_t n = std::min<size_t>(static_cast<size_t>(a->show), f.tokens.size());
      std::printf("%s\n", train::byte_detokenize({f.tokens.begin(), f.tokens.begin() + n}).c_str());
    }
    return 0;
  };
}

}  // namespace longseq::cli
