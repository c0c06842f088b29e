// gemm_bench: OpenBLAS vs oneDNN (and the kernels/gemm wrapper as built) for f32 and bf16, at
// large sizes and at flash-attention tile sizes, with 1 and 2 threads. The libraries are measured
// interleaved (round r runs every library once before round r+1), so load from other processes on
// a shared machine hits all of them alike; compare ratios. Writes JSON to --out, prints a table.
//
// Legend: C[M, N] (+)= op(A)[M, K] op(B)[K, N]; NN/NT/TN = trans_a, trans_b. Tile cases use
// T = Br = Bc (query/key tile) and d = head dim:
//   S = Q K^T          NT  M=T N=T K=d   (also dP = dO V^T)
//   O += P V           NN  M=T N=d K=T   (also dQ += dS K)
//   dV += P^T dO       TN  M=T N=d K=T   (also dK += dS^T Q)
// "threads" means: large cases, the library's own threading (the wrapper: gemm_*_parallel);
// tile cases, that many OpenMP threads each running its own single-thread products (how attention
// uses the wrapper), GFLOP/s summed over threads.
#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "longseq/core/dtype.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/kernels/gemm.hpp"

#if defined(LONGSEQ_BENCH_HAVE_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

using longseq::core::bf16;
namespace kn = longseq::kernels;

void usage() {
  std::printf(
      "usage: gemm_bench [options]\n"
      "  --out PATH        JSON output (default bench_gemm.json)\n"
      "  --reps N          interleaved rounds per case; best and median reported (default 5)\n"
      "  --min-time S      seconds per tile measurement (default 0.1)\n"
      "  --large LIST      comma-separated square sizes (default 2048,4096; empty for none)\n"
      "  --no-tiles        skip the attention-tile cases\n"
      "  --threads LIST    thread counts (default 1,2)\n");
}

// ---- the operands of one case, one set per thread -------------------------------------------
struct Shape {
  std::string op;
  bool ta, tb;
  int64_t m, n, k;
  float beta;
  bool tile;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * k; }
  int64_t lda() const { return ta ? m : k; }
  int64_t ldb() const { return tb ? k : n; }
};

struct Buffers {
  std::vector<float> a, b, c;
  std::vector<bf16> a16, b16;
  std::vector<float> wa, wb;  // OpenBLAS bf16 path: widening scratch, reused
};

Buffers make_buffers(const Shape& s, uint64_t seed) {
  Buffers b;
  b.a.resize(static_cast<size_t>(s.m * s.k));
  b.b.resize(static_cast<size_t>(s.k * s.n));
  b.c.assign(static_cast<size_t>(s.m * s.n), 0.0f);
  longseq::core::fill_uniform(b.a.data(), b.a.size(), seed, 0, -1.0, 1.0);
  longseq::core::fill_uniform(b.b.data(), b.b.size(), seed + 1, 0, -1.0, 1.0);
  b.a16.resize(b.a.size());
  b.b16.resize(b.b.size());
  longseq::core::f32_to_bf16(b.a.data(), b.a16.data(), b.a.size());
  longseq::core::f32_to_bf16(b.b.data(), b.b16.data(), b.b.size());
  b.wa.resize(b.a.size());
  b.wb.resize(b.b.size());
  return b;
}

// ---- the libraries, called directly (mirroring what kernels/gemm.cpp does with each) ----------
void openblas_f32(const Shape& s, Buffers& x) {
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(s.m), static_cast<blasint>(s.n), static_cast<blasint>(s.k), 1.0f,
              x.a.data(), static_cast<blasint>(s.lda()), x.b.data(), static_cast<blasint>(s.ldb()),
              s.beta, x.c.data(), static_cast<blasint>(s.n));
}

// No cblas_sbgemm in Debian's 0.3.21 build: widen (exact) then sgemm; the widening is timed.
void openblas_bf16(const Shape& s, Buffers& x) {
  longseq::core::bf16_to_f32(x.a16.data(), x.wa.data(), x.wa.size());
  longseq::core::bf16_to_f32(x.b16.data(), x.wb.data(), x.wb.size());
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(s.m), static_cast<blasint>(s.n), static_cast<blasint>(s.k), 1.0f,
              x.wa.data(), static_cast<blasint>(s.lda()), x.wb.data(),
              static_cast<blasint>(s.ldb()), s.beta, x.c.data(), static_cast<blasint>(s.n));
}

#if defined(LONGSEQ_BENCH_HAVE_ONEDNN)
void onednn_f32(const Shape& s, Buffers& x) {
  const auto st = dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, x.a.data(),
                             s.lda(), x.b.data(), s.ldb(), s.beta, x.c.data(), s.n);
  if (st != dnnl_success) longseq::core::fail("gemm_bench", "dnnl_sgemm status ", int(st));
}

