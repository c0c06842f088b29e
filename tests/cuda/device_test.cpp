// kernels/cuda/device: the runtime query and activation's refusal work with or without a GPU; on a
// GPU, core::Buffers on the device round-trip host data, out of memory is an error naming the
// tensor and its bytes (also when the memory pool holds freed blocks that must be given back
// first), freed buffers are reused from the pool without taking more device memory, events time a
// stream. Without a visible GPU every test that needs one
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

// The pool (device.hpp, activate): a freed buffer's block serves the next buffer of that size,
// so the pool takes nothing more from the device, and the byte counts follow the buffers.
TEST(CudaDevice, AFreedBufferIsReusedFromThePool) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU visible: " << kcu::runtime_info().status;
  const longseq::core::Device gpu = kcu::activate(0);
  if (!kcu::memory_caching()) GTEST_SKIP() << "LONGSEQ_CUDA_CACHING=0: no pool";
  const size_t n = (size_t{64} << 20) / sizeof(float) + 7;  // 64 MiB and an odd tail
  const kcu::MemoryStats before = kcu::memory_stats(0);
  { longseq::core::Buffer<float> a(n, gpu, longseq::core::Uninit{}, "first"); }
  const kcu::MemoryStats freed = kcu::memory_stats(0);
  EXPECT_EQ(freed.current, before.current);
  EXPECT_GE(freed.peak, before.current + n * sizeof(float));
  EXPECT_GE(freed.reserved, n * sizeof(float)) << "the pool gave the freed block back";
  longseq::core::Buffer<float> b(n, gpu, longseq::core::Uninit{}, "second");
  const kcu::MemoryStats again = kcu::memory_stats(0);
  EXPECT_EQ(again.current, before.current + n * sizeof(float));
  EXPECT_EQ(again.reserved, freed.reserved) << "the second buffer took new device memory";
  // The reused block is ordinary memory: a round trip through it.
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<float>(i % 1000) - 0.5f;
  longseq::core::copy_bytes(b.data(), gpu, h.data(), longseq::core::Device::cpu(), n * 4);
  std::vector<float> back(n, 0.0f);
  longseq::core::copy_bytes(back.data(), longseq::core::Device::cpu(), b.data(), gpu, n * 4);
  EXPECT_EQ(back, h);
}

// A pool that keeps a large freed block must still fit a larger buffer that only fits once the
// block is given back: 40% of the card held free in the pool, then 65% asked for.
TEST(CudaDevice, FreedBlocksAreGivenBackWhenALargerBufferNeedsThem) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU visible: " << kcu::runtime_info().status;
  const longseq::core::Device gpu = kcu::activate(0);
  if (!kcu::memory_caching()) GTEST_SKIP() << "LONGSEQ_CUDA_CACHING=0: no pool";
  const size_t total = kcu::runtime_info().gpus[0].total_bytes;
  {
    longseq::core::Buffer<unsigned char> a(total / 100 * 40, gpu, longseq::core::Uninit{}, "held");
  }
  EXPECT_GE(kcu::memory_stats(0).reserved, total / 100 * 40);
  longseq::core::Buffer<unsigned char> big(total / 100 * 65, gpu, longseq::core::Uninit{}, "big");
  EXPECT_EQ(big.size(), total / 100 * 65);
  // What the pool holds now is the big buffer (and at most a little scratch), not the 40% too.
  EXPECT_LE(kcu::memory_stats(0).reserved, total / 100 * 67) << "the freed block was kept";
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
