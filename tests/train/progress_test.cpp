// train/progress: the live progress line (drawn only when enabled, i.e. on a terminal) and the
// train.svg curve.
#include "longseq/train/progress.hpp"

#include <gtest/gtest.h>

#include <cmath>
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

TEST(Progress, StepFractionIsAThirdForwardTwoThirdsBackward) {
  EXPECT_DOUBLE_EQ(tr::step_fraction(tr::StepPass::forward, 0, 4), 0.0);
  EXPECT_DOUBLE_EQ(tr::step_fraction(tr::StepPass::forward, 2, 4), 1.0 / 6);
  EXPECT_DOUBLE_EQ(tr::step_fraction(tr::StepPass::backward, 0, 4), 1.0 / 3);
  EXPECT_DOUBLE_EQ(tr::step_fraction(tr::StepPass::backward, 3, 4), 1.0 / 3 + 0.5);
  EXPECT_DOUBLE_EQ(tr::step_fraction(tr::StepPass::backward, 9, 4), 1.0);  // clamped
  EXPECT_DOUBLE_EQ(tr::step_fraction(tr::StepPass::forward, 1, 0), 0.0);   // no layers
}

TEST(Progress, InStepEtaUsesTheMeanStepOrTheStepsOwnPace) {
  // Steps of 30 s so far, a third of this one done, 2 steps after it: 20 + 60 s.
  EXPECT_DOUBLE_EQ(tr::in_step_eta(12, 1.0 / 3, 30, 2), 80);
  // No step done yet: 10 s for a quarter -> 40 s a step; 30 s left of it, 40 s for the next.
  EXPECT_DOUBLE_EQ(tr::in_step_eta(10, 0.25, 0, 1), 70);
  // Nothing known yet (the first layer of the first step): not finite, printed as "?".
  EXPECT_FALSE(std::isfinite(tr::in_step_eta(0.1, 0, 0, 5)));
  EXPECT_EQ(tr::format_eta(tr::in_step_eta(0.1, 0, 0, 5)), "?");
}

TEST(Progress, WithinAStepTheLineNamesPassLayerAndEtaThrottledAndOnlyWhenEnabled) {
  std::FILE* on = std::tmpfile();
  std::FILE* off = std::tmpfile();
  tr::Progress a(3, true, on), b(3, false, off);
  a.update(0, 30.0, 100);  // one step of 30 s done
  a.within_step(1, tr::StepPass::forward, 0, 4, 0.0);
  EXPECT_EQ(a.line(), "[step 2/3] forward layer 1/4  ETA 1m00s");  // 30 + 30 s
  a.within_step(1, tr::StepPass::forward, 1, 4, 0.1);              // within kRedrawS: not drawn
  EXPECT_EQ(a.line(), "[step 2/3] forward layer 1/4  ETA 1m00s");
  // Backward, at the top layer (the first it reaches): a third done -> 20 + 30 s.
  a.within_step(1, tr::StepPass::backward, 3, 4, 0.1 + tr::Progress::kRedrawS);
  EXPECT_EQ(a.line(), "[step 2/3] backward layer 4/4  ETA 50s");
  a.within_step(2, tr::StepPass::forward, 0, 4, 0.0);  // a new step draws at once
  EXPECT_EQ(a.line(), "[step 3/3] forward layer 1/4  ETA 30s");
  b.within_step(1, tr::StepPass::forward, 0, 4, 0.0);
  EXPECT_EQ(b.line(), "");
  EXPECT_EQ(contents(on),
            "\r\033[K[step 1/3] 100 tok/s  ETA 1m00s"
            "\r\033[K[step 2/3] forward layer 1/4  ETA 1m00s"
            "\r\033[K[step 2/3] backward layer 4/4  ETA 50s"
            "\r\033[K[step 3/3] forward layer 1/4  ETA 30s");
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
