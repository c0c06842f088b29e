// kernels/cuda/device: the runtime query works with or without a GPU; on a GPU, buffers round-trip
// host data, out of memory is an error naming the tensor and its bytes, events time a stream.
// Without a visible GPU every test that needs one reports skipped (never passed).
#include "longseq/kernels/cuda/device.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "longseq/core/error.hpp"

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

TEST(CudaDevice, BufferRoundTripsOddSizes) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU visible: " << kcu::runtime_info().status;
  for (size_t n : {size_t{1}, size_t{7}, size_t{1000003}}) {
    std::vector<float> in(n), out(n, -1.0f);
    for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) * 0.5f - 3.0f;
    kcu::DeviceBuffer<float> d(n, "roundtrip");
    d.copy_from_host(in.data(), n);
    d.copy_to_host(out.data(), n);
    EXPECT_EQ(in, out) << n;
  }
}

TEST(CudaDevice, OutOfMemoryNamesTheTensorAndItsBytes) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU visible: " << kcu::runtime_info().status;
  const size_t too_many = kcu::runtime_info().gpus[0].total_bytes * 4 / sizeof(float);
  try {
    kcu::DeviceBuffer<float> d(too_many, "the_kv_block");
    ADD_FAILURE() << "allocated " << too_many * 4 << " bytes";
  } catch (const longseq::core::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[cuda] out of device memory for the_kv_block"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(too_many * sizeof(float))), std::string::npos) << msg;
  }
  // The failed allocation leaves the device usable.
  kcu::DeviceBuffer<float> ok(16, "after_oom");
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
