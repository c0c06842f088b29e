// attention_kernel_bench: the kernels/cpu attention block kernels (forward, forward+backward) at
// D in {64, 128}, T in {2K, 4K, 8K, 16K}, full and causal, fp32 and bf16, as GFLOP/s and as a
// fraction of the GEMM library's own rate measured in the same run, side by side with PyTorch's
// naive attention (bench/attention_torch_naive.py, one process per case) at the same shapes:
// time and peak memory. Writes JSON (--out) and prints a table plus the targets.
//
// --entry local times attention::local_attention_forward/backward instead: the same kernels as
// the Python package runs them (outputs in the inputs' dtype, the backward over chunks of query
// rows so that no scratch grows with T); --entry both times the two in turn within each
// repetition. bench/python_attention.py reads them, so that Python's distance from C++ splits
// into the binding's part and the row chunks' part.
//
// Legend: T tokens (Tq = Tk = T, one block holding the whole sequence), H heads (Hq = Hkv), D head
// dim. FLOPs: forward 4 T^2 H D (two GEMMs), forward+backward 3.5x that (seven GEMMs); causal
// counts only the visible pairs, T (T + 1) / 2 instead of T^2 (the FlashAttention convention).
//
// GEMM reference rate ("sgemm rate"): 4096^3 products through kernels/gemm, one single-threaded
// call per thread running concurrently on `threads` threads (exactly how the attention kernels
// use the library), and the wrapper's row-panel parallel call; the larger of the two, measured
// before and after the attention cases (the larger again), is the denominator. Attention tiles
// are smaller than 4096^3, so the tile-shaped rates are reported too, for orientation.
//
// Shared machines: other processes stretch wall-clock time, so every timing is also taken in
// process CPU time divided by the thread count ("cpu" rates, what the run would take on idle
// cores: OpenMP threads spin rather than sleep between regions, so an idle machine gives
// cpu ~= wall), the 1-minute load average is recorded before and after each case, and each case
// is also divided by an sgemm rate measured just before it ("paired"). Targets are reported in
// all three readings. Best of --reps repetitions everywhere.
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/attention/local.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/core/cpu.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/kernels/cpu/attention.hpp"
#include "longseq/kernels/gemm.hpp"

#ifndef LONGSEQ_SOURCE_DIR
#define LONGSEQ_SOURCE_DIR "."
#endif

namespace {

using longseq::core::bf16;
using nlohmann::json;
namespace kc = longseq::kernels::cpu;
namespace kn = longseq::kernels;

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The process's peak resident memory (VmHWM), bytes.
size_t peak_rss() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  f >> l;
  return l;
}

// Wall and CPU seconds of one call of fn; the CPU time is divided by `threads`.
struct Timing {
  double wall = 1e30, cpu = 1e30;
  void keep_best(const Timing& t) {
    wall = std::min(wall, t.wall);
    cpu = std::min(cpu, t.cpu);
  }
};
template <class F>
Timing timed(int threads, F&& fn) {
  const double c0 = cpu_seconds();
  longseq::core::Timer t;
  fn();
  return {t.elapsed(), (cpu_seconds() - c0) / threads};
}

struct Options {
  std::string out = "bench_attention_kernels.json";
  std::vector<int64_t> ts = {2048, 4096, 8192, 16384};
  std::vector<int64_t> ds = {64, 128};
  std::vector<std::string> masks = {"full", "causal"};
  std::vector<std::string> dtypes = {"f32", "bf16"};
  int64_t heads = 8;
  int threads = 2;
  int reps = 3;
  double max_case_s = 20.0;
  bool torch = true;
  int64_t torch_max_t = 8192;
  std::string python = "/usr/bin/python3";
  std::string torch_script = LONGSEQ_SOURCE_DIR "/bench/attention_torch_naive.py";
  enum class Entry { block, local, both } entry = Entry::block;  ///< --entry
};

using Entry = Options::Entry;

