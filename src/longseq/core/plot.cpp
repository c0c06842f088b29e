// SVG line plots, heat maps and lanes (plot.hpp).
#include "longseq/core/plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "longseq/core/error.hpp"

namespace longseq::core::plot {

namespace {

const char* const kPalette[] = {"#3b7dd8", "#d8733b", "#37a651", "#b03bd8", "#d83b5a",
                                "#6b6b6b", "#c9b12c", "#2cb9c9", "#8c5a2b", "#9fb83b"};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A tick label: short, no trailing zeros ("0.5", "2000", "1e+06").
std::string tick_label(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) return fmt("%.3g", v);
  std::string s = fmt("%.6f", v);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  // Empty or flat ranges are widened so that the axis has a length.
  void settle() {
    if (!(lo <= hi)) lo = 0, hi = 1;
    if (lo == hi) {
      const double d = lo == 0 ? 1 : std::fabs(lo) * 0.1;
      lo -= d;
      hi += d;
    }
  }
};

}  // namespace

std::string escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&apos;";
        break;
      default:
        o += c;
    }
  return o;
}

std::vector<double> ticks(double lo, double hi, int target) {
  std::vector<double> t;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(target, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  // Integer multiples of the step (no accumulated rounding).
  for (int64_t k = static_cast<int64_t>(std::ceil(lo / step - 1e-9)); k * step <= hi + step * 1e-9;
       ++k)
    t.push_back(static_cast<double>(k) * step);
  return t;
}

std::string line_svg(const LinePlot& p) {
  const bool has_y2 =
      std::any_of(p.series.begin(), p.series.end(), [](const Series& s) { return s.right_axis; });
  const double left = 72, right = has_y2 ? 72 : 24, top = 40, bottom = 52;
  const double w = p.width - left - right, h = p.height - top - bottom;
  Range xr, yr, y2r;
  for (const Series& s : p.series) {
    require(s.x.size() == s.y.size(), "plot", "series '", s.name, "' has ", s.x.size(), " x and ",
            s.y.size(), " y values");
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (p.log_x)
        require(!(s.x[i] <= 0), "plot", "series '", s.name, "': log x axis needs x > 0, got ",
                s.x[i]);
      if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) continue;
      xr.add(p.log_x ? std::log10(s.x[i]) : s.x[i]);
      (s.right_axis ? y2r : yr).add(s.y[i]);
    }
  }
  if (p.y_from_zero) yr.add(0);
  xr.settle();
  yr.settle();
  y2r.settle();
  // Axes start at a tick so that the grid lines meet the frame.
  auto snap = [](Range& r) {
    const auto t = ticks(r.lo, r.hi);
    if (t.size() >= 2) {
      const double step = t[1] - t[0];
      r.lo = std::min(r.lo, t.front() - (t.front() > r.lo ? step : 0));
      r.hi = std::max(r.hi, t.back() + (t.back() < r.hi ? step : 0));
    }
  };
  snap(yr);
  snap(y2r);
  auto px = [&](double x) {
    return left + ((p.log_x ? std::log10(x) : x) - xr.lo) / (xr.hi - xr.lo) * w;
  };
  auto py = [&](double y, bool r2) {
    const Range& r = r2 ? y2r : yr;
    return top + h - (y - r.lo) / (r.hi - r.lo) * h;
  };
  std::string o = cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", p.width, "\" height=\"",
                      p.height, "\" font-family=\"sans-serif\" font-size=\"11\">\n",
                      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  o += cat("<text x=\"", p.width / 2, "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">",
           escape(p.title), "</text>\n");
  // grid and ticks
  if (p.log_x) {
    for (double e = std::ceil(xr.lo - 1e-9); e <= xr.hi + 1e-9; e += 1) {
      const double x = left + (e - xr.lo) / (xr.hi - xr.lo) * w;
      o += cat("<line x1=\"", fmt("%.1f", x), "\" y1=\"", top, "\" x2=\"", fmt("%.1f", x),
               "\" y2=\"", top + h, "\" stroke=\"#e6e6e6\"/>\n<text x=\"", fmt("%.1f", x),
               "\" y=\"", top + h + 16, "\" text-anchor=\"middle\">", tick_label(std::pow(10.0, e)),
               "</text>\n");
    }
  } else {
    for (double v : ticks(xr.lo, xr.hi, 6)) {
      const double x = px(v);
      o += cat("<line x1=\"", fmt("%.1f", x), "\" y1=\"", top, "\" x2=\"", fmt("%.1f", x),
               "\" y2=\"", top + h, "\" stroke=\"#e6e6e6\"/>\n<text x=\"", fmt("%.1f", x),
               "\" y=\"", top + h + 16, "\" text-anchor=\"middle\">", tick_label(v), "</text>\n");
    }
  }
  for (double v : ticks(yr.lo, yr.hi)) {
    const double y = py(v, false);
    o += cat("<line x1=\"", left, "\" y1=\"", fmt("%.1f", y), "\" x2=\"", left + w, "\" y2=\"",
             fmt("%.1f", y), "\" stroke=\"#e6e6e6\"/>\n<text x=\"", left - 6, "\" y=\"",
             fmt("%.1f", y + 4), "\" text-anchor=\"end\">", tick_label(v), "</text>\n");
  }
  if (has_y2)
    for (double v : ticks(y2r.lo, y2r.hi)) {
      const double y = py(v, true);
      o += cat("<text x=\"", left + w + 6, "\" y=\"", fmt("%.1f", y + 4), "\">", tick_label(v),
               "</text>\n");
    }
  o += cat("<rect x=\"", left, "\" y=\"", top, "\" width=\"", w, "\" height=\"", h,
           "\" fill=\"none\" stroke=\"#444\"/>\n");
  o += cat("<text x=\"", left + w / 2, "\" y=\"", p.height - 12, "\" text-anchor=\"middle\">",
           escape(p.xlabel), "</text>\n");
  o += cat("<text x=\"16\" y=\"", top + h / 2,
           "\" text-anchor=\"middle\" transform=\"rotate(-90 16 ", top + h / 2, ")\">",
           escape(p.ylabel), "</text>\n");
  if (has_y2)
    o += cat("<text x=\"", p.width - 14, "\" y=\"", top + h / 2,
             "\" text-anchor=\"middle\" transform=\"rotate(90 ", p.width - 14, " ", top + h / 2,
             ")\">", escape(p.y2label), "</text>\n");
  // series
  for (size_t k = 0; k < p.series.size(); ++k) {
    const Series& s = p.series[k];
    const std::string color = s.color.empty() ? kPalette[k % 6] : s.color;
    std::string pts;
    auto flush = [&] {
      if (!pts.empty())
        o += cat("<polyline fill=\"none\" stroke=\"", color, "\" stroke-width=\"1.6\" points=\"",
                 pts, "\"/>\n");
      pts.clear();
    };
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) {
        flush();
        continue;
      }
      const double x = px(s.x[i]), y = py(s.y[i], s.right_axis);
      pts += cat(pts.empty() ? "" : " ", fmt("%.1f", x), ",", fmt("%.1f", y));
      if (s.markers)
        o += cat("<circle cx=\"", fmt("%.1f", x), "\" cy=\"", fmt("%.1f", y),
                 "\" r=\"2.5\" fill=\"", color, "\"><title>", escape(s.name), ": (",
                 tick_label(s.x[i]), ", ", fmt("%.6g", s.y[i]), ")</title></circle>\n");
    }
    flush();
    const double ly = top + 14 + 16 * static_cast<double>(k);
    o += cat("<line x1=\"", left + w - 170, "\" y1=\"", ly - 4, "\" x2=\"", left + w - 150,
             "\" y2=\"", ly - 4, "\" stroke=\"", color, "\" stroke-width=\"2\"/>\n<text x=\"",
             left + w - 145, "\" y=\"", ly, "\">", escape(s.name),
             s.right_axis && has_y2 ? " (right)" : "", "</text>\n");
  }
  return o + "</svg>\n";
}

