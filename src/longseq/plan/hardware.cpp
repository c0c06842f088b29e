#include "longseq/plan/hardware.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "longseq/core/data_path.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/options.hpp"

namespace longseq::plan {

using nlohmann::json;

namespace {

using core::Scope;

// Every field of a profile, declared once: the reader, the writer and the checks are loops over
// this table (core/options.hpp). Keys with dots are nested objects of the file.
#define HW(key, member, check, required, help)                                                  \
  core::Field<Hardware> {                                                                       \
    key, "", help, Scope::json, [](Hardware& h) -> core::FieldRef { return &h.member; }, check, \
        required                                                                                \
  }
const std::vector<core::Field<Hardware>> kFields = {
    HW("name", name, core::any(), false, "profile name (default: the file's)"),
    HW("description", description, core::any(), false, "one line"),
    HW("source", source, core::any(), false, "paper section or calibrate run"),
    HW("gpus_per_node", gpus_per_node, core::at_least(1), true, "ranks per node"),
    HW("memory_bytes", memory_bytes, core::above(0), true, "device memory per GPU"),
    HW("peak_flops", peak_flops, core::above(0), true, "dense peak of the training dtype"),
    HW("dtype_bytes", dtype_bytes, core::at_least(1), true, "bytes per activation element"),
    HW("memory_bandwidth_Bps", memory_bandwidth_Bps, core::at_least(0), false,
       "device memory bandwidth per GPU: the optimizer step (0: not modelled)"),
    // The links are required of every profile but a single GPU's (parse_hardware checks them).
    HW("intra.latency_s", intra.latency_s, core::at_least(0), false, "intra-node alpha"),
    HW("intra.bandwidth_Bps", intra.bandwidth_Bps, core::at_least(0), false,
       "intra-node beta per rank (> 0 unless gpu.name)"),
    HW("inter.latency_s", inter.latency_s, core::at_least(0), false, "inter-node alpha"),
    HW("inter.node_bandwidth_Bps", inter_node_bandwidth_Bps, core::at_least(0), false,
       "inter-node bandwidth of a node, shared by its ranks (> 0 unless gpu.name)"),
    HW("corrections.gemm_efficiency", corrections.gemm_efficiency,
       core::above_at_most(0, 1.5, " (an efficiency)"), false, "achieved / peak, large GEMMs"),
    HW("corrections.attention_fwd_efficiency", corrections.attention_fwd_efficiency,
       core::above_at_most(0, 1.5, " (an efficiency)"), false,
       "achieved / peak, attention forward"),
    HW("corrections.attention_bwd_efficiency", corrections.attention_bwd_efficiency,
       core::above_at_most(0, 1.5, " (an efficiency)"), false,
       "achieved / peak, attention backward"),
    HW("corrections.collective_efficiency", corrections.collective_efficiency,
       core::above_at_most(0, 1.5, " (an efficiency)"), false, "achieved / link, ring collectives"),
    HW("corrections.partial_tile_cost_fwd", corrections.partial_tile_cost_fwd,
       core::above_at_most(0, 10, " (a relative cost)"), false,
       "partial / full tile pair, forward"),
    HW("corrections.partial_tile_cost_bwd", corrections.partial_tile_cost_bwd,
       core::above_at_most(0, 10, " (a relative cost)"), false,
       "partial / full tile pair, backward"),
    HW("corrections.source", corrections.source, core::any(), false,
       "where the corrections come from"),
    HW("host_cores", host_cores, core::at_least(0), false, "cores of the one host (0: GPUs)"),
    HW("kernel_tiles.fwd_q", tiles.fwd_q, core::at_least(0), false, "forward tile rows (0: unset)"),
    HW("kernel_tiles.fwd_k", tiles.fwd_k, core::at_least(0), false, "forward tile columns"),
    HW("kernel_tiles.bwd_q", tiles.bwd_q, core::at_least(0), false, "backward tile rows"),
    HW("kernel_tiles.bwd_k", tiles.bwd_k, core::at_least(0), false, "backward tile columns"),
    HW("wait_copy.latency_s", wait_copy.latency_s, core::at_least(0), false,
       "local backend copy alpha"),
    HW("wait_copy.bandwidth_Bps", wait_copy.bandwidth_Bps, core::at_least(0), false,
       "local backend copy beta (0: none)"),
    HW("mpi.measured", mpi_measured, core::any(), false, "whether calibrate measured the MPI link"),
    HW("mpi.note", mpi_note, core::any(), false, "how, or why not"),
    HW("mpi.latency_s", mpi.latency_s, core::at_least(0), false, "MPI alpha"),
    HW("mpi.bandwidth_Bps", mpi.bandwidth_Bps, core::at_least(0), false, "MPI beta"),
    HW("gpu.name", gpu.name, core::any(), false,
       "a single GPU's name (calibrate --device cuda; empty: not a GPU profile)"),
    HW("gpu.gemm_bf16_flops", gpu.gemm_bf16_flops, core::at_least(0), false,
       "measured bf16 GEMM rate"),
    HW("gpu.gemm_f32_flops", gpu.gemm_f32_flops, core::at_least(0), false,
       "measured fp32 GEMM rate"),
    HW("gpu.memory_bandwidth_Bps", gpu.memory_bandwidth_Bps, core::at_least(0), false,
       "measured device-to-device copy rate (0: not measured)"),
};
// The link fields every profile but a single GPU's must give, > 0.
const char* const kLinkKeys[] = {"intra.latency_s", "intra.bandwidth_Bps", "inter.latency_s",
                                 "inter.node_bandwidth_Bps"};
#undef HW

// Written by calibrate or kept for readers, never read back. attention_curve is an array, read
// apart from the scalar table (read_curve).
const std::vector<std::string> kIgnored = {"measurements", "intra.note", "inter.note",
                                           "memory_bandwidth_note", "attention_curve"};

// "attention_curve": {"source": "...", "points": [{"tokens": 1024, "fwd": 0.08, "bwd": 0.06},
// ...]}: tokens strictly increasing and >= 1, efficiencies in (0, 1.5].
BlockCurve read_curve(const json& j, const std::string& where) {
  BlockCurve c;
  const std::string at = where + " attention_curve";
  core::require(j.is_object(), "plan", at, " must be an object {source, points}");
  for (const auto& [k, v] : j.items())
    core::require(k == "source" || k == "points", "plan", at, ": unknown key '", k,
                  "' (known: source, points)");
  if (j.contains("source")) {
    core::require(j["source"].is_string(), "plan", at, ".source must be a string");
    c.source = j["source"].get<std::string>();
  }
  core::require(j.contains("points") && j["points"].is_array() && !j["points"].empty(), "plan", at,
                ".points must be a non-empty array of {tokens, fwd, bwd}");
  for (size_t i = 0; i < j["points"].size(); ++i) {
    const json& p = j["points"][i];
    const std::string pi = core::cat(at, ".points[", i, "]");
    core::require(p.is_object() && p.size() == 3 && p.contains("tokens") && p.contains("fwd") &&
                      p.contains("bwd"),
                  "plan", pi, " must be {tokens, fwd, bwd}, got ", p.dump());
    for (const char* k : {"tokens", "fwd", "bwd"})
      core::require(p[k].is_number(), "plan", pi, ".", k, " must be a number, got ", p[k].dump());
    BlockCurve::Point pt{p["tokens"].get<double>(), p["fwd"].get<double>(), p["bwd"].get<double>()};
    core::require(pt.tokens >= 1, "plan", pi, ".tokens ", pt.tokens, " must be >= 1");
    core::require(pt.fwd > 0 && pt.fwd <= 1.5 && pt.bwd > 0 && pt.bwd <= 1.5, "plan", pi,
                  " efficiencies fwd ", pt.fwd, " bwd ", pt.bwd, " must be in (0, 1.5]");
    core::require(c.points.empty() || pt.tokens > c.points.back().tokens, "plan", pi, ".tokens ",
                  pt.tokens, " must be larger than the previous point's ",
                  c.points.empty() ? 0.0 : c.points.back().tokens);
    c.points.push_back(pt);
  }
  return c;
}

}  // namespace

double BlockCurve::at(double tokens, bool fwd) const {
  LONGSEQ_CHECK_MSG(!points.empty() && tokens > 0, "BlockCurve::at tokens ", tokens);
  const auto eff = [fwd](const Point& p) { return fwd ? p.fwd : p.bwd; };
  if (tokens <= points.front().tokens) return eff(points.front());
  if (tokens >= points.back().tokens) return eff(points.back());
  size_t i = 1;
  while (points[i].tokens < tokens) ++i;
  const Point &a = points[i - 1], &b = points[i];
  const double t =
      (std::log2(tokens) - std::log2(a.tokens)) / (std::log2(b.tokens) - std::log2(a.tokens));
  return eff(a) + t * (eff(b) - eff(a));
}

const std::vector<core::Field<Hardware>>& hardware_fields() {
  return kFields;
}

Hardware parse_hardware(const std::string& json_text, std::string_view what) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    core::fail("plan", "hardware profile ", what, " is not valid JSON: ", e.what());
  }
  const std::string where = core::cat("hardware profile ", what);
  core::require(j.is_object(), "plan", where, " must be a JSON object");
  Hardware hw;
  hw.name = std::string(what);
  core::fields_from_json(kFields, hw, j, "plan", where, kIgnored);
  core::check_fields(kFields, hw, "plan", where + ": ");
  if (!hw.single_gpu()) {
    for (const char* key : kLinkKeys)
      if (!j.contains(core::key_pointer(key))) core::fail_missing_key("plan", where, key);
    core::require(hw.intra.bandwidth_Bps > 0, "plan", where, ": intra.bandwidth_Bps ",
                  hw.intra.bandwidth_Bps, " must be > 0");
    core::require(hw.inter_node_bandwidth_Bps > 0, "plan", where, ": inter.node_bandwidth_Bps ",
                  hw.inter_node_bandwidth_Bps, " must be > 0");
  }
  if (j.contains("attention_curve")) hw.attention_curve = read_curve(j["attention_curve"], where);
  // Every rank of a node sends at once in the ring schedules, so each gets its share of the NICs.
  hw.inter.bandwidth_Bps = hw.inter_node_bandwidth_Bps / hw.gpus_per_node;
  core::require(!hw.mpi_measured || hw.mpi.bandwidth_Bps > 0, "plan", where,
                ": mpi.measured needs mpi.bandwidth_Bps > 0");
  return hw;
}

