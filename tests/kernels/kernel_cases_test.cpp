// Every case of the kernel registry (kernel_cases.hpp) on every backend of this build against the
// fp64 reference: one parameterised test, named KernelCases.<backend>_<op>_<shape>. A new device
// instantiates the same suite over its own backend (INSTANTIATE_TEST_SUITE_P with
// ::testing::Combine of its backends and kernel_cases()).
#include "kernel_cases.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>

namespace {

namespace lt = longseq::test;

using Param = std::tuple<std::shared_ptr<lt::KernelBackend>, lt::KernelCase>;

class KernelCases : public ::testing::TestWithParam<Param> {};

TEST_P(KernelCases, MatchesTheFp64Reference) {
  const auto& [backend, c] = GetParam();
  lt::check_case(*backend, c);
}

// Whether every value of `o` is within its tolerance (expect_close's test, without reporting).
bool within(const lt::CaseOutput& o) {
  for (size_t i = 0; i < o.got.size(); ++i)
    if (!(std::fabs(o.got[i] - o.want[i]) <= o.atol + o.rtol * std::fabs(o.want[i]))) return false;
  return true;
}

// The tolerances can fail: for every case and output, the ref backend's result (which passes)
// with one value moved by 1e-3 of the output's largest magnitude (1e-3 where all are 0; the value
// of that largest magnitude, where relative tolerances are loosest) is rejected. A kernel off by
// a part in a thousand, far less than a wrong index, sign or lost tile moves it, fails its case.
TEST(KernelCaseTolerances, RejectAPerturbationOfOnePartInAThousand) {
  const auto ref = lt::host_backends().front();
  ASSERT_EQ(ref->name(), "ref");
  for (const lt::KernelCase& c : lt::kernel_cases()) {
    const std::vector<lt::CaseOutput> outs = c.run(*ref);
    for (const lt::CaseOutput& o : outs) {
      const std::string what = c.op + " " + c.shape + " " + o.name;
      ASSERT_TRUE(within(o)) << what;
      if (o.want.empty()) continue;
      size_t at = 0;
      for (size_t i = 0; i < o.want.size(); ++i)
        if (std::fabs(o.want[i]) > std::fabs(o.want[at])) at = i;
      const double delta = std::max(1e-3 * std::fabs(o.want[at]), 1e-3);
      lt::CaseOutput bad = o;
      bad.got[at] += delta;
      EXPECT_FALSE(within(bad)) << what << ": +" << delta << " at " << at << " passes (atol "
                                << o.atol << ", rtol " << o.rtol << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Host, KernelCases,
                         ::testing::Combine(::testing::ValuesIn(lt::host_backends()),
                                            ::testing::ValuesIn(lt::kernel_cases())),
                         lt::case_name);

}  // namespace