// bf16 matmul primitive, created once per (case, thread) outside the timing: what the wrapper's
// per-thread shape cache amounts to in steady state.
struct OnednnMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul prim;
  dnnl::memory a, b, c;
  OnednnMatmul(const Shape& s, Buffers& x) {
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    dnnl::memory::desc a_md({s.m, s.k}, dt::bf16, s.ta ? dims{1, s.lda()} : dims{s.lda(), 1});
    dnnl::memory::desc b_md({s.k, s.n}, dt::bf16, s.tb ? dims{1, s.ldb()} : dims{s.ldb(), 1});
    dnnl::memory::desc c_md({s.m, s.n}, dt::f32, dims{s.n, 1});
    dnnl::primitive_attr attr;
    if (s.beta != 0.0f) {
      dnnl::post_ops po;
      po.append_sum(s.beta);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, eng);
    prim = dnnl::matmul(pd);
    a = dnnl::memory(a_md, eng, x.a16.data());
    b = dnnl::memory(b_md, eng, x.b16.data());
    c = dnnl::memory(c_md, eng, x.c.data());
    impl = pd.impl_info_str();
  }
  void run() {
    prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    strm.wait();
  }
  std::string impl;
};
#endif

// ---- timing ------------------------------------------------------------------------------------
using ThreadFn = std::function<void()>;

// Seconds per call for `fn`, repeated until min_time has passed (at least once, after a warm-up).
double time_calls(const ThreadFn& fn, double min_time, int64_t* calls_out) {
  fn();
  longseq::core::Timer t;
  int64_t calls = 0;
  do {
    fn();
    ++calls;
  } while (t.elapsed() < min_time);
  *calls_out = calls;
  return t.elapsed() / static_cast<double>(calls);
}

struct Row {
  Shape s;
  std::string dtype;
  int threads;
  std::map<std::string, std::vector<double>> gflops;  // per library, one per round
  std::string onednn_impl;
};

