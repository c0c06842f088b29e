// The planner's prediction beside measured runs of `longseq attention` (bench/cluster_attention.sh
// on a cluster of network namespaces, docs/cluster.md).
//
//   cluster_predict_bench --dir OUT [--hardware local] [--link intra=LAT,BW:inter=LAT,BW] [--out
//   FILE]
//
// Every OUT/*/stats.json is one measured run (algo, N, heads, world, nodes from the file). The
// measured pass time is the critical rank's compute_s + wait_s of the pass (what the executor
// timed around its kernels and waits; the world start and the gather to rank 0 are not in it);
// bytes are the sums over ranks of what they sent intra- and inter-node. The prediction is
// plan::cost_attention() for the same problem with the hardware profile --hardware (compute
// rates) and its intra/inter links replaced by the links measured on the cluster: from --link, or
// fitted from OUT/pingpong_{intra,inter}.json (comm_bench --ops pingpong under the cluster:
// alpha = the smallest message's one-way time, beta = the largest message's bandwidth).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/comm/link_model.hpp"
#include "longseq/core/error.hpp"
#include "longseq/plan/attention_cost.hpp"
#include "longseq/plan/hardware.hpp"

namespace {

using namespace longseq;
using json = nlohmann::json;
namespace fs = std::filesystem;

std::string arg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

json read_json(const fs::path& p) {
  std::ifstream f(p);
  core::require(static_cast<bool>(f), "bench", "cannot read ", p.string());
  return json::parse(f);
}

/// alpha, beta of a comm_bench pingpong file; false when absent.
bool fit_pingpong(const fs::path& p, plan::Link& link) {
  if (!fs::exists(p)) return false;
  const json j = read_json(p);
  double small_b = 1e300, small_t = 0, big_b = 0, big_t = 0;
  for (const json& r : j["results"]) {
    if (r["op"] != "pingpong") continue;
    const double b = r["bytes"].get<double>(), t = r["time_us"].get<double>() * 1e-6;
    if (b < small_b) small_b = b, small_t = t;
    if (b > big_b) big_b = b, big_t = t;
  }
  if (big_b == 0) return false;
  link.latency_s = small_t;
  link.bandwidth_Bps = big_b / big_t;
  return true;
}

/// The planner's name of a `longseq attention` algorithm name (stats.json "algo"): the same
/// vocabulary, with the double ring's inner ring size named (the ranks of one node).
std::string planner_name(const std::string& algo, int per_node) {
  attention::Algorithm a = attention::Algorithm::parse(algo);
  if (a.ring_family() && a.route == attention::Route::double_ring && a.inner == 0)
    a.inner = per_node;
  return a.name();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const fs::path dir = arg(argc, argv, "--dir", "");
    core::require(!dir.empty() && fs::is_directory(dir), "bench",
                  "--dir DIR of measured runs is required");
    plan::Hardware hw = plan::load_hardware(arg(argc, argv, "--hardware", "local"));
    const std::string link_text = arg(argc, argv, "--link", "");
    std::string link_source;
    if (!link_text.empty()) {
      const comm::LinkModel lm = comm::LinkModel::parse(link_text);
      hw.intra = {lm.intra.latency_s, lm.intra.bandwidth_Bps};
      hw.inter = {lm.inter.latency_s, lm.inter.bandwidth_Bps};
      link_source = "--link " + link_text;
    } else {
      const bool a = fit_pingpong(dir / "pingpong_intra.json", hw.intra);
      const bool b = fit_pingpong(dir / "pingpong_inter.json", hw.inter);
      core::require(a && b, "bench",
                    "no --link and no pingpong_intra.json / pingpong_inter.json in ", dir.string());
      link_source = "comm_bench pingpong on the cluster (pingpong_intra.json, pingpong_inter.json)";
    }
    // MPI ranks of one host share its cores: the profile's host cores bound concurrent compute.
    std::vector<fs::path> runs;
    for (const auto& e : fs::directory_iterator(dir))
      if (fs::exists(e.path() / "stats.json")) runs.push_back(e.path());
    std::sort(runs.begin(), runs.end());
    json rows = json::array();
    std::printf("links: intra %.1f us + %.3f GB/s, inter %.1f us + %.3f GB/s (%s)\n",
                hw.intra.latency_s * 1e6, hw.intra.bandwidth_Bps / 1e9, hw.inter.latency_s * 1e6,
                hw.inter.bandwidth_Bps / 1e9, link_source.c_str());
    std::printf("%-18s %6s | %8s %8s %8s | %8s %8s %8s | %6s | %10s %10s | %10s %10s\n", "algo",
                "N", "meas fwd", "meas bwd", "meas tot", "pred fwd", "pred bwd", "pred tot", "p/m",
                "meas intra", "meas inter", "pred intra", "pred inter");
    for (const fs::path& run : runs) {
      const json s = read_json(run / "stats.json");
      const std::string algo = s["algo"];
      const int world = s["world"], nodes = s["nodes"];
      double fwd = 0, bwd = 0, comp = 0, wait = 0;
      double intra = 0, inter = 0;
      for (const json& r : s["ranks"]) {
        fwd = std::max(
            fwd, r["forward"]["compute_s"].get<double>() + r["forward"]["wait_s"].get<double>());
        if (r.contains("backward"))
          bwd = std::max(bwd, r["backward"]["compute_s"].get<double>() +
                                  r["backward"]["wait_s"].get<double>());
        comp = std::max(comp, r["compute_s"].get<double>());
        wait = std::max(wait, r["wait_s"].get<double>());
        intra += r["bytes_sent_intra"].get<double>();
        inter += r["bytes_sent_inter"].get<double>();
      }
      plan::AttnProblem p;
      p.n = s["n"];
      p.hq = s["hq"];
      p.hkv = s["hkv"];
      p.d = s["d"];
      p.world = world;
      p.gpus_per_node = world / nodes;
      p.balance = attention::parse_balance(s["balance"].get<std::string>());
      p.mask.causal = true;
      const std::string pname = planner_name(algo, world / nodes);
      json row = {{"algo", algo},
                  {"planner_algo", pname},
                  {"n", p.n},
                  {"hq", p.hq},
                  {"hkv", p.hkv},
                  {"d", p.d},
                  {"world", world},
                  {"nodes", nodes},
                  {"measured",
                   {{"forward_s", fwd},
                    {"backward_s", bwd},
                    {"total_s", fwd + bwd},
                    {"compute_s_max_rank", comp},
                    {"wait_s_max_rank", wait},
                    {"wall_s", s["seconds"]},
                    {"bytes_sent_intra", intra},
                    {"bytes_sent_inter", inter}}}};
      try {
        const attention::Algorithm a = attention::Algorithm::parse(pname);
        const plan::AttentionCost c = plan::cost_attention(a, p, hw);
        const double pt = c.forward.seconds + c.backward.seconds;
        const double pintra = (c.forward.bytes_intra + c.backward.bytes_intra) * world;
        const double pinter = (c.forward.bytes_inter + c.backward.bytes_inter) * world;
        row["predicted"] = {{"model", c.forward.model},
                            {"forward_s", c.forward.seconds},
                            {"backward_s", c.backward.seconds},
                            {"total_s", pt},
                            {"compute_s", c.forward.compute_s + c.backward.compute_s},
                            {"bytes_sent_intra", pintra},
                            {"bytes_sent_inter", pinter}};
        row["predicted_over_measured"] = pt / (fwd + bwd);
        std::printf(
            "%-18s %6lld | %8.3f %8.3f %8.3f | %8.3f %8.3f %8.3f | %6.2f | %10.0f %10.0f | %10.0f "
            "%10.0f\n",
            algo.c_str(), static_cast<long long>(p.n), fwd, bwd, fwd + bwd, c.forward.seconds,
            c.backward.seconds, pt, pt / (fwd + bwd), intra, inter, pintra, pinter);
      } catch (const std::exception& e) {
        row["predicted"] = {{"error", e.what()}};
        std::printf("%-18s %6lld | %8.3f %8.3f %8.3f | no prediction: %s\n", algo.c_str(),
                    static_cast<long long>(p.n), fwd, bwd, fwd + bwd, e.what());
      }
      rows.push_back(row);
    }
    json cluster =
        fs::exists(dir / "cluster.json") ? read_json(dir / "cluster.json") : json::object();
    const json report = {
        {"bench", "cluster_attention"},
        {"cluster", cluster},
        {"hardware_profile", hw.name},
        {"links",
         {{"source", link_source},
          {"intra", {{"latency_s", hw.intra.latency_s}, {"bandwidth_Bps", hw.intra.bandwidth_Bps}}},
          {"inter",
           {{"latency_s", hw.inter.latency_s}, {"bandwidth_Bps", hw.inter.bandwidth_Bps}}}}},
        {"rows", rows}};
    const std::string out = arg(argc, argv, "--out", "");
    if (!out.empty()) std::ofstream(out) << report.dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
