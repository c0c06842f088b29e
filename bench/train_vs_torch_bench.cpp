// The peer in the repo (issue 19): `longseq train` (train::train, the command's code) beside the
// same LLaMA written plainly in PyTorch (bench/torch_llama_step.py, one process per length), one
// sequence, world 1, the same threads, at each --seq; writes the step-time ratio and the memory
// of both to JSON.
//
// longseq: preset main with --world 1 --threads T --seq N --checkpoint none (default), fp32; one
// warm-up step then the best of --reps steps (metrics' step seconds, wall); memory = the
// process's peak RSS (VmHWM; lengths run in increasing order, so each row's peak is its own) and
// the activations kept between forward and backward. PyTorch: one warm-up step then the best of
// --reps (wall, forward + backward + clipping + AdamW), peak RSS of its process.
//
// usage: train_vs_torch_bench [--seqs 4096,8192] [--threads 2] [--reps 2] [--checkpoint none]
//                             [--no-torch] [--python /usr/bin/python3] [--out PATH]
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/core/timer.hpp"
#include "longseq/train/config.hpp"
#include "longseq/train/trainer.hpp"

namespace {

using nlohmann::json;

std::string run_capture(const std::string& cmd, int& rc) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    rc = -1;
    return out;
  }
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  rc = ::pclose(p);
  return out;
}

std::string load_text(const char* path) {
  std::ifstream f(path);
  std::string s, line;
  while (std::getline(f, line)) s += line + "\n";
  return s;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> seqs = {4096, 8192};
  int threads = 2, reps = 2;
  bool torch = true;
  std::string checkpoint = "none", python = "/usr/bin/python3";
  std::string out = "bench_train_vs_torch.json";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "train_vs_torch_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seqs") {
      seqs.clear();
      std::string s = next();
      for (size_t p = 0; p <= s.size();) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        if (q > p) seqs.push_back(std::stoll(s.substr(p, q - p)));
        p = q + 1;
      }
    } else if (a == "--threads") {
      threads = std::stoi(next());
    } else if (a == "--reps") {
      reps = std::stoi(next());
    } else if (a == "--checkpoint") {
      checkpoint = next();
    } else if (a == "--no-torch") {
      torch = false;
    } else if (a == "--python") {
      python = next();
    } else if (a == "--out") {
      out = next();
    } else {
      std::fprintf(stderr,
                   "usage: train_vs_torch_bench [--seqs 4096,8192] [--threads 2] [--reps 2] "
                   "[--checkpoint none] [--no-torch] [--python PATH] [--out PATH]\n");
      return 2;
    }
  }
  std::sort(seqs.begin(), seqs.end());
  const double wall0 = longseq::core::now_seconds();
  const std::string load_before = load_text("/proc/loadavg");
  json rows = json::array();
  for (int64_t n : seqs) {
    longseq::train::TrainConfig c = longseq::train::preset("main");
    c.data = std::string(LONGSEQ_SOURCE_DIR) + "/data/kjv-genesis-exodus.txt";
    c.world = 1;
    c.dp = 1;
    c.threads = threads;
    c.seq = n;
    c.checkpoint = checkpoint;
    c.steps = 1 + reps;
    c.quiet = true;
    c.out = "";
    c.save_every = -1;
    const longseq::train::TrainSummary s = longseq::train::train(c);
    double best = 1e300;
    json all = json::array();
    for (size_t k = 0; k < s.steps.size(); ++k) {
      all.push_back(s.steps[k].seconds);
      if (k > 0) best = std::min(best, s.steps[k].seconds);
    }
    const auto& last = s.steps.back();
    json row = {{"seq", n},
                {"longseq",
                 {{"step_seconds", best},
                  {"all_step_seconds", all},
                  {"mfu", last.mfu},
                  {"peak_gflops", s.peak_gflops},
                  {"peak_rss_mib", last.peak_rss_mib},
                  {"saved_activation_mib", last.saved_activation_mib},
                  {"loss", last.loss}}}};
    std::printf("seq %lld: longseq %.2f s/step, peak RSS %.0f MiB\n", static_cast<long long>(n),
                best, last.peak_rss_mib);
    std::fflush(stdout);
    if (torch) {
      int rc = 0;
      const std::string cmd = python + " " + LONGSEQ_SOURCE_DIR + "/bench/torch_llama_step.py" +
                              " --seq " + std::to_string(n) + " --threads " +
                              std::to_string(threads) + " --reps " + std::to_string(reps);
      const std::string text = run_capture(cmd, rc);
      json t;
      try {
        t = json::parse(text.substr(text.find('{')));
      } catch (...) {
        std::fprintf(stderr, "train_vs_torch_bench: %s failed (status %d): %s\n", cmd.c_str(), rc,
                     text.c_str());
        return 1;
      }
      row["torch"] = t;
      const double ratio = t["step_seconds"].get<double>() / best;
      row["speedup"] = ratio;
      row["memory_ratio"] = t["peak_rss_mib"].get<double>() / last.peak_rss_mib;
      std::printf("seq %lld: torch %.2f s/step, peak RSS %.0f MiB: longseq %.2fx faster\n",
                  static_cast<long long>(n), t["step_seconds"].get<double>(),
                  t["peak_rss_mib"].get<double>(), ratio);
      std::fflush(stdout);
    }
    rows.push_back(row);
  }
  const json doc = {
      {"bench", "train_vs_torch"},
      {"model", "preset main (4 layers, hidden 256, 4 heads, head_dim 64, MLP 688, vocab 257)"},
      {"world", 1},
      {"threads", threads},
      {"checkpoint", checkpoint},
      {"precision", "fp32"},
      {"reps", reps},
      {"cpu", cpu_model()},
      {"loadavg_before", load_before},
      {"loadavg_after", load_text("/proc/loadavg")},
      {"wall_seconds", longseq::core::now_seconds() - wall0},
      {"rows", rows}};
  std::ofstream(out) << doc.dump(2) << "\n";
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
