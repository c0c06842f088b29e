// train/progress: the live progress line (drawn only when enabled, i.e. on a terminal) and the
// train.svg curve.
#include "longseq/train/progress.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace {

namespace tr = longseq::train;

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  return s;
}

TEST(Progress, FormatsEta) {
  EXPECT_EQ(tr::format_eta(42.4), "42s");
  EXPECT_EQ(tr::format_eta(185), "3m05s");
  EXPECT_EQ(tr::format_eta(3720), "1h02m");
  EXPECT_EQ(tr::format_eta(-1), "?");
}

TEST(Progress, LineShowsStepThroughputAndEtaOnlyWhenEnabled) {
  std::FILE* on = std::tmpfile();
  std::FILE* off = std::tmpfile();
  tr::Progress a(10, true, on), b(10, false, off);
  for (auto* p : {&a, &b}) {
    p->update(0, 2.0, 1000.4);
    p->clear();
    p->update(1, 4.0, 900);  // mean 3 s per step, 8 steps left
    p->finish();
  }
  EXPECT_EQ(a.line(), "[step 2/10] 900 tok/s  ETA 24s");
  EXPECT_EQ(b.line(), a.line());
  EXPECT_EQ(
      contents(on),
      "\r\033[K[step 1/10] 1000 tok/s  ETA 18s\r\033[K\r\033[K[step 2/10] 900 tok/s  ETA 24s\n");
  EXPECT_EQ(contents(off), "");  // not a terminal: nothing at all
  std::fclose(on);
  std::fclose(off);
}

TEST(Progress, TrainCurveHasLossAndThroughput) {
  const std::string svg = tr::train_curve_svg({{0, 5.5, 100}, {1, 4.0, 120}, {2, 3.5, 110}}, "run");
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("tokens/s (right)"), std::string::npos);
  EXPECT_NE(svg.find(">loss<"), std::string::npos);
}

}  // namespace
