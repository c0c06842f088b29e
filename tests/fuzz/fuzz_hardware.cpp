// Hardware profiles (plan/hardware: data/hardware/*.json, plan --hardware FILE).
#include "fuzz_util.hpp"
#include "longseq/plan/hardware.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  longseq::fuzz::expect_clean([&] {
    longseq::plan::parse_hardware(std::string(reinterpret_cast<const char*>(data), size),
                                  "fuzz.json");
  });
  return 0;
}
