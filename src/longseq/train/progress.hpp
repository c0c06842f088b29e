#pragma once
// What `longseq train` shows and draws about its own progress:
//  * a live progress line (step, tokens/s, ETA) rewritten in place, only when stdout is a
//    terminal (a pipe or a file gets the plain per-step lines and nothing else);
//  * train.svg beside metrics.json: loss (left axis) and tokens/s (right axis) against step,
//    drawn with core/plot.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace longseq::train {

/// ETA as "1h02m", "3m05s" or "42s" ("?" when unknown or not finite).
std::string format_eta(double seconds);

class Progress {
 public:
  /// A run that ends before step `end`. `enabled`: draw at all (the trainer passes
  /// stdout_is_terminal()).
  Progress(int64_t end, bool enabled, std::FILE* out = stdout);
  /// True when stdout is a terminal.
  static bool stdout_is_terminal();
  /// Erases the progress line so that a normal line can be printed in its place.
  void clear();
  /// After step `step` (done) took `seconds` at `tokens_per_sec` (all ranks): redraws the line
  /// "[step 12/100] 2345 tok/s  ETA 3m05s" (ETA from the mean step time so far).
  void update(int64_t step, double seconds, double tokens_per_sec);
  /// Ends the line (a newline) if one is shown.
  void finish();
  /// The text update() last drew (tests).
  const std::string& line() const { return line_; }

 private:
  int64_t end_;
  bool enabled_;
  std::FILE* out_;
  double total_s_ = 0;
  int64_t done_ = 0;
  std::string line_;
};

/// One point per step, for train.svg.
struct CurvePoint {
  int64_t step = 0;
  double loss = 0, tokens_per_sec = 0;
};

/// The SVG of loss and tokens/s against step (core/plot line plot, tokens/s on the right axis).
std::string train_curve_svg(const std::vector<CurvePoint>& points, const std::string& title);

}  // namespace longseq::train
