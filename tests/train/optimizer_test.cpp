// AdamW against the closed form of torch.optim.AdamW (two steps by hand in fp64), the schedule's
// values at its corners, clipping, and the global norm over ranks of a real comm group.
#include "longseq/train/optimizer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"

namespace {

namespace tr = longseq::train;

TEST(AdamW, MatchesClosedFormWithDecoupledDecay) {
  tr::AdamWConfig c;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  std::vector<float> p = {1.0f, -2.0f}, m(2, 0.0f), v(2, 0.0f);
  std::vector<uint8_t> decay = {1, 0};
  const std::vector<std::vector<float>> grads = {{0.5f, 0.25f}, {-1.0f, 0.125f}};
  std::vector<double> rp = {1.0, -2.0}, rm(2, 0.0), rv(2, 0.0);
  for (int step = 0; step < 2; ++step) {
    const double lr = 0.01 * (step + 1);
    tr::adamw_step(p.data(), grads[step].data(), m.data(), v.data(), decay.data(), 2, c, lr, step);
    for (int i = 0; i < 2; ++i) {
      const double g = grads[step][i];
      rp[i] *= 1.0 - lr * (decay[i] ? c.weight_decay : 0.0);  // torch: decay first, on p_{t-1}
      rm[i] = c.beta1 * rm[i] + (1 - c.beta1) * g;
      rv[i] = c.beta2 * rv[i] + (1 - c.beta2) * g * g;
      const double mh = rm[i] / (1 - std::pow(c.beta1, step + 1));
      const double vh = rv[i] / (1 - std::pow(c.beta2, step + 1));
      rp[i] -= lr * mh / (std::sqrt(vh) + c.eps);
    }
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(p[i], rp[i], 1e-6) << "step " << step << " i " << i;
  }
}

TEST(Schedule, WarmupThenCosineToMin) {
  tr::AdamWConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup = 4;
  EXPECT_DOUBLE_EQ(tr::learning_rate(c, 0, 14), 0.25);
  EXPECT_DOUBLE_EQ(tr::learning_rate(c, 3, 14), 1.0);
  EXPECT_DOUBLE_EQ(tr::learning_rate(c, 4, 14), 1.0);
  EXPECT_NEAR(tr::learning_rate(c, 9, 14), 0.55, 1e-12);  // half way: (1 + 0.1) / 2
  EXPECT_NEAR(tr::learning_rate(c, 14, 14), 0.1, 1e-12);
  EXPECT_NEAR(tr::learning_rate(c, 100, 14), 0.1, 1e-12);
}

TEST(Clip, ScalesOnlyAboveTheThreshold) {
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_EQ(tr::clip_gradients(g.data(), 2, 5.0, 10.0), 1.0);
  EXPECT_EQ(g[0], 3.0f);
  EXPECT_DOUBLE_EQ(tr::clip_gradients(g.data(), 2, 5.0, 1.0), 0.2);
  EXPECT_FLOAT_EQ(g[0], 0.6f);
  EXPECT_FLOAT_EQ(g[1], 0.8f);
}

TEST(Clip, GlobalNormSumsEveryRanksShard) {
  longseq::comm::Options o;
  o.world = 3;
  std::vector<double> norms(3);
  longseq::comm::run_local(o, [&](longseq::comm::Group& g) {
    std::vector<float> shard = {static_cast<float>(g.rank() + 1), 2.0f};
    norms[g.rank()] = tr::global_grad_norm(shard.data(), 2, g);
  });
  for (double n : norms) EXPECT_DOUBLE_EQ(n, std::sqrt(1 + 4 + 9 + 3 * 4.0));
}

TEST(AdamW, RefusesBadHyperparameters) {
  tr::AdamWConfig c;
  c.min_lr = 1.0;
  c.lr = 0.5;
  try {
    c.validate();
    ADD_FAILURE();
  } catch (const longseq::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--min-lr 1 must be in [0, --lr 0.5]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
