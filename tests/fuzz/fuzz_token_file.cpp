// Token files (train/data): header, sizes, token ids; then a loader over the tokens read.
#include "fuzz_util.hpp"
#include "longseq/attention/layout.hpp"
#include "longseq/train/data.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = longseq::fuzz::write_input(data, size, "in.tok");
  longseq::fuzz::expect_clean([&] {
    const longseq::train::TokenFile f = longseq::train::read_token_file(p);
    const longseq::train::Loader loader(f, 8);
    const longseq::attention::Layout lay(longseq::attention::Balance::zigzag, 8, 2);
    for (int64_t step : {0, 1, 7}) {
      const int64_t seq = loader.sequence_index(step, 0, 1);
      loader.rank_tokens(seq, lay, 1, -100);
      loader.document_ids(seq);
    }
  });
  return 0;
}
