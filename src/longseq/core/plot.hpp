#pragma once
// One small SVG plotting module for every picture longseq draws: line plots (training loss and
// throughput, loss by position), heat maps (passkey retrieval: length x depth), lanes of spans
// (the planner's per-rank timelines), and stacked bars (the planner's best configurations: time
// and memory by term). Plain SVG 1.1 text, no dependency, deterministic
// output (the same data gives the same bytes), so a plot can be diffed and tested.
//
// Every function returns the whole document; write it with core::write_file_atomic. Text given by
// the caller (titles, labels, names) is XML-escaped here. Non-finite values are skipped in line
// plots (a gap) and drawn grey in heat maps.
#include <string>
#include <string_view>
#include <vector>

namespace longseq::core::plot {

/// `s` with & < > " ' escaped for SVG text and attributes.
std::string escape(std::string_view s);

/// "Nice" tick values covering [lo, hi]: about `target` steps of 1, 2 or 5 x 10^k.
std::vector<double> ticks(double lo, double hi, int target = 5);

struct Series {
  std::string name;
  std::vector<double> x, y;  ///< same length
  std::string color;         ///< empty: the palette's next colour
  bool right_axis = false;   ///< plot against the right-hand y axis (a second quantity)
  bool markers = false;      ///< a dot at every point
};

struct LinePlot {
  std::string title, xlabel, ylabel, y2label;  ///< y2label: right axis (series with right_axis)
  std::vector<Series> series;
  bool log_x = false;  ///< log10 x axis (every x must be > 0)
  /// The left y axis reaches down to 0 (a quantity whose zero means something, such as a loss: a
  /// flat line at 9.95 then reads as high, not as noise between 9.95 and 9.96).
  bool y_from_zero = false;
  int width = 720, height = 360;
};

/// Lines with axes, ticks, labels and a legend. Throws core::Error("[plot] ...") when a series'
/// x and y differ in length, or log_x meets x <= 0.
std::string line_svg(const LinePlot& p);

struct HeatMap {
  std::string title, xlabel, ylabel;
  std::vector<std::string> columns, rows;  ///< tick labels: values is rows x columns, row-major
  std::vector<double> values;
  double vmin = 0, vmax = 1;  ///< the colour scale (red at vmin, green at vmax)
  bool annotate = true;       ///< print each cell's value
  std::string value_format = "%.2f";
  int cell = 56;  ///< pixels per cell
};

/// A grid of coloured cells with row and column labels and a colour bar. Throws core::Error
/// when values.size() != rows.size() * columns.size().
std::string heatmap_svg(const HeatMap& h);

struct Span {
  int lane = 0, row = 0;
  double begin = 0, end = 0;
  int color = 0;        ///< index into Lanes::legend
  std::string tooltip;  ///< shown on hover (<title>)
};

struct Lanes {
  std::string title;
  std::vector<std::string> lane_names;  ///< one per lane, e.g. "rank 3"
  int rows_per_lane = 1;
  std::vector<std::pair<std::string, std::string>> legend;  ///< (name, colour) by Span::color
  std::vector<double> lane_background_end;  ///< optional grey bar per lane from 0 to this time
  std::string note;                         ///< extra legend text
  std::vector<Span> spans;
  double end = 0;  ///< the time axis runs [0, end]
  std::string unit = "s";
};

/// One lane per name, `rows_per_lane` rows each, spans as rectangles on a shared time axis.
std::string lanes_svg(const Lanes& l);

/// One quantity of a bar chart: per row, the parts stacked left to right.
struct BarPanel {
  std::string title;                        ///< above the panel, with its unit
  std::vector<std::string> parts;           ///< legend names, one colour each (the palette's)
  std::vector<std::vector<double>> values;  ///< [row][part], >= 0
};

struct StackedBars {
  std::string title;
  std::vector<std::string> rows;  ///< one label per bar, top to bottom
  std::vector<BarPanel> panels;   ///< side by side, sharing the rows (e.g. time and memory)
  int panel_width = 420, row_height = 20;
};

/// Horizontal stacked bars: a column of row labels, then each panel with its own scale (ticks
/// from 0 to its longest bar), legend and total at the end of each bar. Throws
/// core::Error("[plot] ...") when a panel's values are not rows x parts or one is negative or not
/// finite.
std::string stacked_bars_svg(const StackedBars& b);

}  // namespace longseq::core::plot
