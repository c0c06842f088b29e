// ZeRO-3 reduce-scatters posted by release_grad (they overlap the backward): after
// finish_grads() / grads() every shard holds the sum of every rank's contributions, with more units
// released than kPendingGrads and one unit released twice (the tied embedding), at 1, 2 and 3
// ranks; the gradient accessors complete pending transfers themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/train/zero.hpp"
#include "train_test_util.hpp"

namespace tr = longseq::train;
namespace comm = longseq::comm;

namespace {
// Rank r's contribution to element i of unit u, pass p (distinct per rank, unit and pass).
float contribution(int r, int u, int p, int64_t i) {
  return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.3 * r + 0.7 * u + 2.1 * p));
}
}  // namespace

TEST(ZeroOverlap, PostedReduceScattersSumEveryRanksGradient) {
  const longseq::model::ParamLayout layout(longseq::testing::tiny_config().model);
  const int nu = layout.num_units();
  ASSERT_GT(static_cast<size_t>(nu), tr::ShardedState::kPendingGrads);
  for (int world : {1, 2, 3}) {
    comm::Options o;
    o.backend = "local";
    o.world = world;
    comm::run(o, [&](comm::Group& g) {
      tr::ShardedState st(layout, g, 7);
      st.zero_grads();
      // Every unit once, in backward order, then unit 0 a second time (as the embedding).
      std::vector<std::pair<int, int>> order;
      for (int u = nu - 1; u >= 0; --u) order.push_back({u, 0});
      order.push_back({0, 1});
      for (auto [u, p] : order) {
        float* buf = st.acquire_grad(u);
        for (int64_t i = 0; i < layout.units()[u].size; ++i)
          buf[i] = contribution(g.rank(), u, p, i);
        st.release_grad(u);
      }
      for (int u = 0; u < nu; ++u) {
        const float* shard = st.grad_shard(u);  // completes what is still in flight
        const int64_t b = st.shard_begin(u);
        for (int64_t j = 0; j < st.shard_size(u); ++j) {
          const int64_t i = b + j;
          double want = 0;
          if (i < layout.units()[u].size)
            for (int r = 0; r < g.size(); ++r)
              for (int p = 0; p < (u == 0 ? 2 : 1); ++p) want += contribution(r, u, p, i);
          ASSERT_NEAR(shard[j], want, 1e-5) << "world " << world << " unit " << u << " i " << i;
        }
      }
      // A new step starts from zero gradients.
      st.zero_grads();
      for (int64_t j = 0; j < st.total_shard(); ++j) ASSERT_EQ(st.grads()[j], 0.0f);
    });
  }
}
