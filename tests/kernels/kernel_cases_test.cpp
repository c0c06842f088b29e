// Every case of the kernel registry (kernel_cases.hpp) on every backend of this build against the
// fp64 reference: one parameterised test, named KernelCases.<backend>_<op>_<shape>. A new device
// instantiates the same suite over its own backend (INSTANTIATE_TEST_SUITE_P with
// ::testing::Combine of its backends and kernel_cases()).
#include "kernel_cases.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>

namespace {

namespace lt = longseq::test;

using Param = std::tuple<std::shared_ptr<lt::KernelBackend>, lt::KernelCase>;

class KernelCases : public ::testing::TestWithParam<Param> {};

TEST_P(KernelCases, MatchesTheFp64Reference) {
  const auto& [backend, c] = GetParam();
  RecordProperty("flops", std::to_string(c.flops));
  RecordProperty("bytes", std::to_string(c.bytes));
  EXPECT_GT(c.flops, 0);
  EXPECT_GT(c.bytes, 0);
  const std::vector<lt::CaseOutput> outs = c.run(*backend);
  ASSERT_FALSE(outs.empty());
  for (const lt::CaseOutput& o : outs) {
    EXPECT_FALSE(o.want.empty()) << o.name;
    lt::expect_close(o.got, o.want, o.atol, o.rtol,
                     backend->name() + " " + c.op + " " + c.shape + " " + o.name);
  }
}

std::string case_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [backend, c] = info.param;
  return backend->name() + "_" + c.op + "_" + c.shape;
}

INSTANTIATE_TEST_SUITE_P(Host, KernelCases,
                         ::testing::Combine(::testing::ValuesIn(lt::host_backends()),
                                            ::testing::ValuesIn(lt::kernel_cases())),
                         case_name);

}  // namespace