void usage() {
  std::printf(
      "usage: attention_kernel_bench [options]\n"
      "  --out PATH          JSON output (default bench_attention_kernels.json)\n"
      "  --t LIST            sequence lengths (default 2048,4096,8192,16384)\n"
      "  --d LIST            head dims (default 64,128)\n"
      "  --mask LIST         full,causal (default both)\n"
      "  --dtype LIST        f32,bf16 (default both)\n"
      "  --heads H           heads, Hq = Hkv (default 8)\n"
      "  --threads N         thread budget of the kernels and of PyTorch (default 2)\n"
      "  --reps N            timed repetitions per case, best reported (default 3; 1 once a\n"
      "                      repetition exceeds --max-case-s)\n"
      "  --max-case-s S      see --reps (default 20)\n"
      "  --no-torch          skip the PyTorch baseline\n"
      "  --torch-max-t T     largest T given to PyTorch (default 8192: its T^2 scores need\n"
      "                      ~9 GB at 8192, ~35 GB at 16384)\n"
      "  --python PATH       interpreter with torch (default /usr/bin/python3)\n"
      "  --torch-script PATH (default <source>/bench/attention_torch_naive.py)\n"
      "  --entry E           block: the block kernels on the whole sequence (default); local:\n"
      "                      attention::local_attention_* (what the Python package calls);\n"
      "                      both: block, with local timed in turn in each repetition\n");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

std::vector<int64_t> split_ints(const std::string& s) {
  std::vector<int64_t> out;
  for (const auto& x : split(s)) out.push_back(std::stoll(x));
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) longseq::core::fail("bench", a, " needs a value");
      return argv[++i];
    };
    if (a == "--out")
      o.out = next();
    else if (a == "--t")
      o.ts = split_ints(next());
    else if (a == "--d")
      o.ds = split_ints(next());
    else if (a == "--mask")
      o.masks = split(next());
    else if (a == "--dtype")
      o.dtypes = split(next());
    else if (a == "--heads")
      o.heads = std::stoll(next());
    else if (a == "--threads")
      o.threads = std::stoi(next());
    else if (a == "--reps")
      o.reps = std::stoi(next());
    else if (a == "--max-case-s")
      o.max_case_s = std::stod(next());
    else if (a == "--no-torch")
      o.torch = false;
    else if (a == "--torch-max-t")
      o.torch_max_t = std::stoll(next());
    else if (a == "--python")
      o.python = next();
    else if (a == "--torch-script")
      o.torch_script = next();
    else if (a == "--entry") {
      const std::string e = next();
      longseq::core::require(e == "block" || e == "local" || e == "both", "bench", "--entry ", e,
                             ": expected block, local or both");
      o.entry = e == "block"   ? Options::Entry::block
                : e == "local" ? Options::Entry::local
                               : Options::Entry::both;
    } else if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    } else {
      usage();
      longseq::core::fail("bench", "unknown option ", a);
    }
  }
  for (const auto& m : o.masks)
    longseq::core::require(m == "full" || m == "causal", "bench", "--mask ", m);
  for (const auto& d : o.dtypes)
    longseq::core::require(d == "f32" || d == "bf16", "bench", "--dtype ", d);
  return o;
}

// ---- GEMM reference rates ---------------------------------------------------------------------

struct GemmOperands {
  std::vector<float> a, b, c;
  std::vector<bf16> a16, b16;
  GemmOperands(int64_t m, int64_t n, int64_t k, uint64_t seed)
      : a(m * k), b(k * n), c(m * n), a16(m * k), b16(k * n) {
    longseq::core::fill_uniform(a.data(), a.size(), seed, 0, -1, 1);
    longseq::core::fill_uniform(b.data(), b.size(), seed + 1, 0, -1, 1);
    longseq::core::f32_to_bf16(a.data(), a16.data(), a.size());
    longseq::core::f32_to_bf16(b.data(), b16.data(), b.size());
  }
};

// GFLOP/s of `threads` concurrent single-threaded products C[m,n] (+)= A[m,k] op(B), each thread
// on its own operands, repeated for at least min_time seconds (best of 3 windows).
struct Rate {
  double wall = 0, cpu = 0;  // GFLOP/s
};

