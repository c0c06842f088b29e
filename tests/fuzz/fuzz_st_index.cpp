// model.safetensors.index.json of a sharded Hugging Face model (train/checkpoint hf_index_files:
// --init-from DIR reads the shards it names).
#include <nlohmann/json.hpp>

#include "fuzz_util.hpp"
#include "longseq/train/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  longseq::fuzz::expect_clean([&] {
    const auto j = longseq::fuzz::parse_json(data, size);
    if (!j) return;  // load_hf_weights refuses malformed JSON naming the file (read_json)
    for (const std::string& f : longseq::train::hf_index_files(*j, "index.json"))
      if (f.empty() || f.find('/') != std::string::npos) std::abort();
  });
  return 0;
}
