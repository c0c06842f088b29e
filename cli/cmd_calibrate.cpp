// `longseq calibrate`: measures this machine and writes its hardware profile (default
// data/hardware/local.json) for `longseq plan --hardware local`.
//
// Measured: the GEMM rate (kernels::gemm_f32, one thread: a rank computes on `--threads` threads),
// the attention kernel rates (kernels::cpu attention_block_forward / backward, full mask, FLOPs
// counted as 4 and 10 per (q, k) pair and head-dim element, the planner's convention), and a
// memory-copy bandwidth and thread hand-off latency as the proxy of the local (threads) comm
// backend, where a send is one copy between threads. The comm backend's own counters are not used
// yet (its implementation was not committed when this was written); --intra-bw / --intra-lat
// override the proxy with values measured elsewhere, and are recorded as such in the profile.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>
#include <unistd.h>
#include <vector>

#include "commands.hpp"
#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/attention.hpp"
#include "longseq/kernels/gemm.hpp"
#include "longseq/plan/hardware.hpp"

namespace longseq::cli {

namespace {

struct CalibrateArgs {
  std::string out;
  int threads = 1;
  int repeats = 5;
  double intra_bw = 0, intra_lat = 0;
  double memory_gib = 0;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of `repeats` (the machine is shared; the minimum is the least disturbed run).
template <class F>
double best_time(int repeats, F&& f) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const double t0 = now_s();
    f();
    best = std::min(best, now_s() - t0);
  }
  return best;
}

double gemm_rate(int repeats) {
  const int64_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  kernels::gemm_f32(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);  // warm-up
  const double t = best_time(repeats, [&] {
    kernels::gemm_f32(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
  });
  return 2.0 * n * n * n / t;
}

std::pair<double, double> attention_rates(int threads, int repeats) {
  kernels::cpu::AttnDims dims{1024, 1024, 8, 8, 128};
  const int64_t qn = dims.tq * dims.hq * dims.d, kn = dims.tk * dims.hkv * dims.d;
  std::vector<float> q(qn), k(kn), v(kn), o(qn), dout(qn), lse(dims.tq * dims.hq), delta(dims.tq * dims.hq);
  for (int64_t i = 0; i < qn; ++i) q[i] = dout[i] = std::sin(0.001f * static_cast<float>(i));
  for (int64_t i = 0; i < kn; ++i) k[i] = v[i] = std::cos(0.002f * static_cast<float>(i));
  std::vector<int64_t> pos(1024);
  for (int64_t i = 0; i < 1024; ++i) pos[i] = i;
  const kernels::Tokens toks{pos.data(), nullptr};
  const kernels::Mask mask;
  const float scale = 1.0f / std::sqrt(128.0f);
  std::vector<float> ws(std::max(kernels::cpu::attention_forward_workspace_floats(dims, threads),
                                 kernels::cpu::attention_backward_workspace_floats(dims, threads)));
  std::vector<float> dq(qn), dk(kn), dv(kn);
  auto fwd = [&] {
    kernels::cpu::attention_block_forward(q.data(), k.data(), v.data(), toks, toks, mask, scale, dims,
                                          threads, ws, o.data(), lse.data());
  };
  fwd();
  const double tf = best_time(repeats, fwd);
  kernels::cpu::attention_delta(dout.data(), o.data(), dims.tq, dims.hq, dims.d, threads, delta.data());
  auto bwd = [&] {
    kernels::cpu::attention_block_backward(q.data(), k.data(), v.data(), dout.data(), lse.data(),
                                           delta.data(), toks, toks, mask, scale, dims, threads, ws,
                                           dq.data(), dk.data(), dv.data());
  };
  bwd();
  const double tb = best_time(repeats, bwd);
  const double pairs = static_cast<double>(dims.tq * dims.tk) * dims.hq * dims.d;
  return {4.0 * pairs / tf, 10.0 * pairs / tb};
}

double copy_bandwidth(int repeats) {
  const size_t bytes = size_t{64} << 20;
  std::vector<char> a(bytes, 1), b(bytes);
  const double t = best_time(repeats, [&] { std::memcpy(b.data(), a.data(), bytes); });
  return static_cast<double>(bytes) / t;
}

// One-way hand-off between two threads through an atomic flag (half a ping-pong round trip).
double handoff_latency() {
  std::atomic<int> flag{0};
  const int rounds = 20000;
  std::thread peer([&] {
    for (int i = 0; i < rounds; ++i) {
      while (flag.load(std::memory_order_acquire) != 1) std::this_thread::yield();
      flag.store(0, std::memory_order_release);
    }
  });
  const double t0 = now_s();
  for (int i = 0; i < rounds; ++i) {
    flag.store(1, std::memory_order_release);
    while (flag.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }
  const double t = now_s() - t0;
  peer.join();
  return t / (2.0 * rounds);
}

}  // namespace

std::function<int()> add_calibrate(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  a->out = plan::data_dir() + "/hardware/local.json";
  app.add_option("--out", a->out, "profile to write");
  app.add_option("--threads", a->threads, "compute threads per rank (the executor's AttentionSpec::threads)");
  app.add_option("--repeats", a->repeats, "timed repetitions per measurement (best is kept)");
  app.add_option("--intra-bw", a->intra_bw, "use this link bandwidth (B/s) measured elsewhere instead of the copy proxy");
  app.add_option("--intra-lat", a->intra_lat, "use this link latency (s) measured elsewhere instead of the hand-off proxy");
  app.add_option("--memory-gib", a->memory_gib, "memory per rank in GiB (0: physical memory / 2)");
  return [a] {
    core::require(a->threads >= 1, "calibrate", "--threads ", a->threads, " must be >= 1");
    core::require(a->repeats >= 1, "calibrate", "--repeats ", a->repeats, " must be >= 1");
    plan::Hardware hw;
    hw.name = "local";
    hw.description = "this machine: ranks are threads of one process (comm local backend), f32";
    hw.gpus_per_node = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const double gemm = gemm_rate(a->repeats);
    const auto [fwd, bwd] = attention_rates(a->threads, a->repeats);
    const double copy_bw = a->intra_bw > 0 ? a->intra_bw : copy_bandwidth(a->repeats);
    const double lat = a->intra_lat > 0 ? a->intra_lat : handoff_latency();
    hw.peak_flops = gemm * a->threads;  // the rate a rank's GEMMs reach: the planner's "peak"
    hw.dtype_bytes = 4;
    const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    hw.memory_bytes = a->memory_gib > 0 ? a->memory_gib * (1 << 30) : phys / 2;
    hw.intra = {lat, copy_bw};
    hw.inter = hw.intra;  // one host: no inter-node link (a declared --nodes split uses the same memory)
    hw.inter_node_bandwidth_Bps = copy_bw * hw.gpus_per_node;
    hw.corrections.gemm_efficiency = 1.0;  // peak_flops *is* the measured GEMM rate
    hw.corrections.attention_fwd_efficiency = std::min(1.5, fwd / hw.peak_flops);
    hw.corrections.attention_bwd_efficiency = std::min(1.5, bwd / hw.peak_flops);
    hw.corrections.collective_efficiency = 1.0;
    hw.corrections.source = std::string("measured by longseq calibrate: kernels::cpu attention 1024x1024, 8 heads, D 128, ") +
                            std::to_string(a->threads) + " thread(s), relative to gemm_f32 1024^3 (" +
                            kernels::gemm_library() + ")";
    hw.source = std::string("measured by longseq calibrate; link = ") +
                (a->intra_bw > 0 ? "--intra-bw given" : "memcpy 64 MiB proxy") + ", latency = " +
                (a->intra_lat > 0 ? "--intra-lat given" : "thread hand-off proxy") +
                " (comm backend counters not used: not committed when calibrate was written)";
    std::ofstream out(a->out);
    core::require(static_cast<bool>(out), "calibrate", "--out: cannot write ", a->out);
    out << plan::hardware_to_json(hw);
    core::require(static_cast<bool>(out), "calibrate", "--out: failed writing ", a->out);
    std::printf("gemm_f32 1024^3: %.3g GFLOP/s per thread\nattention forward: %.3g GFLOP/s, backward: %.3g GFLOP/s (%d thread(s))\n"
                "copy bandwidth: %.3g GB/s, hand-off latency: %.3g us\nwrote %s\n",
                gemm / 1e9, fwd / 1e9, bwd / 1e9, a->threads, copy_bw / 1e9, lat * 1e6, a->out.c_str());
    return 0;
  };
}

}  // namespace longseq::cli
