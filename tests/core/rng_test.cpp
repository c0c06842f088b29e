#include "longseq/core/rng.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "longseq/core/timer.hpp"

using namespace longseq::core;

TEST(Rng, SliceEqualsGlobal) {
  // What a rank generates for its slice equals the same slice of the global tensor.
  std::vector<float> global(1000), part(300);
  fill_normal(global.data(), global.size(), 42);
  fill_normal(part.data(), part.size(), 42, 500);
  for (size_t i = 0; i < part.size(); ++i) EXPECT_EQ(part[i], global[500 + i]);
}

TEST(Rng, SeedsDiffer) {
  std::vector<float> a(64), b(64);
  fill_normal(a.data(), 64, 1);
  fill_normal(b.data(), 64, 2);
  int same = 0;
  for (int i = 0; i < 64; ++i) same += a[i] == b[i];
  EXPECT_LT(same, 2);
  EXPECT_NE(derive_seed(7, 1), derive_seed(7, 2));
}

TEST(Rng, NormalMoments) {
  const size_t n = 200000;
  std::vector<double> x(n);
  fill_normal(x.data(), n, 123, 0, 1.0, 2.0);
  double m = 0, v = 0;
  for (double e : x) m += e;
  m /= n;
  for (double e : x) v += (e - m) * (e - m);
  v /= n;
  EXPECT_NEAR(m, 1.0, 0.03);
  EXPECT_NEAR(v, 4.0, 0.08);
}

TEST(Rng, UniformAndRandintRanges) {
  std::vector<float> u(10000);
  fill_uniform(u.data(), u.size(), 5, 0, -2.0, 3.0);
  for (float e : u) {
    EXPECT_GE(e, -2.0f);
    EXPECT_LT(e, 3.0f);
  }
  std::vector<int32_t> r(10000);
  fill_randint(r.data(), r.size(), 9, 7);
  std::vector<int> hist(7);
  for (int32_t e : r) {
    ASSERT_GE(e, 0);
    ASSERT_LT(e, 7);
    ++hist[e];
  }
  for (int h : hist) EXPECT_GT(h, 1200);
}

TEST(Timer, MeasuresAndReadsRss) {
  Timer t;
  double sink = 0;
  {
    ScopedTimer s(&sink);
    volatile double x = 0;
    for (int i = 0; i < 100000; ++i) x = x + std::sqrt(static_cast<double>(i));
  }
  EXPECT_GT(sink, 0.0);
  EXPECT_GE(t.elapsed(), sink);
  EXPECT_GT(peak_rss_bytes(), 0u);
  EXPECT_GE(peak_rss_bytes(), current_rss_bytes() / 2);
}
