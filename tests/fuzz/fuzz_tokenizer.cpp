// tokenizer.json (train/bpe): parse, then encode and decode a fixed text with what was parsed.
#include "fuzz_util.hpp"
#include "longseq/tokenizer/bpe.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  longseq::fuzz::expect_clean([&] {
    const auto t = longseq::tokenizer::BpeTokenizer::parse(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/tokenizer.json");
    const std::vector<uint32_t> ids =
        t.encode("In the beginning God created the heaven\n and the earth. 123");
    t.decode(ids);
    t.vocab_size();
  });
  return 0;
}
