// config.json of a Hugging Face LLaMA directory (train/checkpoint read_hf_config: --init-from).
#include <filesystem>

#include "fuzz_util.hpp"
#include "longseq/train/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = longseq::fuzz::scratch_dir() + "/hf";
  std::filesystem::create_directories(dir);
  const std::string p = longseq::fuzz::write_input(data, size, "hf/config.json");
  longseq::fuzz::expect_clean([&] {
    const longseq::model::LlamaConfig c = longseq::train::read_hf_config(dir);
    // What --init-from does next: the parameter layout of that model.
    if (c.hidden < 1 || c.layers < 1) std::abort();
  });
  return 0;
}
