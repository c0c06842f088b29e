// The machine's GEMM rate, measured once the same way for every user (kernels/gemm.hpp).
#include <algorithm>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/kernels/gemm.hpp"

namespace longseq::kernels {

double single_thread_gemm_flops(core::DType dt, int repeats) {
  core::require(dt == core::DType::f32 || dt == core::DType::bf16, "kernels",
                "peak GEMM: dtype must be f32 or bf16");
  core::require(repeats >= 1, "kernels", "peak GEMM: repeats ", repeats, " must be >= 1");
  const int64_t n = 1024;
  const bool bf = dt == core::DType::bf16;
  std::vector<float> a(bf ? 0 : n * n, 0.5f), b(bf ? 0 : n * n, 0.25f), c(n * n);
  std::vector<core::bf16> ab(bf ? n * n : 0, core::to_bf16(0.5f)),
      bb(bf ? n * n : 0, core::to_bf16(0.25f));
  auto once = [&] {
    if (bf)
      gemm_bf16(false, false, n, n, n, 1.0f, ab.data(), n, bb.data(), n, 0.0f, c.data(), n);
    else
      gemm_f32(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  once();  // warm-up: first touch of c, the library's lazy initialisation
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const double t0 = core::thread_cpu_seconds();
    once();
    best = std::min(best, core::thread_cpu_seconds() - t0);
  }
  return 2.0 * static_cast<double>(n * n * n) / std::max(best, 1e-9);
}

}  // namespace longseq::kernels
