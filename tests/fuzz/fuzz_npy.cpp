// .npy files (core/npy): read_npy, and the dtype/rank check of read_npy_expect.
#include "fuzz_util.hpp"
#include "longseq/core/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = longseq::fuzz::write_input(data, size, "in.npy");
  longseq::fuzz::expect_clean([&] {
    const longseq::core::NpyArray a = longseq::core::read_npy(p);
    // What a reader does next: the byte count must be what the shape says.
    int64_t n = a.numel();
    if (static_cast<uint64_t>(n) * longseq::core::dtype_size(a.dtype) != a.bytes.size())
      std::abort();
  });
  longseq::fuzz::expect_clean([&] { longseq::core::read_npy_f32(p, 3, "--q"); });
  return 0;
}
