#include "longseq/train/progress.hpp"

#include <unistd.h>

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
