// The optimizer's reductions on a GPU (kernels/cuda/adamw.hpp): sum_squares against the host's
// fp64 sum (equal to rounding: a different order; the same bits run to run), scale against the
// host's fp32 product (bit for bit), for sizes around the kernel's fixed block split (0, 1, fewer
// elements than blocks, an odd large count).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_util.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/kernels/cuda/adamw.hpp"

namespace {

namespace kcu = longseq::kernels::cuda;
namespace ts = longseq::test;

TEST(CudaOptim, SumSquaresAndScaleMatchTheHost) {
  LONGSEQ_NEED_GPU();
  const longseq::core::Exec ex = ts::gpu_exec();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{1000003}}) {
    std::vector<float> x(static_cast<size_t>(n));
    longseq::core::fill_normal(x.data(), x.size(), 17 + static_cast<uint64_t>(n));
    auto d = ts::upload(x);
    double want = 0.0;
    for (float v : x) want += static_cast<double>(v) * v;
    const double got = kcu::sum_squares(d.data(), n, ex);
    EXPECT_NEAR(got, want, 1e-12 * want) << "n " << n;
    EXPECT_EQ(kcu::sum_squares(d.data(), n, ex), got) << "n " << n << ": not repeatable";
    kcu::scale(d.data(), n, 0.37f, ex);
    const std::vector<float> scaled = ts::download(d, x.size());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(scaled[i], x[i] * 0.37f) << "n " << n << " i " << i;
  }
  EXPECT_THROW(kcu::sum_squares(nullptr, 1, longseq::core::Exec::cpu(1)), longseq::core::Error);
}

}  // namespace
