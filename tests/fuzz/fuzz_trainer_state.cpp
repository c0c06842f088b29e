// trainer_state.json of a checkpoint (train/checkpoint): the checks run before --resume uses it,
// then the loader at the step it names (issue 20: step -2147483648 read freed memory).
#include <nlohmann/json.hpp>

#include "fuzz_util.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/data.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  longseq::fuzz::expect_clean([&] {
    const auto j = longseq::fuzz::parse_json(data, size);
    if (!j) return;  // load_checkpoint refuses malformed JSON naming the file (read_json)
    const int64_t step = longseq::train::validate_trainer_state(*j, "trainer_state.json");
    longseq::train::TokenFile f;
    f.tokens.assign(64, 1);
    f.vocab = 2;
    f.path = "synthetic";
    const longseq::train::Loader loader(f, 16);
    const int64_t seq = loader.sequence_index(step, 1, 2);
    if (seq < 0 || seq >= loader.num_sequences()) std::abort();
  });
  return 0;
}
