// core/plot: SVG line plots, heat maps, lanes and stacked bars. The tests read the SVG text back:
// escaping, tick choice, one polyline per unbroken run of finite points with one coordinate pair
// per point, cells coloured by value, bars as long as their values, deterministic bytes, and
// refusals naming the sizes.
#include "longseq/core/plot.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "longseq/core/error.hpp"

namespace {

namespace pl = longseq::core::plot;

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(Plot, EscapesTextAndPicksNiceTicks) {
  EXPECT_EQ(pl::escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
  EXPECT_EQ(pl::ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  const auto f = pl::ticks(0.13, 0.91, 4);
  ASSERT_EQ(f.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], 0.2 * (i + 1), 1e-12);
  const auto t = pl::ticks(-3, 1234, 5);
  EXPECT_EQ(t.front(), 0);
  EXPECT_EQ(t[1], 500);
}

TEST(Plot, LinePlotDrawsEveryFinitePointAndBreaksAtGaps) {
  pl::LinePlot p;
  p.title = "loss <by> position";
  p.series.push_back({"eval", {1, 2, 3, 4, 5}, {3.0, 2.5, NAN, 2.0, 1.9}, "", false, true});
  p.series.push_back({"tok/s", {1, 2, 3}, {100, 200, 300}, "", true, false});
  const std::string svg = pl::line_svg(p);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("loss &lt;by&gt; position"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 3);  // eval in two runs, tok/s in one
  EXPECT_EQ(count(svg, "<circle"), 4);    // markers at the four finite points
  EXPECT_NE(svg.find("(right)"), std::string::npos);
  EXPECT_EQ(svg, pl::line_svg(p));  // deterministic
  p.series[0].y.pop_back();
  try {
    pl::line_svg(p);
    ADD_FAILURE() << "mismatched series accepted";
  } catch (const longseq::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'eval' has 5 x and 4 y"), std::string::npos) << e.what();
  }
  // y_from_zero: a loss flat near 9.95 gets an axis from 0 (its "0" tick), not from 9.95.
  pl::LinePlot flat;
  flat.series.push_back({"loss", {1, 2, 3}, {9.951, 9.957, 9.953}, "", false, false});
  EXPECT_EQ(pl::line_svg(flat).find("text-anchor=\"end\">0</text>"), std::string::npos);
  flat.y_from_zero = true;
  EXPECT_NE(pl::line_svg(flat).find("text-anchor=\"end\">0</text>"), std::string::npos);
  pl::LinePlot lg;
  lg.log_x = true;
  lg.series.push_back({"s", {0, 1}, {1, 2}, "", false, false});
  EXPECT_THROW(pl::line_svg(lg), longseq::core::Error);
}

TEST(Plot, HeatMapColoursCellsByValue) {
  pl::HeatMap h;
  h.rows = {"1K", "2K"};
  h.columns = {"0%", "50%", "100%"};
  h.values = {0, 0.5, 1, 1, NAN, 0};
  const std::string svg = pl::heatmap_svg(h);
  EXPECT_EQ(count(svg, "fill=\"#d73027\""), 2);  // two cells at vmin
  EXPECT_EQ(count(svg, "fill=\"#2ea057\""), 2);  // two cells at vmax
  EXPECT_EQ(count(svg, "fill=\"#bbbbbb\""), 1);  // the NaN cell
  EXPECT_NE(svg.find(">0.50<"), std::string::npos);
  h.values.pop_back();
  EXPECT_THROW(pl::heatmap_svg(h), longseq::core::Error);
}

TEST(Plot, LanesPlaceSpansOnTheTimeAxis) {
  pl::Lanes l;
  l.lane_names = {"rank 0", "rank 1"};
  l.rows_per_lane = 2;
  l.legend = {{"compute", "#111111"}, {"send", "#222222"}};
  l.end = 10;
  l.spans = {{0, 0, 0, 5, 0, "a"}, {1, 1, 5, 10, 1, "b"}};
  const std::string svg = pl::lanes_svg(l);
  EXPECT_NE(svg.find("x=\"70.00\" y=\"40.0\" width=\"500.00\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("x=\"570.00\" y=\"75.0\" width=\"500.00\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("rank 1"), std::string::npos);
}

TEST(Plot, StackedBarsAreAsLongAsTheirParts) {
  pl::StackedBars b;
  b.title = "t";
  b.rows = {"first", "second"};
  b.panels = {{"time (s)", {"compute", "wait"}, {{1, 3}, {2, 0}}},
              {"memory", {"weights"}, {{5}, {10}}}};
  const std::string svg = pl::stacked_bars_svg(b);
  // Panel 0: the longest bar (4) spans the panel (420 px): 105 px per second; a zero part has no
  // rectangle.
  EXPECT_EQ(count(svg, "width=\"105.00\""), 1) << svg;
  EXPECT_EQ(count(svg, "width=\"315.00\""), 1) << svg;
  EXPECT_EQ(count(svg, "width=\"210.00\""), 2) << svg;  // 2 s of compute, 5 of 10 GiB
  EXPECT_EQ(count(svg, "<rect x="), 2 + 1 + 3 + 2);     // legends (3), bars (5)
  EXPECT_EQ(count(svg, "<title>wait: 3</title>"), 1);
  EXPECT_NE(svg.find(">second</text>"), std::string::npos);
  EXPECT_EQ(svg, pl::stacked_bars_svg(b));  // deterministic
  pl::StackedBars bad = b;
  bad.panels[1].values.pop_back();
  EXPECT_THROW(pl::stacked_bars_svg(bad), longseq::core::Error);
  bad = b;
  bad.panels[0].values[1] = {1};
  EXPECT_THROW(pl::stacked_bars_svg(bad), longseq::core::Error);
  bad = b;
  bad.panels[0].values[0][1] = -1;
  try {
    pl::stacked_bars_svg(bad);
    ADD_FAILURE() << "a negative part was drawn";
  } catch (const longseq::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bars 'time (s)': value -1"), std::string::npos)
        << e.what();
  }
}

}  // namespace
