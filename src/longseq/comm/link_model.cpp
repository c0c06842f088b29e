#include "longseq/comm/link_model.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "longseq/core/error.hpp"

namespace longseq::comm {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// Splits "12.5GB/s" into 12.5 and "GB/s"; throws when there is no leading number.
std::pair<double, std::string_view> number_and_unit(std::string_view text, const char* what) {
  text = trim(text);
  double v = 0.0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  core::require(ec == std::errc() && std::isfinite(v) && v >= 0.0, "comm", "bad ", what, " '", text,
                "': expected a non-negative number with a unit");
  return {v, trim(text.substr(static_cast<size_t>(ptr - text.data())))};
}

std::string format_duration(double s) {
  char buf[64];
  if (s == 0.0) return "0s";
  if (s < 1e-6)
    std::snprintf(buf, sizeof buf, "%gns", s * 1e9);
  else if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%gus", s * 1e6);
  else if (s < 1.0)
    std::snprintf(buf, sizeof buf, "%gms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%gs", s);
  return buf;
}

std::string format_bandwidth(double bps) {
  if (bps == 0.0) return "inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%gGB/s", bps / 1e9);
  return buf;
}

}  // namespace

double parse_duration(std::string_view text) {
  const auto [v, unit] = number_and_unit(text, "latency");
  if (unit.empty() || unit == "s") return v;
  if (unit == "ms") return v * 1e-3;
  if (unit == "us") return v * 1e-6;
  if (unit == "ns") return v * 1e-9;
  core::fail("comm", "bad latency unit '", unit, "' in '", text, "': expected s, ms, us or ns");
}

double parse_bandwidth(std::string_view text) {
  if (trim(text) == "inf") return 0.0;
  const auto [v, unit] = number_and_unit(text, "bandwidth");
  struct Unit {
    const char* name;
    double scale;
  };
  static constexpr Unit kUnits[] = {
      {"B/s", 1.0},      {"KB/s", 1e3},     {"MB/s", 1e6},        {"GB/s", 1e9},
      {"TB/s", 1e12},    {"KiB/s", 1024.0}, {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0},
      {"Mb/s", 1e6 / 8}, {"Gb/s", 1e9 / 8},
  };
  for (const Unit& u : kUnits)
    if (unit == u.name) {
      core::require(v > 0.0, "comm", "bandwidth '", text, "' must be positive (or inf)");
      return v * u.scale;
    }
  core::fail("comm", "bad bandwidth unit '", unit, "' in '", text,
             "': expected B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, Mb/s, Gb/s or inf");
}

LinkModel LinkModel::parse(std::string_view text) {
  LinkModel m;
  text = trim(text);
  if (text.empty() || text == "none") return m;
  bool seen_intra = false, seen_inter = false;
  while (!text.empty()) {
    const size_t colon = text.find(':');
    const std::string_view part = trim(text.substr(0, colon));
    text = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
    const size_t eq = part.find('=');
    const size_t comma = part.find(',');
    core::require(eq != std::string_view::npos && comma != std::string_view::npos && comma > eq,
                  "comm", "bad link model part '", part,
                  "': expected intra=LAT,BW or inter=LAT,BW (e.g. inter=10us,12.5GB/s)");
    const std::string_view cls = trim(part.substr(0, eq));
    LinkClass lc;
    lc.latency_s = parse_duration(part.substr(eq + 1, comma - eq - 1));
    lc.bandwidth_Bps = parse_bandwidth(part.substr(comma + 1));
    if (cls == "intra") {
      core::require(!seen_intra, "comm", "link model names 'intra' twice");
      seen_intra = true;
      m.intra = lc;
    } else if (cls == "inter") {
      core::require(!seen_inter, "comm", "link model names 'inter' twice");
      seen_inter = true;
      m.inter = lc;
    } else {
      core::fail("comm", "bad link class '", cls, "' in link model: expected intra or inter");
    }
  }
  return m;
}

std::string LinkModel::str() const {
  if (!enabled()) return "none";
  return "intra=" + format_duration(intra.latency_s) + "," + format_bandwidth(intra.bandwidth_Bps) +
         ":inter=" + format_duration(inter.latency_s) + "," + format_bandwidth(inter.bandwidth_Bps);
}

}  // namespace longseq::comm