Rate concurrent_rate(bool bf, bool tb, int64_t m, int64_t n, int64_t k, float beta, int threads,
                     double min_time, int windows = 3) {
  std::vector<std::unique_ptr<GemmOperands>> ops;
  for (int t = 0; t < threads; ++t) ops.push_back(std::make_unique<GemmOperands>(m, n, k, 7 + t));
  const int64_t ldb = tb ? k : n;
  auto call = [&](int t) {
    GemmOperands& x = *ops[t];
    if (bf)
      kn::gemm_bf16(false, tb, m, n, k, 1.0f, x.a16.data(), k, x.b16.data(), ldb, beta, x.c.data(),
                    n);
    else
      kn::gemm_f32(false, tb, m, n, k, 1.0f, x.a.data(), k, x.b.data(), ldb, beta, x.c.data(), n);
  };
  Rate best;
  for (int window = 0; window < windows; ++window) {
    int64_t total = 0;
    double elapsed = 0, cpu = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total, cpu) reduction(max : elapsed)
    {
      const int t = omp_get_thread_num();
      call(t);  // warm-up (oneDNN primitive creation, page faults)
#pragma omp barrier
      timespec c0, c1;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
      longseq::core::Timer timer;
      int64_t calls = 0;
      do {
        call(t);
        ++calls;
      } while (timer.elapsed() < min_time);
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
      total += calls;
      elapsed = timer.elapsed();
      cpu += static_cast<double>(c1.tv_sec - c0.tv_sec) +
             1e-9 * static_cast<double>(c1.tv_nsec - c0.tv_nsec);
    }
    const double fl = 2.0 * m * n * k * static_cast<double>(total);
    best.wall = std::max(best.wall, fl / elapsed / 1e9);
    best.cpu = std::max(best.cpu, fl / (cpu / threads) / 1e9);
  }
  return best;
}

Rate parallel_rate(bool bf, int64_t s, int threads, double min_time) {
  GemmOperands x(s, s, s, 3);
  auto call = [&] {
    if (bf)
      kn::gemm_bf16_parallel(threads, false, false, s, s, s, 1.0f, x.a16.data(), s, x.b16.data(), s,
                             0.0f, x.c.data(), s);
    else
      kn::gemm_f32_parallel(threads, false, false, s, s, s, 1.0f, x.a.data(), s, x.b.data(), s,
                            0.0f, x.c.data(), s);
  };
  Rate best;
  call();
  for (int window = 0; window < 3; ++window) {
    const double c0 = cpu_seconds();
    longseq::core::Timer timer;
    int64_t calls = 0;
    do {
      call();
      ++calls;
    } while (timer.elapsed() < min_time);
    const double fl = 2.0 * s * s * s * static_cast<double>(calls);
    best.wall = std::max(best.wall, fl / timer.elapsed() / 1e9);
    best.cpu = std::max(best.cpu, fl / ((cpu_seconds() - c0) / threads) / 1e9);
  }
  return best;
}

json gemm_rates(int threads) {
  json g;
  for (const bool bf : {false, true}) {
    const std::string ty = bf ? "bf16" : "f32";
    json r;
    auto put = [&](const std::string& key, Rate x) {
      r[key] = x.wall;
      r[key + "_cpu"] = x.cpu;
    };
    put("large_4096_concurrent", concurrent_rate(bf, false, 4096, 4096, 4096, 0.0f, threads, 0.5));
    put("large_4096_parallel_wrapper", parallel_rate(bf, 4096, threads, 0.5));
    // The forward's tile products (kForwardTileQ x kForwardTileK, D = 128).
    put("tile_qk",
        concurrent_rate(bf, true, kc::kForwardTileQ, kc::kForwardTileK, 128, 0.0f, threads, 0.3));
    put("tile_pv",
        concurrent_rate(bf, false, kc::kForwardTileQ, 128, kc::kForwardTileK, 1.0f, threads, 0.3));
    for (const char* c : {"", "_cpu"})
      r[std::string("large") + c] =
          std::max(r[std::string("large_4096_concurrent") + c].get<double>(),
                   r[std::string("large_4096_parallel_wrapper") + c].get<double>());
    g[ty] = r;
  }
  return g;
}

