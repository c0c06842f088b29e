// The per-op account (core/op_account.hpp): exclusive nesting, weak scopes, transfers, and
// threads without an account.
#include "longseq/core/op_account.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "longseq/core/timer.hpp"

namespace core = longseq::core;
using core::Op;

namespace {
// Spins for `s` seconds of wall time (sleeping would do too; spinning keeps the clock moving on
// a loaded machine the same way).
void spin(double s) {
  const double t0 = core::now_seconds();
  while (core::now_seconds() - t0 < s) {
  }
}
}  // namespace

TEST(OpAccount, NestedScopesAreExclusiveAndAddUpToTheOuterScope) {
  core::OpTimes t;
  double wall = 0;
  {
    core::OpAccountInstall install(&t);
    core::ScopedTimer w(&wall);
    core::OpScope outer(Op::norm_rope_swiglu);
    spin(0.002);
    {
      core::OpScope inner(Op::attn_forward);
      spin(0.003);
    }
    spin(0.001);
  }
  EXPECT_GE(t[Op::attn_forward], 0.003);
  EXPECT_GE(t[Op::norm_rope_swiglu], 0.003);
  // The two add up to the outer scope's wall time (timer reads differ by microseconds).
  EXPECT_NEAR(t.total(), wall, 1e-3);
  EXPECT_LE(t.total(), wall);
  for (int i = 0; i < core::kNumOps; ++i) {
    if (i != static_cast<int>(Op::attn_forward) && i != static_cast<int>(Op::norm_rope_swiglu)) {
      EXPECT_EQ(t.s[static_cast<size_t>(i)], 0.0) << core::op_name(static_cast<Op>(i));
    }
  }
}

TEST(OpAccount, WeakScopeTakesOverOnlyFromPointwiseOrNothing) {
  core::OpTimes t;
  {
    core::OpAccountInstall install(&t);
    {
      core::OpScope lm(Op::lm_head_loss);
      core::OpScope g(Op::gemm, /*weak=*/true);  // a GEMM inside the LM head stays the head's
      spin(0.001);
    }
    EXPECT_EQ(t[Op::gemm], 0.0);
    {
      core::OpScope pw(Op::norm_rope_swiglu);
      core::OpScope g(Op::gemm, /*weak=*/true);
      spin(0.001);
    }
    EXPECT_GE(t[Op::gemm], 0.001);
    const double before = t[Op::gemm];
    {
      core::OpScope g(Op::gemm, /*weak=*/true);  // no scope open: charged
      spin(0.001);
    }
    EXPECT_GE(t[Op::gemm], before + 0.001);
  }
  EXPECT_GE(t[Op::lm_head_loss], 0.001);
}

TEST(OpAccount, TransferMovesChargedTime) {
  core::OpTimes t;
  {
    core::OpAccountInstall install(&t);
    core::OpScope a(Op::attn_backward);
    spin(0.002);
    core::op_transfer(Op::attn_backward, Op::comm_wait, 0.001);
  }
  EXPECT_DOUBLE_EQ(t[Op::comm_wait], 0.001);
  EXPECT_GE(t[Op::attn_backward], 0.001 - 1e-9);
}

TEST(OpAccount, ThreadsWithoutAnAccountRecordNothing) {
  core::OpTimes t;
  core::OpAccountInstall install(&t);
  std::thread th([] {
    EXPECT_EQ(core::op_account(), nullptr);
    core::OpScope s(Op::gemm);
    spin(0.001);
  });
  th.join();
  EXPECT_EQ(t.total(), 0.0);
  EXPECT_EQ(core::op_account(), &t);
}

TEST(OpAccount, NamesAreDistinct) {
  for (int i = 0; i < core::kNumOps; ++i)
    for (int j = i + 1; j < core::kNumOps; ++j)
      EXPECT_STRNE(core::op_name(static_cast<Op>(i)), core::op_name(static_cast<Op>(j)));
}
