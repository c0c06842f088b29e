// cuda_attention_bench: the GPU attention block kernels (kernels/cuda/attention.hpp), bf16, timed
// with CUDA events on issue "GPU II"'s shapes, as TFLOP/s. Writes JSON (--out) and a table on
// stdout; scripts/gpu_check.sh runs it beside bench/cuda_attention_torch.py (PyTorch's flash and
// cuDNN SDPA backends on the same GPU, the same shapes and the same FLOP convention). Without a
// visible GPU it writes {"skipped": reason} and exits 0.
//
// FLOP convention (the issue's): a causal forward counts 4 N^2 / 2 D H, forward + backward 3.5x
// that; other masks count 4 D H per visible (query, key) pair instead of N^2 / 2 (so a sliding
// window's rate is comparable with the causal rate: tile skipping should cost nothing). The
// forward + backward time is forward + delta + backward (the two backward passes), i.e. one
// training step's attention.
//
// Sections: "table" (causal, 32K and 128K tokens, 32/8 heads D = 128 and 4/4 heads D = 64),
// "window" (4096 at 128K tokens, 32/8 heads, D = 128; 1M tokens with --million), "sweep" (block
// lengths 1K-16K, full and causal, 32/8 heads, D = 128, (16K / L)^2 calls per measurement so the
// work equals one 16K call: a ring step's block is N/P tokens).
//
// Timing: one warm-up call, then as many timed calls as fit ~1.5 s (at least 1, at most --reps),
// between two events on one stream; the mean per call.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/kernels/cuda/attention.hpp"
#include "longseq/kernels/cuda/device.hpp"
#include "longseq/kernels/mask.hpp"