std::string hardware_to_json(const Hardware& hw) {
  json j = core::fields_to_json(kFields, hw);
  if (hw.attention_curve.enabled()) {
    json pts = json::array();
    for (const BlockCurve::Point& p : hw.attention_curve.points)
      pts.push_back({{"tokens", p.tokens}, {"fwd", p.fwd}, {"bwd", p.bwd}});
    j["attention_curve"] = {{"source", hw.attention_curve.source}, {"points", pts}};
  }
  return j.dump(2) + "\n";
}

std::string data_dir() {
  return core::data_dir();
}

std::vector<std::string> hardware_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(data_dir() + "/hardware", ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Hardware load_hardware(std::string_view name_or_file) {
  std::string path(name_or_file);
  const bool is_file = path.find('/') != std::string::npos || path.ends_with(".json");
  if (!is_file) path = data_dir() + "/hardware/" + path + ".json";
  std::ifstream in(path);
  if (!in) {
    std::string known;
    for (const auto& n : hardware_names()) known += (known.empty() ? "" : ", ") + n;
    core::fail("plan", "--hardware '", name_or_file, "': no such profile (", path,
               "); known profiles: ", known.empty() ? "(none found)" : known,
               ", or give a path to a .json file");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_hardware(ss.str(), path);
}

}  // namespace longseq::plan