double best(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end());
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t p = 0;
  while (p < s.size()) {
    size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    if (q > p) out.push_back(std::stoll(s.substr(p, q - p)));
    p = q + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "bench_gemm.json", large_list = "2048,4096", thread_list = "1,2";
  int reps = 5;
  double min_time = 0.1;
  bool tiles = true;
  std::string cmdline;
  for (int i = 0; i < argc; ++i) cmdline += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) longseq::core::fail("gemm_bench", a, " needs a value");
      return argv[++i];
    };
    if (a == "--out")
      out = next();
    else if (a == "--reps")
      reps = std::stoi(next());
    else if (a == "--min-time")
      min_time = std::stod(next());
    else if (a == "--large")
      large_list = next();
    else if (a == "--no-tiles")
      tiles = false;
    else if (a == "--threads")
      thread_list = next();
    else if (a == "-h" || a == "--help")
      return usage(), 0;
    else
      return usage(), std::fprintf(stderr, "[gemm_bench] unknown option %s\n", a.c_str()), 2;
  }
  longseq::core::require(reps >= 1, "gemm_bench", "--reps ", reps, " must be >= 1");

  std::vector<Shape> shapes;
  for (int64_t n : parse_list(large_list))
    shapes.push_back({"large NN", false, false, n, n, n, 0.0f, false});
  if (tiles)
    for (int64_t t : {64, 128, 256})
      for (int64_t d : {64, 128}) {
        shapes.push_back({"S=QK^T", false, true, t, t, d, 0.0f, true});
        shapes.push_back({"O+=PV", false, false, t, d, t, 1.0f, true});
        shapes.push_back({"dV+=P^T dO", true, false, t, d, t, 1.0f, true});
      }

  std::vector<Row> rows;
  for (const Shape& s : shapes)
    for (int64_t threads : parse_list(thread_list))
      for (const std::string dtype : {"f32", "bf16"}) {
        Row row{s, dtype, static_cast<int>(threads), {}, ""};
        const int nt = s.tile ? static_cast<int>(threads) : 1;  // OpenMP team for tile cases
        std::vector<Buffers> bufs;
        for (int t = 0; t < nt; ++t) bufs.push_back(make_buffers(s, 17 + 2 * t));
        const bool f32 = dtype == "f32";
        const int lib_threads = s.tile ? 1 : static_cast<int>(threads);
        // Per-library, per-thread callables.
        std::map<std::string, std::vector<ThreadFn>> fns;
#if defined(LONGSEQ_BENCH_HAVE_ONEDNN)
        std::vector<std::unique_ptr<OnednnMatmul>> mms;
        if (!f32) {
          // Created under the thread count it will run with (oneDNN blocks for it at creation).
          omp_set_num_threads(lib_threads);
          for (int t = 0; t < nt; ++t) mms.push_back(std::make_unique<OnednnMatmul>(s, bufs[t]));
          row.onednn_impl = mms[0]->impl;
        }
#endif
        for (int t = 0; t < nt; ++t) {
          Buffers& x = bufs[t];
          fns["openblas"].push_back(f32 ? ThreadFn([&s, &x] { openblas_f32(s, x); })
                                        : ThreadFn([&s, &x] { openblas_bf16(s, x); }));
#if defined(LONGSEQ_BENCH_HAVE_ONEDNN)
          OnednnMatmul* mm = f32 ? nullptr : mms[t].get();
          fns["onednn"].push_back(f32 ? ThreadFn([&s, &x] { onednn_f32(s, x); })
                                      : ThreadFn([mm] { mm->run(); }));
#endif
          const int th = static_cast<int>(threads);
          if (s.tile)
            fns["wrapper"].push_back(f32 ? ThreadFn([&s, &x] {
              kn::gemm_f32(s.ta, s.tb, s.m, s.n, s.k, 1.0f, x.a.data(), s.lda(), x.b.data(),
                           s.ldb(), s.beta, x.c.data(), s.n);
            })
                                         : ThreadFn([&s, &x] {
                                             kn::gemm_bf16(s.ta, s.tb, s.m, s.n, s.k, 1.0f,
                                                           x.a16.data(), s.lda(), x.b16.data(),
                                                           s.ldb(), s.beta, x.c.data(), s.n);
                                           }));
          else
            fns["wrapper"].push_back(f32 ? ThreadFn([&s, &x, th] {
              kn::gemm_f32_parallel(th, s.ta, s.tb, s.m, s.n, s.k, 1.0f, x.a.data(), s.lda(),
                                    x.b.data(), s.ldb(), s.beta, x.c.data(), s.n);
            })
                                         : ThreadFn([&s, &x, th] {
                                             kn::gemm_bf16_parallel(th, s.ta, s.tb, s.m, s.n, s.k,
                                                                    1.0f, x.a16.data(), s.lda(),
                                                                    x.b16.data(), s.ldb(), s.beta,
                                                                    x.c.data(), s.n);
                                           }));
        }
        for (int r = 0; r < reps; ++r)
          for (auto& [name, per_thread] : fns) {
            // Let the previous library's spinning workers (libgomp, OpenBLAS pool) go to sleep
            // before timing the next one when more than one thread is involved.
            if (threads > 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
            openblas_set_num_threads(name == "openblas" ? lib_threads : 1);
            omp_set_num_threads(name == "onednn" ? lib_threads : 1);
            std::vector<double> sec(nt);
            std::vector<int64_t> calls(nt);
            const double mt = s.tile ? min_time : 0.0;
            if (nt == 1) {  // large cases: no enclosing team, so libraries may thread freely
              sec[0] = time_calls(per_thread[0], mt, &calls[0]);
            } else {
#pragma omp parallel num_threads(nt)
              {
                const int t = omp_get_thread_num();
                sec[t] = time_calls(per_thread[t], mt, &calls[t]);
              }
            }
            double g = 0;
            for (int t = 0; t < nt; ++t) g += s.flops() / sec[t] * 1e-9;
            row.gflops[name].push_back(g);
          }
        omp_set_num_threads(1);
        openblas_set_num_threads(1);

        const double ob = best(row.gflops["openblas"]);
        std::printf("%-11s %s%s M=%-5ld N=%-5ld K=%-5ld %-4s thr=%d  openblas %7.1f", s.op.c_str(),
                    s.ta ? "T" : "N", s.tb ? "T" : "N", long(s.m), long(s.n), long(s.k),
                    dtype.c_str(), int(threads), ob);
        if (row.gflops.count("onednn")) {
          const double od = best(row.gflops["onednn"]);
          std::printf("  onednn %7.1f  ratio %5.2f", od, od / ob);
        }
        std::printf("  wrapper(%s) %7.1f GFLOP/s\n", kn::gemm_library(),
                    best(row.gflops["wrapper"]));
        std::fflush(stdout);
        rows.push_back(std::move(row));
      }

  nlohmann::json j;
  j["command"] = cmdline;
  j["wrapper_library"] = kn::gemm_library();
  j["hardware_threads"] = std::thread::hardware_concurrency();
  j["openblas_config"] = openblas_get_config();
  j["reps"] = reps;
  j["min_time_s"] = min_time;
  j["note"] =
      "libraries measured interleaved per round; gflops_best is the max over rounds, "
      "tile cases with threads=T run T independent single-thread products (summed)";
  for (const Row& r : rows) {
    nlohmann::json c;
    c["op"] = r.s.op;
    c["trans"] = std::string(r.s.ta ? "T" : "N") + (r.s.tb ? "T" : "N");
    c["m"] = r.s.m;
    c["n"] = r.s.n;
    c["k"] = r.s.k;
    c["beta"] = r.s.beta;
    c["kind"] = r.s.tile ? "tile" : "large";
    c["dtype"] = r.dtype;
    c["threads"] = r.threads;
    if (!r.onednn_impl.empty()) c["onednn_impl"] = r.onednn_impl;
    for (const auto& [name, g] : r.gflops) {
      c["gflops"][name] = {{"best", best(g)}, {"median", median(g)}, {"rounds", g}};
    }
    if (r.gflops.count("onednn"))
      c["ratio_onednn_over_openblas"] = best(r.gflops.at("onednn")) / best(r.gflops.at("openblas"));
    j["cases"].push_back(c);
  }
  std::ofstream f(out);
  longseq::core::require(static_cast<bool>(f), "gemm_bench", "cannot write --out ", out);
  f << j.dump(1) << "\n";
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
