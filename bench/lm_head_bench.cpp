// LM head + cross-entropy: fused (BurstEngine Algorithm 3, token tiles, no [T, V] buffer) against
// unfused (materialised [T, V] logits). Reports seconds (best of --reps), GFLOP/s (6 T C V: the
// forward product and the two gradient products) and the loss buffers each path allocates
// (fused: Bs x V floats; unfused: T x V floats). Writes JSON to --out, prints a table.
//   lm_head_bench [--out PATH] [--reps R] [--threads N]
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/kernels/cpu/lm_head.hpp"
#include "longseq/kernels/gemm.hpp"

using namespace longseq;

int main(int argc, char** argv) {
  std::string out = "bench_lm_head.json";
  int reps = 3, threads = 1;
  std::vector<int64_t> ts = {8192}, vs = {257, 32000, 128256};
  int64_t c = 256;
  double max_unfused_gib = 18.0;
  auto int_list = [](const std::string& x) {
    std::vector<int64_t> r;
    size_t p = 0;
    while (p <= x.size()) {
      const size_t q = std::min(x.find(',', p), x.size());
      r.push_back(std::stoll(x.substr(p, q - p)));
      p = q + 1;
    }
    return r;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      core::require(i + 1 < argc, "lm_head_bench", a, " needs a value");
      return argv[++i];
    };
    if (a == "--out")
      out = next();
    else if (a == "--reps")
      reps = std::stoi(next());
    else if (a == "--threads")
      threads = std::stoi(next());
    else if (a == "--t")
      ts = int_list(next());
    else if (a == "--v")
      vs = int_list(next());
    else if (a == "--c")
      c = std::stoll(next());
    else if (a == "--max-unfused-gib")
      max_unfused_gib = std::stod(next());
    else {
      std::printf(
          "usage: lm_head_bench [--out PATH (bench_lm_head.json)] [--reps R (3)] "
          "[--threads N (1)] [--t LIST (8192)] [--v LIST (257,32000,128256)] [--c C "
          "(256)] [--max-unfused-gib G (18): skip unfused cases whose [T, V] logits are "
          "larger]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  struct Shape {
    int64_t t, c, v;
  };
  nlohmann::json cases = nlohmann::json::array();
  std::printf("%6s %5s %6s  %-8s %9s %9s %12s\n", "T", "C", "V", "path", "seconds", "GFLOP/s",
              "loss MiB");
  std::vector<Shape> shapes;
  for (int64_t t : ts)
    for (int64_t v : vs) shapes.push_back({t, c, v});
  for (const Shape s : shapes) {
    std::vector<float> h(s.t * s.c), w(s.v * s.c), dh(s.t * s.c), dw(s.v * s.c);
    std::vector<int32_t> labels(s.t);
    core::fill_normal(h.data(), h.size(), 1);
    core::fill_normal(w.data(), w.size(), 2, 0, 0.0, 0.02);
    core::fill_randint(labels.data(), labels.size(), 3, static_cast<int32_t>(s.v));
    const kernels::cpu::LmHeadDims d{s.t, s.c, s.v};
    kernels::cpu::LmHeadOptions o;
    o.exec = core::Exec::cpu(threads);
    double loss[2] = {0, 0};
    const double unfused_gib = static_cast<double>(s.t) * s.v * 4.0 / (1024.0 * 1024.0 * 1024.0);
    for (int fused = 1; fused >= 0; --fused) {
      if (!fused && unfused_gib > max_unfused_gib) {
        // The [T, V] logits alone would not fit: recorded, not run (the point of the fused path).
        std::printf("%6lld %5lld %6lld  %-8s skipped: logits %.1f GiB > --max-unfused-gib %.1f\n",
                    (long long)s.t, (long long)s.c, (long long)s.v, "unfused", unfused_gib,
                    max_unfused_gib);
        cases.push_back({{"t", s.t},
                         {"c", s.c},
                         {"v", s.v},
                         {"path", "unfused"},
                         {"skipped", "logits do not fit"},
                         {"loss_buffer_mib", unfused_gib * 1024}});
        continue;
      }
      double best = 1e30;
      for (int r = 0; r < reps; ++r) {
        std::fill(dw.begin(), dw.end(), 0.0f);
        core::Timer t;
        const auto lp = fused
                            ? kernels::cpu::lm_head_ce_fused(h.data(), w.data(), labels.data(), d,
                                                             1.0 / s.t, dh.data(), dw.data(), o)
                            : kernels::cpu::lm_head_ce_unfused(h.data(), w.data(), labels.data(), d,
                                                               1.0 / s.t, dh.data(), dw.data(), o);
        best = std::min(best, t.elapsed());
        loss[fused] = lp.sum / lp.count;
      }
      const double flops = 6.0 * s.t * s.c * s.v;
      const double mib = (fused ? kernels::cpu::lm_head_fused_workspace_floats(d, o) : s.t * s.v) *
                         4.0 / (1024.0 * 1024.0);
      std::printf("%6lld %5lld %6lld  %-8s %9.4f %9.1f %12.1f\n", (long long)s.t, (long long)s.c,
                  (long long)s.v, fused ? "fused" : "unfused", best, flops / best * 1e-9, mib);
      cases.push_back({{"t", s.t},
                       {"c", s.c},
                       {"v", s.v},
                       {"path", fused ? "fused" : "unfused"},
                       {"seconds", best},
                       {"gflops", flops / best * 1e-9},
                       {"loss_buffer_mib", mib},
                       {"token_tile", fused ? kernels::cpu::lm_head_token_tile(d, o) : s.t},
                       {"loss", loss[fused]}});
    }
  }
  nlohmann::json j = {{"bench", "lm_head"},
                      {"threads", threads},
                      {"reps", reps},
                      {"gemm_library", kernels::gemm_library()},
                      {"cases", cases}};
  std::ofstream f(out);
  core::require(static_cast<bool>(f), "lm_head_bench", "cannot write --out ", out);
  f << j.dump(2) << "\n";
  return 0;
}
