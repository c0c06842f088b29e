// core/device: device names parse and print, an execution context for a GPU is refused where a
// CPU's is needed, host buffers copy through the device layer, and a buffer on a device whose
// backend never registered fails with a message naming the device (no allocation anywhere).
// Buffers made with an explicit Device::cpu() are counted (cpu_device_memory_stats: what the
// planner's GPU memory model is checked against without a GPU), host-only ones are not.
#include "longseq/core/device.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/tensor.hpp"

namespace {

using longseq::core::Buffer;
using longseq::core::Device;
using longseq::core::DeviceKind;
using longseq::core::Error;
using longseq::core::Exec;

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:7"), Device::cuda(7));
  EXPECT_EQ(Device::parse("cuda:12").index, 12);
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
  EXPECT_EQ(Device::parse(Device::cuda(5).str()), Device::cuda(5));
  EXPECT_NE(Device::cuda(0), Device::cuda(1));
  EXPECT_NE(Device::cuda(0), Device::cpu());
}

TEST(Device, RefusesBadNamesNamingTheComponentAndText) {
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:1x", "CUDA", "cpu:0", "cuda:0:1"}) {
    const std::string msg = error_of([&] { Device::parse(bad, "train"); });
    EXPECT_EQ(msg.rfind("[train] device '" + std::string(bad) + "'", 0), 0u) << bad << ": " << msg;
  }
}

TEST(Exec, CpuContextsGiveTheirBudgetAndGpuContextsAreRefused) {
  EXPECT_EQ(Exec(4).cpu_threads("k"), 4);
  EXPECT_EQ(Exec::cpu(0).cpu_threads("k"), 1);  // <= 0 means 1, as the kernels always read it
  EXPECT_EQ(Exec::cpu(-3).cpu_threads("k"), 1);
  EXPECT_TRUE(Exec(2).device.is_cpu());
  int dummy_stream = 0;
  const Exec gpu = Exec::gpu(Device::cuda(1), &dummy_stream);
  EXPECT_EQ(gpu.stream, &dummy_stream);
  const std::string msg = error_of([&] { gpu.cpu_threads("rmsnorm_forward"); });
  EXPECT_NE(msg.find("[kernels] rmsnorm_forward is a CPU kernel but was called with a cuda:1 "
                     "context"),
            std::string::npos)
      << msg;
}

TEST(DeviceBuffer, HostBuffersCopyAndMoveBetweenHostBuffers) {
  Buffer<int> a(5);
  for (int i = 0; i < 5; ++i) a[i] = i * i - 2;
  const Buffer<int> b = a.to(Device::cpu());
  EXPECT_EQ(b.device(), Device::cpu());
  EXPECT_NE(b.data(), a.data());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b[i], i * i - 2);
  Buffer<int> c(5);
  c.copy_from(b);
  EXPECT_TRUE(std::equal(c.begin(), c.end(), a.begin()));
  // Empty buffers copy too (zero bytes, no device call).
  Buffer<int> e0(0), e1(0);
  e1.copy_from(e0);
  EXPECT_EQ(e1.size(), 0u);
}

TEST(DeviceBuffer, ADeviceWithoutARegisteredBackendIsAnErrorNamingIt) {
  // In a build with CUDA this test binary never activates it (tests/cuda does), so the registry
  // has no cuda entry here either way.
  const std::string msg = error_of([] { Buffer<float> b(16, Device::cuda(2), "kv"); });
  EXPECT_NE(msg.find("[core] no memory backend for cuda:2"), std::string::npos) << msg;
  const Buffer<float> host(4);
  const std::string msg2 = error_of([&] { (void)host.to(Device::cuda(0)); });
  EXPECT_NE(msg2.find("no memory backend for cuda:0"), std::string::npos) << msg2;
}

TEST(Device, CpuDeviceBuffersAreCounted) {
  using longseq::core::cpu_device_memory_stats;
  using longseq::core::Tensor;
  const size_t base = cpu_device_memory_stats().current;
  longseq::core::reset_cpu_device_memory_peak();
  {
    Buffer<float> host(1000);  // host-only: not counted
    EXPECT_EQ(cpu_device_memory_stats().current, base);
    Buffer<float> a(1000, Device::cpu(), "a");
    EXPECT_EQ(cpu_device_memory_stats().current, base + 4000);
    Buffer<float> b = host.to(Device::cpu(), "b");  // a copy made on a device: counted
    EXPECT_EQ(cpu_device_memory_stats().current, base + 8000);
    {
      Tensor<double> t(longseq::core::Shape{3, 5}, Device::cpu(), longseq::core::Uninit{}, "t");
      Buffer<uint8_t> empty(0, Device::cpu(), "empty");  // a 64-byte line, as on a GPU
      EXPECT_EQ(cpu_device_memory_stats().current, base + 8000 + 120 + 64);
    }
    EXPECT_EQ(cpu_device_memory_stats().peak, base + 8000 + 120 + 64);
    // A move carries the count with the memory: released once, by its last owner.
    Buffer<float> moved = std::move(a);
    a = Buffer<float>();
    EXPECT_EQ(cpu_device_memory_stats().current, base + 8000);
  }
  EXPECT_EQ(cpu_device_memory_stats().current, base);
  EXPECT_EQ(cpu_device_memory_stats().peak, base + 8000 + 120 + 64);
  longseq::core::reset_cpu_device_memory_peak();
  EXPECT_EQ(cpu_device_memory_stats().peak, base);
  // Threads allocating at once (ranks of one process) count right.
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([] {
      for (int k = 0; k < 1000; ++k) Buffer<float> x(16, Device::cpu(), "x");
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(cpu_device_memory_stats().current, base);
  EXPECT_LE(cpu_device_memory_stats().peak, base + 4 * 64);
  EXPECT_GE(cpu_device_memory_stats().peak, base + 64);
}

// No backend registered in this binary: every pointer is the host's, and copy_any is a memmove
// (overlap allowed). With a backend: tests/comm/device_buffers_test.cpp.
TEST(Device, WithoutABackendLocateSaysCpuAndCopyAnyMemmoves) {
  std::vector<int> v(10);
  for (int i = 0; i < 10; ++i) v[static_cast<size_t>(i)] = i;
  EXPECT_EQ(longseq::core::locate(v.data()), Device::cpu());
  EXPECT_EQ(longseq::core::locate(nullptr), Device::cpu());
  longseq::core::copy_any(v.data() + 1, v.data(), 5 * sizeof(int));
  EXPECT_EQ(v, (std::vector<int>{0, 0, 1, 2, 3, 4, 6, 7, 8, 9}));
  longseq::core::copy_any(nullptr, nullptr, 0);  // nothing to copy, nothing touched
}

}  // namespace