std::string heatmap_svg(const HeatMap& m) {
  const size_t nr = m.rows.size(), nc = m.columns.size();
  require(m.values.size() == nr * nc, "plot", "heat map '", m.title, "' has ", m.values.size(),
          " values for ", nr, " rows x ", nc, " columns");
  const double cell = m.cell, left = 110, top = 48;
  const double width = left + cell * static_cast<double>(nc) + 110;
  const double height = top + cell * static_cast<double>(nr) + 56;
  auto color = [&](double v) {
    if (!std::isfinite(v)) return std::string("#bbbbbb");
    double t = m.vmax > m.vmin ? (v - m.vmin) / (m.vmax - m.vmin) : 1.0;
    t = std::clamp(t, 0.0, 1.0);
    // red (t = 0) -> yellow (0.5) -> green (1)
    const int r = static_cast<int>(t < 0.5 ? 215 : 215 - (t - 0.5) * 2 * (215 - 46));
    const int g =
        static_cast<int>(t < 0.5 ? 48 + t * 2 * (200 - 48) : 200 - (t - 0.5) * 2 * (200 - 160));
    const int b =
        static_cast<int>(t < 0.5 ? 39 + t * 2 * (60 - 39) : 60 + (t - 0.5) * 2 * (87 - 60));
    char buf[16];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
    return std::string(buf);
  };
  std::string o = cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", width, "\" height=\"",
                      height, "\" font-family=\"sans-serif\" font-size=\"11\">\n",
                      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  o += cat("<text x=\"", width / 2, "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">",
           escape(m.title), "</text>\n");
  for (size_t r = 0; r < nr; ++r) {
    const double y = top + cell * static_cast<double>(r);
    o += cat("<text x=\"", left - 6, "\" y=\"", y + cell / 2 + 4, "\" text-anchor=\"end\">",
             escape(m.rows[r]), "</text>\n");
    for (size_t c = 0; c < nc; ++c) {
      const double v = m.values[r * nc + c];
      const double x = left + cell * static_cast<double>(c);
      o += cat("<rect x=\"", x, "\" y=\"", y, "\" width=\"", cell, "\" height=\"", cell,
               "\" fill=\"", color(v), "\" stroke=\"white\"><title>", escape(m.rows[r]), ", ",
               escape(m.columns[c]), ": ", fmt("%.6g", v), "</title></rect>\n");
      if (m.annotate && std::isfinite(v))
        o += cat("<text x=\"", x + cell / 2, "\" y=\"", y + cell / 2 + 4,
                 "\" text-anchor=\"middle\">", fmt(m.value_format.c_str(), v), "</text>\n");
    }
  }
  for (size_t c = 0; c < nc; ++c)
    o += cat("<text x=\"", left + cell * (static_cast<double>(c) + 0.5), "\" y=\"",
             top + cell * static_cast<double>(nr) + 16, "\" text-anchor=\"middle\">",
             escape(m.columns[c]), "</text>\n");
  o += cat("<text x=\"", left + cell * static_cast<double>(nc) / 2, "\" y=\"", height - 12,
           "\" text-anchor=\"middle\">", escape(m.xlabel), "</text>\n");
  o += cat("<text x=\"14\" y=\"", top + cell * static_cast<double>(nr) / 2,
           "\" text-anchor=\"middle\" transform=\"rotate(-90 14 ",
           top + cell * static_cast<double>(nr) / 2, ")\">", escape(m.ylabel), "</text>\n");
  // colour bar
  const double bx = left + cell * static_cast<double>(nc) + 30,
               bh = std::max(cell * static_cast<double>(nr), 80.0);
  for (int i = 0; i < 20; ++i) {
    const double t = 1.0 - (i + 0.5) / 20.0;
    o += cat("<rect x=\"", bx, "\" y=\"", fmt("%.1f", top + bh * i / 20.0),
             "\" width=\"14\" height=\"", fmt("%.1f", bh / 20.0 + 0.5), "\" fill=\"",
             color(m.vmin + t * (m.vmax - m.vmin)), "\"/>\n");
  }
  o += cat("<text x=\"", bx + 18, "\" y=\"", top + 8, "\">", tick_label(m.vmax),
           "</text>\n<text x=\"", bx + 18, "\" y=\"", top + bh, "\">", tick_label(m.vmin),
           "</text>\n");
  return o + "</svg>\n";
}

