// Document and block mask files (attention/mask_spec): --mask document:FILE and blocks:FILE:B
// over a 64-token sequence, then the kernel mask built from them.
#include "fuzz_util.hpp"
#include "longseq/attention/mask_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = longseq::fuzz::write_input(data, size, "mask.npy");
  for (const std::string& spec :
       {"document:" + p, "causal,blocks:" + p + ":8", "blocks:" + p + ":64"})
    longseq::fuzz::expect_clean([&] {
      const longseq::attention::MaskSpec m = longseq::attention::MaskSpec::parse(spec, false, 64);
      m.kernel_mask();
    });
  return 0;
}