// ---- attention cases --------------------------------------------------------------------------

struct Case {
  int64_t t, d;
  bool causal, bf;
};

double case_flops(const Case& c, int64_t h) {
  const double pairs = c.causal ? 0.5 * c.t * (c.t + 1.0) : static_cast<double>(c.t) * c.t;
  return 4.0 * pairs * h * c.d;
}

template <class T>
json run_case(const Case& c, const Options& opt) {
  const int64_t t = c.t, h = opt.heads, d = c.d;
  const kc::AttnDims dm{t, t, h, h, d};
  const size_t n = static_cast<size_t>(t * h * d);
  // 64-byte aligned, as every tensor of the engine (core::Buffer) and of PyTorch: a std::vector's
  // 16-byte alignment cost the AVX-512 kernels ~9% (bench/python_attention.py, docs/python.md).
  longseq::core::Buffer<T> q(n), k(n), v(n), dout(n);
  longseq::core::fill_normal(q.data(), n, 1);
  longseq::core::fill_normal(k.data(), n, 2);
  longseq::core::fill_normal(v.data(), n, 3);
  longseq::core::fill_normal(dout.data(), n, 4);
  // The block entry's outputs and workspace (none under --entry local).
  const bool block = opt.entry != Entry::local, local = opt.entry != Entry::block;
  const size_t nb = block ? n : 0;
  longseq::core::Buffer<float> o(nb), lse(t * h), delta(t * h), dq(nb), dk(nb), dv(nb);
  std::vector<int64_t> pos(t);
  for (int64_t i = 0; i < t; ++i) pos[i] = i;
  const kn::Tokens tok{pos.data(), nullptr};
  kn::Mask mask;
  mask.causal = c.causal;
  const size_t ws_floats = std::max(kc::attention_forward_workspace_floats(dm, opt.threads),
                                    kc::attention_backward_workspace_floats(dm, opt.threads));
  longseq::core::Buffer<float> ws(block ? ws_floats : 0);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  auto block_forward = [&] {
    kc::attention_block_forward(q.data(), k.data(), v.data(), tok, tok, mask, scale, dm,
                                opt.threads, ws, o.data(), lse.data());
  };
  auto block_backward = [&] {
    kc::attention_delta(dout.data(), o.data(), t, h, d, opt.threads, delta.data());
    kc::attention_block_backward(q.data(), k.data(), v.data(), dout.data(), lse.data(),
                                 delta.data(), tok, tok, mask, scale, dm, opt.threads, ws,
                                 dq.data(), dk.data(), dv.data());
  };
  auto zero_grads = [&] {
    for (auto* g : {&dq, &dk, &dv}) std::fill(g->begin(), g->end(), 0.0f);
  };
  // The local entry: outputs in T and the local path's own scratch, measured: the peak resident
  // memory (VmHWM) is reset to the current level here (clear_refs 5; the GEMM rates before the
  // cases peaked higher), so what it reaches after the calls is this case's. Only a process's
  // first case reads true: later ones reuse pages the earlier freed (bench/python_attention.py
  // runs one case per process).
  if (opt.entry == Entry::local) std::ofstream("/proc/self/clear_refs") << "5";
  const size_t rss_inputs = peak_rss();
  const size_t nl = local ? n : 0;
  longseq::core::Buffer<T> ol(nl), dql(nl), dkl(nl), dvl(nl);
  longseq::core::Buffer<float> lsel(local ? t * h : 0);
  const auto spec = longseq::attention::MaskSpec::parse(c.causal ? "causal" : "full", false, t);
  const longseq::attention::MaskSpec* specs[] = {&spec};
  const longseq::attention::LocalDims ldims{1, t, h, h, d};
  constexpr auto dtype =
      std::is_same_v<T, bf16> ? longseq::core::DType::bf16 : longseq::core::DType::f32;
  auto local_forward = [&] {
    longseq::attention::local_attention_forward(q.data(), k.data(), v.data(), dtype, ldims, specs,
                                                0.0, opt.threads, ol.data(), lsel.data());
  };
  auto local_backward = [&] {  // overwrites its gradients: nothing to zero
    longseq::attention::local_attention_backward(dout.data(), q.data(), k.data(), v.data(),
                                                 ol.data(), lsel.data(), dtype, ldims, specs, 0.0,
                                                 opt.threads, dql.data(), dkl.data(), dvl.data());
  };
  // Warm-up: first touch of every buffer and the GEMM library's per-shape setup.
  if (block) {
    block_forward();
    zero_grads();
    block_backward();
  }
  if (local) {
    local_forward();
    local_backward();
  }
  // --entry both: the two in turn within each repetition, so that the ratio of their bests
  // compares them under the same load (across processes this machine drifts by ~10%).
  Timing fwd, fb, lfwd, lfb;
  for (int r = 0; r < opt.reps; ++r) {
    if (block) {
      fwd.keep_best(timed(opt.threads, block_forward));
      zero_grads();
      fb.keep_best(timed(opt.threads, [&] {
        block_forward();
        block_backward();
      }));
    }
    if (local) {
      lfwd.keep_best(timed(opt.threads, local_forward));
      lfb.keep_best(timed(opt.threads, [&] {
        local_forward();
        local_backward();
      }));
    }
    if (std::max(block ? fb.wall : 0.0, local ? lfb.wall : 0.0) > opt.max_case_s) break;
  }
  if (opt.entry == Entry::local) {
    fwd = lfwd;
    fb = lfb;
  }
  const double fl = case_flops(c, h);
  json j;
  j["fwd_s"] = fwd.wall;
  j["fwdbwd_s"] = fb.wall;
  j["fwd_gflops"] = fl / fwd.wall / 1e9;
  j["fwdbwd_gflops"] = 3.5 * fl / fb.wall / 1e9;
  j["fwd_cpu_s"] = fwd.cpu;
  j["fwdbwd_cpu_s"] = fb.cpu;
  j["fwd_cpu_gflops"] = fl / fwd.cpu / 1e9;
  j["fwdbwd_cpu_gflops"] = 3.5 * fl / fb.cpu / 1e9;
  j["workspace_bytes"] = ws_floats * sizeof(float);
  j["entry"] = opt.entry == Entry::block ? "block" : opt.entry == Entry::local ? "local" : "both";
  if (opt.entry == Entry::local) {
    // Measured: the process's peak above its level once the inputs existed (o, lse, dq, dk, dv
    // and the local path's scratch).
    j["extra_bytes"] = peak_rss() - rss_inputs;
  } else {
    // Everything a block forward+backward allocates beyond the inputs: o, lse, delta, dq, dk,
    // dv and the workspace (thread slices plus C head-major dq buffers; C = 1 at Hkv = H = 8).
    j["extra_bytes"] = (4 * n + 2 * static_cast<size_t>(t * h)) * sizeof(float) + ws_floats * 4;
  }
  if (opt.entry == Entry::both)
    j["local_in_turn"] = {{"fwd_s", lfwd.wall},
                          {"fwdbwd_s", lfb.wall},
                          {"fwd_cpu_s", lfwd.cpu},
                          {"fwdbwd_cpu_s", lfb.cpu},
                          {"over_block_fwd_s", lfwd.wall / fwd.wall},
                          {"over_block_fwdbwd_s", lfb.wall / fb.wall}};
  return j;
}