std::string lanes_svg(const Lanes& l) {
  const int lanes = static_cast<int>(l.lane_names.size());
  const double width = 1000, left = 70, row = 9, lane = row * l.rows_per_lane + 8, top = 40;
  const double height = top + lanes * lane + 40;
  const double scale = l.end > 0 ? width / l.end : 1.0;
  std::string o = cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", left + width + 20,
                      "\" height=\"", height, "\" font-family=\"monospace\" font-size=\"10\">\n");
  o += cat("<text x=\"", left, "\" y=\"16\" font-size=\"12\">", escape(l.title), "</text>\n");
  double lx = left;
  for (const auto& [name, colour] : l.legend) {
    o += cat("<rect x=\"", lx, "\" y=\"22\" width=\"10\" height=\"8\" fill=\"", colour,
             "\"/><text x=\"", lx + 14, "\" y=\"30\">", escape(name), "</text>\n");
    lx += 160;
  }
  if (!l.note.empty()) o += cat("<text x=\"", lx, "\" y=\"30\">", escape(l.note), "</text>\n");
  for (int r = 0; r < lanes; ++r) {
    const double y = top + r * lane;
    o += cat("<text x=\"4\" y=\"", fmt("%.1f", y + 2 * row), "\">", escape(l.lane_names[r]),
             "</text>\n");
    if (static_cast<size_t>(r) < l.lane_background_end.size())
      o += cat("<rect x=\"", left, "\" y=\"", fmt("%.1f", y), "\" width=\"",
               fmt("%.1f", l.lane_background_end[r] * scale), "\" height=\"", row - 1,
               "\" fill=\"#e4e4e4\"/>\n");
  }
  for (const Span& s : l.spans) {
    const std::string colour = s.color >= 0 && static_cast<size_t>(s.color) < l.legend.size()
                                   ? l.legend[s.color].second
                                   : "#888888";
    o += cat("<rect x=\"", fmt("%.2f", left + s.begin * scale), "\" y=\"",
             fmt("%.1f", top + s.lane * lane + s.row * row), "\" width=\"",
             fmt("%.2f", std::max(0.5, (s.end - s.begin) * scale)), "\" height=\"", row - 1,
             "\" fill=\"", colour, "\" stroke=\"white\" stroke-width=\"0.3\"><title>",
             escape(s.tooltip), "</title></rect>\n");
  }
  o += cat("<text x=\"", left, "\" y=\"", height - 12, "\">0 ", escape(l.unit), "</text><text x=\"",
           left + width - 60, "\" y=\"", height - 12, "\">", fmt("%.6g", l.end), " ",
           escape(l.unit), "</text>\n");
  return o + "</svg>\n";
}

