// safetensors files (core/safetensors): the header, offsets, tiling of the data section, checksums.
#include "fuzz_util.hpp"
#include "longseq/core/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  longseq::fuzz::expect_clean([&] {
    const auto f = longseq::core::parse_safetensors(bytes, "fuzz.safetensors");
    for (const auto& [name, t] : f.tensors)
      if (static_cast<uint64_t>(t.numel()) * longseq::core::dtype_size(t.dtype) != t.bytes.size())
        std::abort();
  });
  return 0;
}
