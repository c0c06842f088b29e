#pragma once
// Helpers of tests/cuda: whether a GPU is visible (tests that need one skip naming the runtime's
// reason otherwise), and host <-> device copies of std::vector through core::Buffer.
//
// Streams: the tests run kernels on the legacy default stream (Exec::gpu(device, nullptr)), the
// stream core::Buffer's blocking copies run on, so a copy after a kernel sees its result; the one
// test on a non-blocking kernels::cuda::Stream synchronises it before reading back.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "longseq/core/device.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/kernels/cuda/device.hpp"

namespace longseq::test {

inline bool have_gpu() {
  return !kernels::cuda::runtime_info().gpus.empty();
}

inline std::string no_gpu_reason() {
  return "no GPU visible: " + kernels::cuda::runtime_info().status;
}

#define LONGSEQ_NEED_GPU() \
  if (!::longseq::test::have_gpu()) GTEST_SKIP() << ::longseq::test::no_gpu_reason()

/// GPU 0, activated, and a context on its legacy default stream.
inline core::Exec gpu_exec() {
  return core::Exec::gpu(kernels::cuda::activate(0), nullptr);
}

/// A device copy of `v` (at least one element, so that empty inputs still get a valid pointer).
template <class T>
core::Buffer<T> upload(const std::vector<T>& v, const char* name = "test") {
  core::Buffer<T> host(v.empty() ? 1 : v.size());
  for (size_t i = 0; i < v.size(); ++i) host[i] = v[i];
  return host.to(core::Device::cuda(0), name);
}

/// The first n elements of a device buffer, on the host.
template <class T>
std::vector<T> download(const core::Buffer<T>& d, size_t n) {
  const core::Buffer<T> host = d.to(core::Device::cpu());
  return std::vector<T>(host.begin(), host.begin() + n);
}

}  // namespace longseq::test
