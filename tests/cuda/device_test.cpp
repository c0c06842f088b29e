// kernels/cuda/device: the runtime query and activation's refusal work with or without a GPU; on a
// GPU, core::Buffers on the device round-trip host data, out of memory is an error naming the
// tensor and its bytes, events time a stream. Without a visible GPU every test that needs one
// reports skipped (never passed).
#include "longseq/kernels/cuda/device.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/tensor.hpp"

namespace {

namespace kcu = longseq::kernels::cuda;

bool have_gpu() {
  return !kcu::runtime_info().gpus.empty();
}

TEST(CudaDevice, RuntimeInfoNeverThrowsAndNamesTheBuildArchitectures) {
  const kcu::RuntimeInfo r = kcu::runtime_info();
  EXPECT_GE(r.runtime_version, 12000);
  EXPECT_FALSE(r.archs.empty());
  if (r.gpus.empty()) {
    EXPECT_NE(r.status, "ok") << "no GPU listed, yet the runtime reported no error";
  } else {
    EXPECT_EQ(r.status, "ok");
    for (const kcu::GpuInfo& g : r.gpus) {
      EXPECT_FALSE(g.name.empty());
      EXPECT_GT(g.total_bytes, 0u);
    }
  }
  EXPECT_EQ(kcu::version_string(13000), "13.0");
  EXPECT_EQ(kcu::version_string(12080), "12.8");
}

TEST(CudaDevice, ActivateRefusesAGpuThatIsNotThere) {
  const int n = static_cast<int>(kcu::runtime_info().gpus.size());
  try {
    kcu::activate(n + 3);
    ADD_FAILURE() << "activated GPU " << n + 3 << " of " << n;
  } catch (const longseq::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[cuda] no GPU " + std::to_string(n + 3)),
              std::string::npos)
        << e.what();
  }
}

TEST(CudaDevice, BufferRoundTripsOddSizes) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU visible: " << kcu::runtime_info().status;
  const longseq::core::Device gpu = kcu::activate(0);
  for (size_t n : {size_t{1}, size_t{7}, size_t{1000003}}) {
    longseq::core::Buffer<float> in(n);
    for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) * 0.5f - 3.0f;
    const longseq::core::Buffer<float> d = in.to(gpu, "roundtrip");
    EXPECT_EQ(d.device(), gpu);
    // Device to device, then back to the host.
    const longseq::core::Buffer<float> d2 = d.to(gpu, "roundtrip2");
    const longseq::core::Buffer<float> out = d2.to(longseq::core::Device::cpu());
    EXPECT_TRUE(std::equal(in.begin(), in.end(), out.begin())) << n;
  }
  // A zeroed device buffer reads back as zeros.
  const longseq::core::Buffer<int32_t> z(1001, gpu, "zeros");
  const longseq::core::Buffer<int32_t> zh = z.to(longseq::core::Device::cpu());
  EXPECT_TRUE(std::all_of(zh.begin(), zh.end(), [](int32_t x) { return x == 0; }));
}

TEST(CudaDevice, OutOfMemoryNamesTheTensorAndItsBytes) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU visible: " << kcu::runtime_info().status;
  const longseq::core::Device gpu = kcu::activate(0);
  const size_t too_many = kcu::runtime_info().gpus[0].total_bytes * 4 / sizeof(float);
  try {
    longseq::core::Buffer<float> d(too_many, gpu, longseq::core::Uninit{}, "the_kv_block");
    ADD_FAILURE() << "allocated " << too_many * 4 << " bytes";
  } catch (const longseq::core::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[cuda] out of device memory for the_kv_block on cuda:0"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find(std::to_string(too_many * sizeof(float))), std::string::npos) << msg;
  }
  // The failed allocation leaves the device usable.
  longseq::core::Buffer<float> ok(16, gpu, "after_oom");
  EXPECT_EQ(ok.size(), 16u);
}

TEST(CudaDevice, EventsTimeAStream) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU visible: " << kcu::runtime_info().status;
  kcu::Stream s;
  kcu::Event a, b;
  a.record(s);
  b.record(s);
  b.synchronize();
  EXPECT_GE(kcu::Event::elapsed_ms(a, b), 0.0f);
}

}  // namespace
