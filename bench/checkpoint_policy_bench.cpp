// The four checkpoint policies (and bf16 vs fp32) on one training configuration: step time and
// memory, each case in its own forked process so that its peak RSS is its own.
//
// Per case: step seconds (best over the steps after the first, and over --reps rounds that visit
// the cases in turn, so machine load hits every case alike), saved activations (what the policy
// keeps between forward and backward, largest rank, from the trainer), "checkpoint extra" (saved
// minus full's: the block inputs every checkpointing policy keeps are subtracted, leaving what the
// policy's whitelist adds, the memory BurstEngine §3.2 compares), peak RSS of the process and its
// growth over the process's RSS before training (the step's real memory: parameters, optimizer
// shards, saved activations and the transient recomputation of one block).
//   checkpoint_policy_bench [--out PATH] [--preset P] [--seq N] [--layers L] [--world W]
//                           [--steps S] [--reps R] [--precisions fp32,bf16]
//                           [--policies none,full,selective++,seq-selective] [--fractions 0.5,0.75]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/train/trainer.hpp"

using namespace longseq;
using nlohmann::json;

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

struct Case {
  std::string policy, precision;
  double fraction = 0.5;
  std::string name() const {
    return policy == "seq-selective" ? core::cat(policy, ":", fraction, " ", precision)
                                     : core::cat(policy, " ", precision);
  }
};