std::string stacked_bars_svg(const StackedBars& b) {
  const size_t rows = b.rows.size();
  for (const BarPanel& p : b.panels) {
    require(p.values.size() == rows, "plot", "bars '", p.title, "': ", p.values.size(),
            " rows of values for ", rows, " row labels");
    for (const auto& row : p.values) {
      require(row.size() == p.parts.size(), "plot", "bars '", p.title, "': a row of ", row.size(),
              " values for ", p.parts.size(), " parts");
      for (double v : row)
        require(std::isfinite(v) && v >= 0, "plot", "bars '", p.title, "': value ", v,
                " is negative or not finite");
    }
  }
  size_t label_chars = 8;
  for (const std::string& r : b.rows) label_chars = std::max(label_chars, r.size());
  const double left = 8 + 6.2 * static_cast<double>(label_chars), gap = 70, pw = b.panel_width;
  size_t legend_rows = 0;
  for (const BarPanel& p : b.panels) legend_rows = std::max(legend_rows, (p.parts.size() + 1) / 2);
  const double top = 44 + 14 * static_cast<double>(legend_rows), rh = b.row_height;
  const double width = left + static_cast<double>(b.panels.size()) * (pw + gap);
  const double height = top + static_cast<double>(rows) * rh + 30;
  std::string o =
      cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", fmt("%.0f", width), "\" height=\"",
          fmt("%.0f", height), "\" font-family=\"monospace\" font-size=\"10\">\n");
  o += cat("<text x=\"8\" y=\"16\" font-size=\"12\">", escape(b.title), "</text>\n");
  for (size_t r = 0; r < rows; ++r)
    o += cat("<text x=\"4\" y=\"", fmt("%.1f", top + static_cast<double>(r) * rh + rh * 0.65),
             "\">", escape(b.rows[r]), "</text>\n");
  for (size_t k = 0; k < b.panels.size(); ++k) {
    const BarPanel& p = b.panels[k];
    const double x0 = left + static_cast<double>(k) * (pw + gap);
    double longest = 0;
    for (const auto& row : p.values) {
      double sum = 0;
      for (double v : row) sum += v;
      longest = std::max(longest, sum);
    }
    const std::vector<double> t = ticks(0, longest > 0 ? longest : 1, 4);
    const double end = std::max(longest > 0 ? longest : 1, t.empty() ? 0.0 : t.back());
    const double scale = pw / end;
    o += cat("<text x=\"", fmt("%.1f", x0), "\" y=\"32\" font-size=\"11\">", escape(p.title),
             "</text>\n");
    for (size_t i = 0; i < p.parts.size(); ++i) {
      const double lx = x0 + static_cast<double>(i % 2) * (pw / 2);
      const double ly = 38 + 14 * static_cast<double>(i / 2);
      o += cat("<rect x=\"", fmt("%.1f", lx), "\" y=\"", fmt("%.1f", ly),
               "\" width=\"10\" "
               "height=\"8\" fill=\"",
               kPalette[i % std::size(kPalette)], "\"/><text x=\"", fmt("%.1f", lx + 14), "\" y=\"",
               fmt("%.1f", ly + 8), "\">", escape(p.parts[i]), "</text>\n");
    }
    for (double v : t)
      o += cat("<line x1=\"", fmt("%.1f", x0 + v * scale), "\" x2=\"", fmt("%.1f", x0 + v * scale),
               "\" y1=\"", fmt("%.1f", top - 2), "\" y2=\"",
               fmt("%.1f", top + static_cast<double>(rows) * rh),
               "\" stroke=\"#dddddd\"/>"
               "<text x=\"",
               fmt("%.1f", x0 + v * scale - 6), "\" y=\"",
               fmt("%.1f", top + static_cast<double>(rows) * rh + 12), "\">", tick_label(v),
               "</text>\n");
    for (size_t r = 0; r < rows; ++r) {
      double x = x0, sum = 0;
      const double y = top + static_cast<double>(r) * rh + 2;
      for (size_t i = 0; i < p.parts.size(); ++i) {
        const double w = p.values[r][i] * scale;
        sum += p.values[r][i];
        if (w > 0)
          o += cat("<rect x=\"", fmt("%.2f", x), "\" y=\"", fmt("%.1f", y), "\" width=\"",
                   fmt("%.2f", w), "\" height=\"", fmt("%.1f", rh - 4), "\" fill=\"",
                   kPalette[i % std::size(kPalette)], "\"><title>", escape(p.parts[i]), ": ",
                   fmt("%.4g", p.values[r][i]), "</title></rect>\n");
        x += w;
      }
      o += cat("<text x=\"", fmt("%.1f", x + 3), "\" y=\"", fmt("%.1f", y + rh * 0.6), "\">",
               fmt("%.4g", sum), "</text>\n");
    }
  }
  return o + "</svg>\n";
}

}  // namespace longseq::core::plot
