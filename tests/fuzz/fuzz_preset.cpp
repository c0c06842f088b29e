// Preset files (train --preset FILE.json): the keys over a built-in base, then validation.
#include "fuzz_util.hpp"
#include "longseq/train/trainer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = longseq::fuzz::write_input(data, size, "preset.json");
  longseq::fuzz::expect_clean([&] {
    longseq::train::TrainConfig c = longseq::train::preset(p);
    c.init_from.clear();  // validate() would read that directory's files
    c.validate();
  });
  return 0;
}
