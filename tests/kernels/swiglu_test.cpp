// The fast SwiGLU (kernels/cpu/swiglu) against its fp64 twin (kernels/ref/swiglu), whose own
// gradients are checked by finite differences in ref_ops_test.cpp and against PyTorch in
// kernels.ref_torch. Gates normal(0, 3) (both tails of the sigmoid), up and dout standard normal.
// Tolerances: 1e-6 + 1e-6 rel (a few fp32 ulps: one exp and a handful of products per value).
#include "longseq/kernels/cpu/swiglu.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "longseq/kernels/ref/swiglu.hpp"
#include "model/model_test_util.hpp"

namespace {

namespace kc = longseq::kernels::cpu;
namespace kr = longseq::kernels::ref;
namespace lt = longseq::test;

TEST(CpuSwiglu, MatchesReference) {
  const int64_t n = 64;
  auto g = lt::normal_f(n, 10, 3.0), u = lt::normal_f(n, 11), dout = lt::normal_f(n, 12);
  std::vector<float> out(n), dg(n), du(n);
  kc::swiglu_forward(g.data(), u.data(), n, out.data(), 1);
  kc::swiglu_backward(dout.data(), g.data(), u.data(), n, dg.data(), du.data(), 1);
  auto gd = lt::widen(g), ud = lt::widen(u), dd = lt::widen(dout);
  std::vector<double> ro(n), rdg(n), rdu(n);
  kr::swiglu_forward(gd.data(), ud.data(), n, ro.data());
  kr::swiglu_backward(dd.data(), gd.data(), ud.data(), n, rdg.data(), rdu.data());
  lt::expect_close(out, ro, 1e-6, 1e-6, "swiglu out");
  lt::expect_close(dg, rdg, 1e-6, 1e-6, "swiglu dgate");
  lt::expect_close(du, rdu, 1e-6, 1e-6, "swiglu dup");
  // The aliasing the MLP relies on: dgate over gate, dup over up.
  std::vector<float> ga = g, ua = u;
  kc::swiglu_backward(dout.data(), ga.data(), ua.data(), n, ga.data(), ua.data());
  EXPECT_EQ(ga, dg);
  EXPECT_EQ(ua, du);
}

}  // namespace
