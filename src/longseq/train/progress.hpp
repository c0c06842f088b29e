#pragma once
// What `longseq train` shows and draws about its own progress:
//  * a live progress line (step, tokens/s, ETA) rewritten in place, only when stdout is a
//    terminal (a pipe or a file gets the plain per-step lines and nothing else); within a step
//    it moves too (pass and layer, with an ETA), so that a step of many minutes is not silent;
//  * train.svg beside metrics.json: loss (left axis) and tokens/s (right axis) against step,
//    drawn with core/plot.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace longseq::train {

/// ETA as "1h02m", "3m05s" or "42s" ("?" when unknown or not finite).
std::string format_eta(double seconds);

/// The two passes of a step, as the in-step line names them.
enum class StepPass { forward, backward };

/// The share of a step's work done once `pass` has finished `layers_done` of `layers` layers:
/// the forward pass is a third and the backward two thirds (its GEMMs are twice the forward's;
/// recomputation and the optimizer are not counted), spread evenly over the layers. In [0, 1].
double step_fraction(StepPass pass, int layers_done, int layers);

/// Seconds left in a run from inside a step: `fraction` of it done after `elapsed` s, then `later`
/// whole steps. A step takes `step_s` (the mean of the steps done so far); 0 = no step done yet,
/// then the running estimate elapsed / fraction. Not finite when nothing is known yet.
double in_step_eta(double elapsed, double fraction, double step_s, int64_t later);

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
  /// Within step `step` (not done), `elapsed` s into it, `pass` working on layer `layer` (0-based)
  /// of `layers`: redraws "[step 3/100] backward layer 5/16  ETA 3m05s" (the run's ETA,
  /// in_step_eta), at most every kRedrawS seconds of the step so that a terminal is not flooded.
  void within_step(int64_t step, StepPass pass, int layer, int layers, double elapsed);
  /// Whether the line is drawn (the trainer wires the in-step hook only then).
  bool enabled() const { return enabled_; }
  static constexpr double kRedrawS = 0.25;
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
  int64_t drawn_step_ = -1;  ///< the step within_step last drew in, and when
  double drawn_at_ = 0;
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