namespace {

namespace core = longseq::core;
namespace kn = longseq::kernels;
namespace kcu = longseq::kernels::cuda;
using core::Buffer;
using core::Device;
using nlohmann::json;

Buffer<core::bf16> random_bf16(size_t n, uint64_t seed, Device gpu) {
  constexpr size_t kBlock = size_t{1} << 22;
  Buffer<core::bf16> host(std::min(n, kBlock));
  core::fill_normal(host.data(), host.size(), seed, 0, 0.0, 1.0);
  Buffer<core::bf16> d(n, gpu, core::Uninit{}, "bench_bf16");
  for (size_t off = 0; off < n; off += kBlock)
    core::copy_bytes(d.data() + off, gpu, host.data(), Device::cpu(),
                     std::min(kBlock, n - off) * sizeof(core::bf16));
  return d;
}

double time_ms(kcu::Stream& stream, int max_reps, const std::function<void()>& fn) {
  kcu::Event a, b;
  a.record(stream);
  fn();  // warm-up, also the first estimate
  b.record(stream);
  b.synchronize();
  const double first = kcu::Event::elapsed_ms(a, b);
  const int reps = std::clamp(static_cast<int>(1500.0 / std::max(first, 1e-3)), 1, max_reps);
  a.record(stream);
  for (int i = 0; i < reps; ++i) fn();
  b.record(stream);
  b.synchronize();
  return static_cast<double>(kcu::Event::elapsed_ms(a, b)) / reps;
}

// One attention problem on the device: n tokens, contiguous positions 0..n-1 (a whole sequence
// or one ring block on the diagonal).
struct Problem {
  int64_t n, hq, hkv, d;
  Buffer<core::bf16> q, k, v, dout;
  Buffer<float> o, lse, delta, dq, dk, dv;
  Buffer<int64_t> pos;
  Buffer<uint8_t> ws;
  Problem(int64_t n_, int64_t hq_, int64_t hkv_, int64_t d_, Device gpu)
      : n(n_), hq(hq_), hkv(hkv_), d(d_) {
    const auto nq = static_cast<size_t>(n * hq * d), nk = static_cast<size_t>(n * hkv * d);
    q = random_bf16(nq, 1, gpu);
    k = random_bf16(nk, 2, gpu);
    v = random_bf16(nk, 3, gpu);
    dout = random_bf16(nq, 4, gpu);
    o = Buffer<float>(nq, gpu, core::Uninit{}, "o");
    lse = Buffer<float>(static_cast<size_t>(n * hq), gpu, core::Uninit{}, "lse");
    delta = Buffer<float>(static_cast<size_t>(n * hq), gpu, core::Uninit{}, "delta");
    dq = Buffer<float>(nq, gpu, "dq");
    dk = Buffer<float>(nk, gpu, "dk");
    dv = Buffer<float>(nk, gpu, "dv");
    Buffer<int64_t> host(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) host[i] = i;
    pos = host.to(gpu, "pos");
    ws = Buffer<uint8_t>(kcu::attention_workspace_bytes(dims()) + 16, gpu, "ws");
  }
  kcu::AttnDims dims() const { return {n, n, hq, hkv, d}; }
  kn::Tokens tokens() const { return {pos.data(), nullptr}; }
  void forward(const kn::Mask& m, const core::Exec& ex) {
    kcu::attention_block_forward(q.data(), k.data(), v.data(), tokens(), tokens(), m,
                                 1.0f / std::sqrt(static_cast<float>(d)), dims(), ex, ws.data(),
                                 ws.size(), o.data(), lse.data());
  }
  void backward(const kn::Mask& m, const core::Exec& ex) {
    kcu::attention_delta(dout.data(), o.data(), n, hq, d, ex, delta.data());
    kcu::attention_block_backward(q.data(), k.data(), v.data(), dout.data(), lse.data(),
                                  delta.data(), tokens(), tokens(), m,
                                  1.0f / std::sqrt(static_cast<float>(d)), dims(), ex, ws.data(),
                                  ws.size(), dq.data(), dk.data(), dv.data());
  }
};

// Visible (query, key) pairs of n contiguous tokens under mask m (causal or window).
double visible_pairs(const kn::Mask& m, int64_t n) {
  if (m.is_full()) return static_cast<double>(n) * n;
  if (m.window > 0) {
    const double w = static_cast<double>(std::min(m.window, n));
    return w * n - w * (w - 1) / 2;  // row i sees min(i + 1, w) keys
  }
  return static_cast<double>(n) * (n + 1) / 2;
}

int usage() {
  std::printf(
      "usage: cuda_attention_bench [--out FILE] [--reps N] [--quick] [--million] [--tiles T]\n"
      "  --out FILE  JSON output (default bench_cuda_attention.json)\n"
      "  --reps N    most timed calls per measurement (default 10; fewer when a call is long)\n"
      "  --quick     only the 32K rows of the table and the sweep to 4K (a smoke run)\n"
      "  --million   also sliding window 4096 at 1M tokens (32/8 heads, D = 128; ~60 GB)\n"
      "  --tiles T   64-row tiles per thread block of the tensor-core kernels: 1 or 2 forced,\n"
      "              0 chosen per launch (default)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "bench_cuda_attention.json";
  int reps = 10;
  bool quick = false, million = false;
  int tiles = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) core::fail("cuda_attention_bench", a, " needs a value");
      return argv[++i];
    };
    if (a == "--out")
      out = next();
    else if (a == "--reps")
      reps = std::stoi(next());
    else if (a == "--quick")
      quick = true;
    else if (a == "--million")
      million = true;
    else if (a == "--tiles")
      tiles = std::stoi(next());
    else if (a == "-h" || a == "--help")
      return usage();
    else
      return usage(), std::fprintf(stderr, "[cuda_attention_bench] unknown option %s\n", a.c_str()),
             2;
  }
  core::require(reps >= 1, "cuda_attention_bench", "--reps ", reps, ": need >= 1");
  kcu::set_attention_block_tiles(tiles);  // checks 0, 1 or 2

  const kcu::RuntimeInfo info = kcu::runtime_info();
  json j;
  j["bench"] = "cuda_attention";
  j["block_tiles"] = tiles;
  j["runtime"] = kcu::version_string(info.runtime_version);
  j["driver"] = info.driver_version ? kcu::version_string(info.driver_version) : "none";
  j["flops_convention"] =
      "causal: fwd 4 N^2/2 D H, fwd+bwd 3.5x; other masks: 4 D H per visible pair (x3.5)";
  auto write = [&] {
    std::ofstream f(out);
    core::require(static_cast<bool>(f), "cuda_attention_bench", "cannot write --out ", out);
    f << j.dump(1) << "\n";
  };
  if (info.gpus.empty()) {
    std::printf("[cuda_attention_bench] no GPU visible: %s (nothing timed)\n", info.status.c_str());
    j["skipped"] = "no GPU visible: " + info.status;
    write();
    return 0;
  }
  j["gpu"] = info.gpus[0].name;
  j["compute_capability"] =
      std::to_string(info.gpus[0].major) + "." + std::to_string(info.gpus[0].minor);
  const Device gpu = kcu::activate(0);
  kcu::Stream stream;
  const core::Exec ex = core::Exec::gpu(gpu, stream.get());

  // One (shape, mask) measurement: forward alone and forward + backward, `calls` calls each.
  auto measure = [&](const std::string& section, Problem& p, const kn::Mask& m,
                     const std::string& mask_name, int calls) {
    const double fwd_flops = 4.0 * visible_pairs(m, p.n) * p.d * p.hq * calls;
    const double f_ms = time_ms(stream, reps, [&] {
      for (int c = 0; c < calls; ++c) p.forward(m, ex);
    });
    const double fb_ms = time_ms(stream, reps, [&] {
      for (int c = 0; c < calls; ++c) {
        p.forward(m, ex);
        p.backward(m, ex);
      }
    });
    const double f_tf = fwd_flops / (f_ms * 1e-3) / 1e12,
                 fb_tf = 3.5 * fwd_flops / (fb_ms * 1e-3) / 1e12;
    std::printf(
        "%-7s %-8s N=%-8lld heads %lld/%lld D=%-4lld x%-4d fwd %9.3f ms %7.1f TFLOP/s   "
        "fwd+bwd %9.3f ms %7.1f TFLOP/s\n",
        section.c_str(), mask_name.c_str(), static_cast<long long>(p.n),
        static_cast<long long>(p.hq), static_cast<long long>(p.hkv), static_cast<long long>(p.d),
        calls, f_ms, f_tf, fb_ms, fb_tf);
    std::fflush(stdout);
    j[section].push_back({{"mask", mask_name},
                          {"n", p.n},
                          {"hq", p.hq},
                          {"hkv", p.hkv},
                          {"d", p.d},
                          {"calls", calls},
                          {"fwd_ms", f_ms},
                          {"fwd_tflops", f_tf},
                          {"fwd_bwd_ms", fb_ms},
                          {"fwd_bwd_tflops", fb_tf}});
    write();  // after every row: a run cut short still leaves its measurements
  };

  kn::Mask causal;
  causal.causal = true;
  kn::Mask window;
  window.window = 4096;
  const kn::Mask full;

  // The table (causal).
  struct Shape {
    int64_t n, hq, hkv, d;
  };
  std::vector<Shape> table = {{32768, 32, 8, 128}, {32768, 4, 4, 64}};
  if (!quick) {
    table.push_back({131072, 32, 8, 128});
    table.push_back({131072, 4, 4, 64});
  }
  for (const Shape& s : table) {
    Problem p(s.n, s.hq, s.hkv, s.d, gpu);
    measure("table", p, causal, "causal", 1);
    if (s.n == 131072 && s.hq == 32) measure("window", p, window, "window4096", 1);
  }
  if (million) {
    Problem p(1 << 20, 32, 8, 128, gpu);
    measure("window", p, window, "window4096", 1);
  }
  // Block-length sweep: (16K / L)^2 calls of L tokens = the work of one 16K call.
  for (int64_t len : {1024, 2048, 4096, 8192, 16384}) {
    if (quick && len > 4096) break;
    Problem p(len, 32, 8, 128, gpu);
    const int calls = static_cast<int>((16384 / len) * (16384 / len));
    measure("sweep", p, full, "full", calls);
    measure("sweep", p, causal, "causal", calls);
  }
  write();
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
