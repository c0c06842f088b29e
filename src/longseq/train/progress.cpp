#include "longseq/train/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "longseq/core/error.hpp"
#include "longseq/core/plot.hpp"

namespace longseq::train {

std::string format_eta(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<int64_t>(std::llround(s));
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(t / 3600),
                  static_cast<long long>(t % 3600 / 60));
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(t));
  return buf;
}

double step_fraction(StepPass pass, int layers_done, int layers) {
  if (layers <= 0) return pass == StepPass::forward ? 0.0 : 1.0 / 3.0;
  const double share = static_cast<double>(std::clamp(layers_done, 0, layers)) / layers;
  return pass == StepPass::forward ? share / 3.0 : 1.0 / 3.0 + 2.0 * share / 3.0;
}

double in_step_eta(double elapsed, double fraction, double step_s, int64_t later) {
  // Before any step has finished, the step's own pace (unknown before any of it is done).
  const double step = step_s > 0 ? step_s : fraction > 0 ? elapsed / fraction : NAN;
  return step * (1.0 - std::clamp(fraction, 0.0, 1.0)) + step * static_cast<double>(later);
}

Progress::Progress(int64_t end, bool enabled, std::FILE* out)
    : end_(end), enabled_(enabled), out_(out) {}

bool Progress::stdout_is_terminal() {
  return ::isatty(STDOUT_FILENO) == 1;
}

void Progress::clear() {
  if (!enabled_ || line_.empty()) return;
  std::fputs("\r\033[K", out_);  // carriage return, erase to the end of the line
}

void Progress::update(int64_t step, double seconds, double tokens_per_sec) {
  total_s_ += seconds;
  ++done_;
  const double eta = total_s_ / static_cast<double>(done_) * static_cast<double>(end_ - step - 1);
  line_ = core::cat("[step ", step + 1, "/", end_, "] ",
                    static_cast<int64_t>(std::llround(tokens_per_sec)), " tok/s  ETA ",
                    format_eta(eta));
  if (!enabled_) return;
  std::fputs("\r\033[K", out_);
  std::fputs(line_.c_str(), out_);
  std::fflush(out_);
}

void Progress::within_step(int64_t step, StepPass pass, int layer, int layers, double elapsed) {
  if (!enabled_) return;
  if (step == drawn_step_ && elapsed < drawn_at_ + kRedrawS) return;
  drawn_step_ = step;
  drawn_at_ = elapsed;
  const double mean = done_ > 0 ? total_s_ / static_cast<double>(done_) : 0.0;
  // Forward walks the layers up, backward down: the layers already done differ.
  const int done = pass == StepPass::forward ? layer : layers - 1 - layer;
  const double eta = in_step_eta(elapsed, step_fraction(pass, done, layers), mean, end_ - step - 1);
  line_ = core::cat("[step ", step + 1, "/", end_, "] ",
                    pass == StepPass::forward ? "forward" : "backward", " layer ", layer + 1, "/",
                    layers, "  ETA ", format_eta(eta));
  std::fputs("\r\033[K", out_);
  std::fputs(line_.c_str(), out_);
  std::fflush(out_);
}

void Progress::finish() {
  if (!enabled_ || line_.empty()) return;
  std::fputs("\n", out_);
  std::fflush(out_);
}

std::string train_curve_svg(const std::vector<CurvePoint>& points, const std::string& title) {
  core::plot::LinePlot p;
  p.title = title;
  p.xlabel = "step";
  p.ylabel = "loss";
  p.y2label = "tokens/s";
  core::plot::Series loss{"loss", {}, {}, "#3b7dd8", false, points.size() < 60};
  core::plot::Series tps{"tokens/s", {}, {}, "#d8733b", true, false};
  for (const CurvePoint& c : points) {
    loss.x.push_back(static_cast<double>(c.step));
    loss.y.push_back(c.loss);
    tps.x.push_back(static_cast<double>(c.step));
    tps.y.push_back(c.tokens_per_sec);
  }
  p.series = {loss, tps};
  return core::plot::line_svg(p);
}

}  // namespace longseq::train
