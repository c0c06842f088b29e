#include "longseq/plan/hardware.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "longseq/core/data_path.hpp"
#include "longseq/core/error.hpp"

namespace longseq::plan {

using nlohmann::json;

namespace {

double number(const json& j, const char* key, std::string_view what, bool positive = true) {
  core::require(j.contains(key) && j.at(key).is_number(), "plan", "hardware profile ", what,
                ": missing or non-numeric field '", key, "'");
  const double v = j.at(key).get<double>();
  core::require(!positive || v > 0, "plan", "hardware profile ", what, ": field '", key,
                "' must be > 0, got ", v);
  return v;
}

double optional_efficiency(const json& j, const char* key, std::string_view what) {
  if (!j.contains(key)) return 1.0;
  const double v = number(j, key, what);
  core::require(v <= 1.5, "plan", "hardware profile ", what, ": correction '", key,
                "' = ", v, " is not an efficiency (expected 0 < x <= 1.5)");
  return v;
}

}  // namespace

Hardware parse_hardware(const std::string& json_text, std::string_view what) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    core::fail("plan", "hardware profile ", what, " is not valid JSON: ", e.what());
  }
  core::require(j.is_object(), "plan", "hardware profile ", what, " must be a JSON object");
  Hardware hw;
  hw.name = j.value("name", std::string(what));
  hw.description = j.value("description", std::string());
  hw.source = j.value("source", std::string());
  hw.gpus_per_node = static_cast<int>(number(j, "gpus_per_node", what));
  hw.memory_bytes = number(j, "memory_bytes", what);
  hw.peak_flops = number(j, "peak_flops", what);
  hw.dtype_bytes = static_cast<int>(number(j, "dtype_bytes", what));
  core::require(j.contains("intra") && j.contains("inter"), "plan", "hardware profile ", what,
                ": needs 'intra' and 'inter' link objects");
  hw.intra.latency_s = number(j["intra"], "latency_s", what, false);
  hw.intra.bandwidth_Bps = number(j["intra"], "bandwidth_Bps", what);
  hw.inter.latency_s = number(j["inter"], "latency_s", what, false);
  hw.inter_node_bandwidth_Bps = number(j["inter"], "node_bandwidth_Bps", what);
  // Every rank of a node sends at once in the ring schedules, so each gets its share of the NICs.
  hw.inter.bandwidth_Bps = hw.inter_node_bandwidth_Bps / hw.gpus_per_node;
  if (j.contains("corrections")) {
    const json& c = j["corrections"];
    hw.corrections.gemm_efficiency = optional_efficiency(c, "gemm_efficiency", what);
    hw.corrections.attention_fwd_efficiency = optional_efficiency(c, "attention_fwd_efficiency", what);
    hw.corrections.attention_bwd_efficiency = optional_efficiency(c, "attention_bwd_efficiency", what);
    hw.corrections.collective_efficiency = optional_efficiency(c, "collective_efficiency", what);
    for (auto [key, field] : {std::pair{"partial_tile_cost_fwd", &hw.corrections.partial_tile_cost_fwd},
                              std::pair{"partial_tile_cost_bwd", &hw.corrections.partial_tile_cost_bwd}})
      if (c.contains(key)) {
        *field = number(c, key, what);
        core::require(*field <= 10, "plan", "hardware profile ", what, ": correction '", key, "' = ", *field,
                      " is not a relative cost (expected 0 < x <= 10)");
      }
    hw.corrections.source = c.value("source", std::string());
  }
  if (j.contains("kernel_tiles")) {
    const json& t = j["kernel_tiles"];
    hw.tiles.fwd_q = static_cast<int64_t>(number(t, "fwd_q", what));
    hw.tiles.fwd_k = static_cast<int64_t>(number(t, "fwd_k", what));
    hw.tiles.bwd_q = static_cast<int64_t>(number(t, "bwd_q", what));
    hw.tiles.bwd_k = static_cast<int64_t>(number(t, "bwd_k", what));
  }
  if (j.contains("host_cores")) hw.host_cores = static_cast<int>(number(j, "host_cores", what));
  if (j.contains("wait_copy")) {
    hw.wait_copy.latency_s = number(j["wait_copy"], "latency_s", what, false);
    hw.wait_copy.bandwidth_Bps = number(j["wait_copy"], "bandwidth_Bps", what);
  }
  if (j.contains("mpi")) {
    const json& m = j["mpi"];
    hw.mpi_measured = m.value("measured", false);
    hw.mpi_note = m.value("note", std::string());
    if (hw.mpi_measured) {
      hw.mpi.latency_s = number(m, "latency_s", what, false);
      hw.mpi.bandwidth_Bps = number(m, "bandwidth_Bps", what);
    }
  }
  return hw;
}

std::string hardware_to_json(const Hardware& hw) {
  json j;
  j["name"] = hw.name;
  j["description"] = hw.description;
  j["source"] = hw.source;
  j["gpus_per_node"] = hw.gpus_per_node;
  j["memory_bytes"] = hw.memory_bytes;
  j["peak_flops"] = hw.peak_flops;
  j["dtype_bytes"] = hw.dtype_bytes;
  j["intra"] = {{"latency_s", hw.intra.latency_s}, {"bandwidth_Bps", hw.intra.bandwidth_Bps}};
  j["inter"] = {{"latency_s", hw.inter.latency_s},
                {"node_bandwidth_Bps", hw.inter_node_bandwidth_Bps}};
  j["corrections"] = {{"gemm_efficiency", hw.corrections.gemm_efficiency},
                      {"attention_fwd_efficiency", hw.corrections.attention_fwd_efficiency},
                      {"attention_bwd_efficiency", hw.corrections.attention_bwd_efficiency},
                      {"collective_efficiency", hw.corrections.collective_efficiency},
                      {"source", hw.corrections.source}};
  if (hw.host_cores > 0) j["host_cores"] = hw.host_cores;
  if (hw.tiles.enabled()) {
    j["kernel_tiles"] = {{"fwd_q", hw.tiles.fwd_q}, {"fwd_k", hw.tiles.fwd_k}, {"bwd_q", hw.tiles.bwd_q},
                         {"bwd_k", hw.tiles.bwd_k}};
    j["corrections"]["partial_tile_cost_fwd"] = hw.corrections.partial_tile_cost_fwd;
    j["corrections"]["partial_tile_cost_bwd"] = hw.corrections.partial_tile_cost_bwd;
  }
  if (hw.wait_copy.bandwidth_Bps > 0)
    j["wait_copy"] = {{"latency_s", hw.wait_copy.latency_s}, {"bandwidth_Bps", hw.wait_copy.bandwidth_Bps}};
  if (hw.mpi_measured)
    j["mpi"] = {{"measured", true}, {"latency_s", hw.mpi.latency_s}, {"bandwidth_Bps", hw.mpi.bandwidth_Bps},
                {"note", hw.mpi_note}};
  else if (!hw.mpi_note.empty())
    j["mpi"] = {{"measured", false}, {"note", hw.mpi_note}};
  return j.dump(2) + "\n";
}

std::string data_dir() { return core::data_dir(); }

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
