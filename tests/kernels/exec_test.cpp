// Every public CPU kernel takes its execution context as core::Exec (design.md §10) and refuses a
// GPU's, naming itself, before it touches a pointer: a CPU loop over device memory would fault or,
// worse, read garbage. The pointers below are never dereferenced, which is the point.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "longseq/core/device.hpp"
#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/attention.hpp"
#include "longseq/kernels/cpu/linear.hpp"
#include "longseq/kernels/cpu/rmsnorm.hpp"
#include "longseq/kernels/cpu/rope.hpp"
#include "longseq/kernels/cpu/swiglu.hpp"
#include "longseq/kernels/gemm.hpp"

namespace {

namespace kc = longseq::kernels::cpu;
using longseq::core::Device;
using longseq::core::Exec;

TEST(CpuKernelExec, EveryEntryRefusesAGpuContextNamingItself) {
  const Exec gpu = Exec::gpu(Device::cuda(0), nullptr);
  float* p = nullptr;
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"rmsnorm_forward", [&] { kc::rmsnorm_forward(p, p, 1, 1, 1e-5f, p, p, gpu); }},
      {"rmsnorm_backward", [&] { kc::rmsnorm_backward(p, p, p, p, 1, 1, p, p, false, gpu); }},
      {"swiglu_forward", [&] { kc::swiglu_forward(p, p, 1, p, gpu); }},
      {"swiglu_backward", [&] { kc::swiglu_backward(p, p, p, 1, p, p, gpu); }},
      {"linear_forward", [&] { kc::linear_forward(p, p, 1, 1, 1, p, false, gpu); }},
      {"merge_partials", [&] { kc::merge_partials(p, p, p, p, 1, 1, 1, gpu); }},
      {"attention_delta", [&] { kc::attention_delta(p, p, 1, 1, 1, gpu, p); }},
      {"gemm_f32_parallel",
       [&] {
         longseq::kernels::gemm_f32_parallel(gpu, false, false, 1, 1, 1, 1.0f, p, 1, p, 1, 0.0f, p,
                                             1);
       }},
  };
  for (const auto& [name, call] : calls) {
    try {
      call();
      ADD_FAILURE() << name << " ran with a GPU context";
    } catch (const longseq::core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("[kernels] " + name + " is a CPU kernel"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(CpuKernelExec, AThreadCountIsACpuContext) {
  // The implicit int -> Exec keeps `threads` call sites meaning what they meant.
  std::vector<float> x = {1.0f, -2.0f, 3.0f, 0.5f}, w = {1.0f, 1.0f}, out(4), rstd(2);
  kc::rmsnorm_forward(x.data(), w.data(), 2, 2, 0.0f, out.data(), rstd.data(), 3);
  EXPECT_NEAR(out[0] * out[0] + out[1] * out[1], 2.0f, 1e-5f);
}

}  // namespace
