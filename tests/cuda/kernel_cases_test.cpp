// Every case of the kernel registry (tests/kernels/kernel_cases.hpp) on the GPU (cuda_backend.hpp)
// against the fp64 reference, with the registry's per-output tolerances: the suite of
// tests/kernels/kernel_cases_test.cpp instantiated over the CUDA backend, named
// CudaKernelCases.MatchesTheFp64Reference/cuda_<op>_<shape>. Without a visible GPU each case
// reports skipped, naming the runtime's reason.
#include "kernels/kernel_cases.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_test_util.hpp"

namespace {

namespace lt = longseq::test;

using Param = std::tuple<std::shared_ptr<lt::KernelBackend>, lt::KernelCase>;

class CudaKernelCases : public ::testing::TestWithParam<Param> {};

TEST_P(CudaKernelCases, MatchesTheFp64Reference) {
  LONGSEQ_NEED_GPU();
  const auto& [backend, c] = GetParam();
  lt::check_case(*backend, c);
}

std::vector<std::shared_ptr<lt::KernelBackend>> cuda_backends() {
  return {std::make_shared<lt::CudaBackend>()};
}

// The registry's cases of the ops the backend has (KernelBackend::supports).
std::vector<lt::KernelCase> cuda_cases() {
  std::vector<lt::KernelCase> out;
  const lt::CudaBackend b;
  for (const lt::KernelCase& c : lt::kernel_cases())
    if (b.supports(c.op)) out.push_back(c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaKernelCases,
                         ::testing::Combine(::testing::ValuesIn(cuda_backends()),
                                            ::testing::ValuesIn(cuda_cases())),
                         lt::case_name);

}  // namespace