// Runs one case in a child process; returns its measurements (or throws naming the case).
json run_case(const train::TrainConfig& base, const Case& k) {
  int fd[2];
  core::require(pipe(fd) == 0, "checkpoint_policy_bench", "pipe failed: ", std::strerror(errno));
  const pid_t pid = fork();
  core::require(pid >= 0, "checkpoint_policy_bench", "fork failed: ", std::strerror(errno));
  if (pid == 0) {
    close(fd[0]);
    json r;
    try {
      train::TrainConfig c = base;
      c.checkpoint = k.policy;
      c.precision = k.precision;
      c.seq_selective_fraction = k.fraction;
      const double rss0 = static_cast<double>(core::current_rss_bytes()) / (1024.0 * 1024.0);
      const train::TrainSummary s = train::train(c);
      double best = 1e30;
      for (size_t i = s.steps.size() > 1 ? 1 : 0; i < s.steps.size(); ++i)
        best = std::min(best, s.steps[i].seconds);
      r = {{"step_seconds", best},
           {"saved_activation_mib", s.steps.back().saved_activation_mib},
           {"peak_rss_mib", s.steps.back().peak_rss_mib},
           {"rss_growth_mib", s.steps.back().peak_rss_mib - rss0},
           {"loss", s.steps.back().loss},
           {"mfu", s.steps.back().mfu}};
    } catch (const std::exception& e) {
      r = {{"error", e.what()}};
    }
    const std::string txt = r.dump();
    size_t off = 0;
    while (off < txt.size()) {
      const ssize_t w = write(fd[1], txt.data() + off, txt.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    close(fd[1]);
    _exit(0);
  }
  close(fd[1]);
  std::string txt;
  char buf[4096];
  for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;) txt.append(buf, static_cast<size_t>(n));
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  core::require(WIFEXITED(status) && WEXITSTATUS(status) == 0 && !txt.empty(),
                "checkpoint_policy_bench", "case ", k.name(), " died (status ", status, ")");
  json r = json::parse(txt);
  core::require(!r.contains("error"), "checkpoint_policy_bench", "case ", k.name(), ": ",
                r.value("error", std::string()));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "bench_checkpoint_policies.json", preset = "main";
  std::string precisions = "fp32", policies = "none,full,selective++,seq-selective",
              fractions = "0.5";
  int64_t seq = 16384, layers = 0, steps = 2;
  int world = 0, reps = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      core::require(i + 1 < argc, "checkpoint_policy_bench", a, " needs a value");
      return argv[++i];
    };
    if (a == "--out")
      out = next();
    else if (a == "--preset")
      preset = next();
    else if (a == "--seq")
      seq = std::stoll(next());
    else if (a == "--layers")
      layers = std::stoll(next());
    else if (a == "--world")
      world = std::stoi(next());
    else if (a == "--steps")
      steps = std::stoll(next());
    else if (a == "--reps")
      reps = std::stoi(next());
    else if (a == "--precisions")
      precisions = next();
    else if (a == "--policies")
      policies = next();
    else if (a == "--fractions")
      fractions = next();
    else {
      std::printf(
          "usage: checkpoint_policy_bench [--out PATH (%s)] [--preset P (main)] [--seq N "
          "(16384)] [--layers L (preset)] [--world W (preset)] [--steps S (2)] [--reps R "
          "(1)] [--precisions LIST (fp32)] [--policies LIST (all four)] [--fractions LIST "
          "(0.5; seq-selective)]\n",
          out.c_str());
      return a == "--help" ? 0 : 2;
    }
  }
  train::TrainConfig base = train::preset(preset);
  base.seq = seq;
  base.steps = steps;
  base.quiet = true;
  base.save_every = -1;
  if (layers > 0) base.model.layers = layers;
  if (world > 0) base.world = world;
  base.data = std::string(LONGSEQ_SOURCE_DIR) + "/" + base.data;
  base.validate();

  std::vector<Case> cases;
  for (const auto& pr : split_list(precisions))
    for (const auto& po : split_list(policies)) {
      if (po == "seq-selective")
        for (const auto& f : split_list(fractions)) cases.push_back({po, pr, std::stod(f)});
      else
        cases.push_back({po, pr, 0.5});
    }
  std::vector<json> best(cases.size());
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < cases.size(); ++i) {
      json m = run_case(base, cases[i]);
      std::printf(
          "rep %d  %-24s step %.2f s  saved %.1f MiB  peak RSS %.0f MiB (+%.0f)  loss %.4f\n", r,
          cases[i].name().c_str(), m["step_seconds"].get<double>(),
          m["saved_activation_mib"].get<double>(), m["peak_rss_mib"].get<double>(),
          m["rss_growth_mib"].get<double>(), m["loss"].get<double>());
      std::fflush(stdout);
      if (best[i].is_null() || m["step_seconds"] < best[i]["step_seconds"]) {
        const json keep_mem = best[i].is_null() ? m : best[i];
        best[i] = m;
        // memory is deterministic; keep the largest RSS growth seen (the honest one)
        best[i]["rss_growth_mib"] =
            std::max(m["rss_growth_mib"].get<double>(), keep_mem["rss_growth_mib"].get<double>());
      }
    }
  // checkpoint extra: saved minus full's saved at the same precision
  json results = json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    double full = -1;
    for (size_t j = 0; j < cases.size(); ++j)
      if (cases[j].policy == "full" && cases[j].precision == cases[i].precision)
        full = best[j]["saved_activation_mib"];
    json e = best[i];
    e["policy"] = cases[i].policy;
    e["precision"] = cases[i].precision;
    if (cases[i].policy == "seq-selective") e["seq_selective_fraction"] = cases[i].fraction;
    if (full >= 0) e["checkpoint_extra_mib"] = e["saved_activation_mib"].get<double>() - full;
    results.push_back(e);
  }
  // seq-selective against selective++ (same precision): memory saved and time added
  json ratios = json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].policy != "seq-selective") continue;
    for (size_t j = 0; j < cases.size(); ++j) {
      if (cases[j].policy != "selective++" || cases[j].precision != cases[i].precision) continue;
      const json &s = results[i], &p = results[j];
      json q = {{"precision", cases[i].precision},
                {"seq_selective_fraction", cases[i].fraction},
                {"time_ratio", s["step_seconds"].get<double>() / p["step_seconds"].get<double>()},
                {"saved_activation_reduction", 1.0 - s["saved_activation_mib"].get<double>() /
                                                         p["saved_activation_mib"].get<double>()},
                {"rss_growth_reduction",
                 1.0 - s["rss_growth_mib"].get<double>() / p["rss_growth_mib"].get<double>()}};
      if (s.contains("checkpoint_extra_mib") && p["checkpoint_extra_mib"].get<double>() > 0)
        q["checkpoint_extra_reduction"] =
            1.0 - s["checkpoint_extra_mib"].get<double>() / p["checkpoint_extra_mib"].get<double>();
      const std::string extra =
          q.contains("checkpoint_extra_reduction")
              ? core::cat(100 * q["checkpoint_extra_reduction"].get<double>(), "%")
              : std::string("n/a (no full case)");
      std::printf(
          "seq-selective:%g vs selective++ (%s): time x%.3f, saved -%.1f%%, checkpoint "
          "extra -%s, RSS growth -%.1f%%\n",
          cases[i].fraction, cases[i].precision.c_str(), q["time_ratio"].get<double>(),
          100 * q["saved_activation_reduction"].get<double>(), extra.c_str(),
          100 * q["rss_growth_reduction"].get<double>());
      ratios.push_back(q);
    }
  }
  json config = base.to_json();
  config["reps"] = reps;
  core::write_file_atomic(out, json{{"bench", "checkpoint_policies"},
                                    {"config", config},
                                    {"cases", results},
                                    {"seq_selective_vs_selective_pp", ratios}}
                                       .dump(1) +
                                   "\n");
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