json run_torch(const Case& c, const Options& opt) {
  const std::string cmd = opt.python + " " + opt.torch_script + " --t " + std::to_string(c.t) +
                          " --h " + std::to_string(opt.heads) + " --d " + std::to_string(c.d) +
                          " --mask " + (c.causal ? "causal" : "full") + " --dtype " +
                          (c.bf ? "bf16" : "f32") + " --threads " + std::to_string(opt.threads) +
                          " --reps " + (c.t >= 8192 ? "1" : "2");
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return json{{"error", "popen failed: " + cmd}};
  std::string outp;
  char buf[4096];
  while (size_t got = fread(buf, 1, sizeof buf, p)) outp.append(buf, got);
  const int rc = pclose(p);
  if (rc != 0) return json{{"error", "exit status " + std::to_string(rc) + " from: " + cmd}};
  try {
    return json::parse(outp.substr(outp.find('{')));
  } catch (const std::exception& e) {
    return json{{"error", std::string("unparsable output: ") + outp}};
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const Options opt = parse(argc, argv);
  json out;
  out["command"] = [&] {
    std::string s;
    for (int i = 0; i < argc; ++i) {
      if (i) s += ' ';
      s += argv[i];
    }
    return s;
  }();
  out["gemm_library"] = kn::gemm_library();
  // Which CPU and which kernel variant (LONGSEQ_ISA forces a lower one; oneDNN follows it).
  out["cpu"] = longseq::core::cpu_features().brand;
  out["cpu_features"] = longseq::core::cpu_features().list();
  out["isa"] = longseq::core::isa_name(longseq::core::active_isa());
  out["bf16"] = longseq::core::bf16_mode();
  out["threads"] = opt.threads;
  out["heads"] = opt.heads;
  out["tiles"] = {{"forward_q", kc::kForwardTileQ},
                  {"forward_k", kc::kForwardTileK},
                  {"backward_q", kc::kBackwardTileQ},
                  {"backward_k", kc::kBackwardTileK}};
  std::printf("GEMM library %s, %d threads: measuring reference rates...\n", kn::gemm_library(),
              opt.threads);
  std::fflush(stdout);
  out["loadavg_start"] = load_average();
  json gemm_before = gemm_rates(opt.threads);

  json cases = json::array();
  for (const auto& dt : opt.dtypes)
    for (int64_t d : opt.ds)
      for (const auto& m : opt.masks)
        for (int64_t t : opt.ts) {
          const Case c{t, d, m == "causal", dt == "bf16"};
          const double load_before = load_average();
          // The sgemm rate right before the case (2048^3, one 0.3 s window): the case's rate
          // divided by it ("paired") is comparable across cases measured under different load.
          const double paired =
              concurrent_rate(false, false, 2048, 2048, 2048, 0.0f, opt.threads, 0.3, 1).wall;
          json j = c.bf ? run_case<bf16>(c, opt) : run_case<float>(c, opt);
          j["paired_sgemm_gflops"] = paired;
          for (const std::string pass : {"fwd", "fwdbwd"})
            j[pass + "_paired_frac_sgemm"] = j[pass + "_gflops"].get<double>() / paired;
          j["loadavg_before"] = load_before;
          j["loadavg_after"] = load_average();
          j["t"] = t;
          j["d"] = d;
          j["h"] = opt.heads;
          j["mask"] = m;
          j["dtype"] = dt;
          if (opt.torch) {
            if (t <= opt.torch_max_t)
              j["torch"] = run_torch(c, opt);
            else
              j["torch"] = json{{"skipped", "T > --torch-max-t (naive scores need " +
                                                std::to_string(static_cast<double>(t) * t *
                                                               opt.heads * 4 * 4 / 1e9) +
                                                " GB+)"}};
          }
          std::printf(
              "%-4s D=%-3ld %-6s T=%-5ld fwd %7.3f s %5.0f (cpu %5.0f) GFLOP/s | fwd+bwd %7.3f s "
              "%5.0f (cpu %5.0f) | load %.1f",
              dt.c_str(), d, m.c_str(), t, j["fwd_s"].get<double>(), j["fwd_gflops"].get<double>(),
              j["fwd_cpu_gflops"].get<double>(), j["fwdbwd_s"].get<double>(),
              j["fwdbwd_gflops"].get<double>(), j["fwdbwd_cpu_gflops"].get<double>(),
              j["loadavg_after"].get<double>());
          if (j.contains("torch") && j["torch"].contains("fwdbwd_s"))
            std::printf(" | torch fwd %.2f s fwd+bwd %.2f s peak %.2f GB",
                        j["torch"]["fwd_s"].get<double>(), j["torch"]["fwdbwd_s"].get<double>(),
                        j["torch"]["fwdbwd_peak_extra_bytes"].get<double>() / 1e9);
          std::printf("\n");
          std::fflush(stdout);
          cases.push_back(j);
        }

  json gemm_after = gemm_rates(opt.threads);
  out["loadavg_end"] = load_average();
  json gemm;
  for (const char* ty : {"f32", "bf16"}) {
    gemm[ty] = gemm_before[ty];
    for (auto& [key, val] : gemm[ty].items())
      val = std::max(val.get<double>(), gemm_after[ty][key].get<double>());
  }
  out["gemm_gflops"] = gemm;
  out["gemm_gflops_before"] = gemm_before;
  out["gemm_gflops_after"] = gemm_after;
  // Fractions of the GEMM rate on the same clock (wall / wall and cpu / cpu).
  for (auto& j : cases) {
    for (const std::string c : {"", "_cpu"}) {
      const double sg = gemm["f32"]["large" + c],
                   ref = gemm[j["dtype"].get<std::string>()]["large" + c];
      for (const std::string pass : {"fwd", "fwdbwd"}) {
        const double r = j[pass + c + "_gflops"];
        j[pass + c + "_frac_gemm"] = r / ref;
        j[pass + c + "_frac_sgemm"] = r / sg;
      }
    }
    if (j.contains("torch") && j["torch"].contains("fwdbwd_s")) {
      j["speedup_vs_torch_fwd"] = j["torch"]["fwd_s"].get<double>() / j["fwd_s"].get<double>();
      j["speedup_vs_torch_fwdbwd"] =
          j["torch"]["fwdbwd_s"].get<double>() / j["fwdbwd_s"].get<double>();
      j["speedup_vs_torch_fwdbwd_cpu"] =
          j["torch"]["fwdbwd_cpu_s"].get<double>() / j["fwdbwd_cpu_s"].get<double>();
    }
  }
  out["cases"] = cases;

  // ---- the targets (each evaluated when its cases ran), on both clocks ---------------
  auto find = [&](int64_t t, int64_t d, const char* mask, const char* dt) -> const json* {
    for (const auto& j : cases)
      if (j["t"] == t && j["d"] == d && j["mask"] == mask && j["dtype"] == dt) return &j;
    return nullptr;
  };
  // Three readings of each target: wall clock, CPU clock, and "paired" (each case's wall rate
  // divided by the sgemm rate measured just before it, i.e. normalised to the machine's speed at
  // that moment). On an idle machine the three agree; under load the paired and cpu readings are
  // the meaningful ones.
  json targets = json::array();
  auto target = [&](const std::string& name, double wall, double cpu, double paired, double goal,
                    bool at_least) {
    auto ok = [&](double v) { return at_least ? v >= goal : v <= goal; };
    targets.push_back({{"target", name},
                       {"goal", goal},
                       {"at_least", at_least},
                       {"wall", wall},
                       {"cpu", cpu},
                       {"paired", paired},
                       {"met_wall", ok(wall)},
                       {"met_cpu", ok(cpu)},
                       {"met_paired", ok(paired)}});
    std::printf("  %-52s %s %.2f | wall %6.3f %-3s | cpu %6.3f %-3s | paired %6.3f %s\n",
                name.c_str(), at_least ? ">=" : "<=", goal, wall, ok(wall) ? "ok" : "NO", cpu,
                ok(cpu) ? "ok" : "NO", paired, ok(paired) ? "ok" : "NO");
  };
  std::printf(
      "GEMM reference (GFLOP/s, %d threads, wall/cpu): sgemm %.0f/%.0f, bf16 %.0f/%.0f; "
      "forward tiles QK^T f32 %.0f bf16 %.0f, PV f32 %.0f bf16 %.0f\nTargets:\n",
      opt.threads, gemm["f32"]["large"].get<double>(), gemm["f32"]["large_cpu"].get<double>(),
      gemm["bf16"]["large"].get<double>(), gemm["bf16"]["large_cpu"].get<double>(),
      gemm["f32"]["tile_qk"].get<double>(), gemm["bf16"]["tile_qk"].get<double>(),
      gemm["f32"]["tile_pv"].get<double>(), gemm["bf16"]["tile_pv"].get<double>());
  auto num = [](const json& j, const std::string& key) { return j[key].get<double>(); };
  if (const json* f = find(8192, 128, "full", "f32")) {
    for (const auto& [pass, goal] : {std::pair<std::string, double>{"fwd", 0.60}, {"fwdbwd", 0.45}})
      target(pass + " D=128 T=8192 fp32 full / sgemm rate", num(*f, pass + "_frac_sgemm"),
             num(*f, pass + "_cpu_frac_sgemm"), num(*f, pass + "_paired_frac_sgemm"), goal, true);
    if (const json* c = find(8192, 128, "causal", "f32")) {
      // Causal counts half the FLOPs, so time ratio = 0.5 * full rate / causal rate.
      for (const std::string pass : {"fwd", "fwdbwd"})
        target(pass + " D=128 T=8192 fp32 causal time / full time",
               num(*c, pass + "_s") / num(*f, pass + "_s"),
               num(*c, pass + "_cpu_s") / num(*f, pass + "_cpu_s"),
               0.5 * num(*f, pass + "_paired_frac_sgemm") / num(*c, pass + "_paired_frac_sgemm"),
               0.55, false);
    }
    if (const json* b = find(8192, 128, "full", "bf16")) {
      for (const std::string pass : {"fwd", "fwdbwd"})
        target(pass + " D=128 T=8192 full bf16 rate / fp32 rate",
               num(*b, pass + "_gflops") / num(*f, pass + "_gflops"),
               num(*b, pass + "_cpu_gflops") / num(*f, pass + "_cpu_gflops"),
               num(*b, pass + "_paired_frac_sgemm") / num(*f, pass + "_paired_frac_sgemm"), 1.7,
               true);
    }
  }
  // Issue 28: the fp32 kernels at >= 0.75 of the same run's sgemm rate in every variant (0.77 on
  // AVX-512 before runtime dispatch), at the main job's D = 64 causal and at D = 128 full.
  for (const auto& [d, mask] : {std::pair<int64_t, const char*>{64, "causal"}, {128, "full"}})
    if (const json* f = find(8192, d, mask, "f32"))
      for (const std::string pass : {"fwd", "fwdbwd"})
        target(pass + " D=" + std::to_string(d) + " T=8192 fp32 " + mask + " / sgemm (" +
                   out["isa"].get<std::string>() + ")",
               num(*f, pass + "_frac_sgemm"), num(*f, pass + "_cpu_frac_sgemm"),
               num(*f, pass + "_paired_frac_sgemm"), 0.75, true);
  if (const json* c = find(4096, 128, "causal", "f32"); c && c->contains("speedup_vs_torch_fwdbwd"))
    target("causal fwd+bwd D=128 T=4096 H=" + std::to_string(opt.heads) +
               " fp32: PyTorch naive time / ours",
           num(*c, "speedup_vs_torch_fwdbwd"), num(*c, "speedup_vs_torch_fwdbwd_cpu"),
           num(*c, "speedup_vs_torch_fwdbwd"), 3.0, true);
  out["targets"] = targets;

  std::ofstream f(opt.out);
  longseq::core::require(static_cast<bool>(f), "bench", "cannot write ", opt.out);
  f << out.dump(2) << "\n";
  std::printf("wrote %s\n", opt.out.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
