// cuda_kernels_bench: every kernels/cuda kernel timed with CUDA events on model shapes (LLaMA-3-8B
// sized: C = 4096, F = 14336, H = 32, D = 128, V = 128256; T = 32768 tokens, 8192 for the MLP
// products; the LM head + cross-entropy at issue "GPU I"'s T = 32768, V = 128256, C = 2048 with
// bf16 products, and T = 4096 with exact fp32 ones), as GB/s (bandwidth-bound kernels, nominal
// bytes: each array read or written once) or TFLOP/s (products: 2 M N K; the LM head 6 T C V).
// Bandwidth-bound rows also give their floor: nominal bytes / the device's copy rate (a 1 GiB
// device-to-device copy, 2 bytes moved per byte copied, measured first), and ms / floor. Writes
// JSON (--out) with the GPU's name and a table on stdout; bench/cuda_kernels_torch.py times the
// same operations in PyTorch and compares (scripts/gpu_check.sh runs both). Built only in CUDA
// builds. Without a visible GPU it says so, writes {"skipped": reason} and exits 0.
//
// Timing: one stream; two warm-up calls (plans, the memory pool), then --reps calls between two
// events; the mean per call (the LM head: max(1, reps / 5) calls, each ~0.1 s). Inputs are random
// (normal) on the device, filled by copying one host block of 4M values over the whole buffer (the
// values do not matter to memory-bound kernels; products get non-zero operands, which keeps clocks
// honest). embedding_forward and the LM head synchronise with the host once per call (the bad-id
// check, the loss), so their times include that round trip; the RoPE table is built once outside
// the timed region.
#include <algorithm>
#include <chrono>
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
#include "longseq/kernels/cuda/adamw.hpp"
#include "longseq/kernels/cuda/attention.hpp"
#include "longseq/kernels/cuda/device.hpp"
#include "longseq/kernels/cuda/embedding.hpp"
#include "longseq/kernels/cuda/gemm.hpp"
#include "longseq/kernels/cuda/lm_head.hpp"
#include "longseq/kernels/cuda/merge.hpp"
#include "longseq/kernels/cuda/rmsnorm.hpp"
#include "longseq/kernels/cuda/rope.hpp"
#include "longseq/kernels/cuda/swiglu.hpp"

namespace {

namespace core = longseq::core;
namespace kcu = longseq::kernels::cuda;
using core::Buffer;
using core::Device;
using nlohmann::json;

struct Row {
  std::string kernel, shape;
  double ms = 0, bytes = 0, flops = 0;
  json extra;  // per-kernel fields (the LM head's workspace)
};

// A device buffer of n values, normal(0, scale), from one host block repeated.
Buffer<float> random_f32(size_t n, uint64_t seed, Device gpu, double scale = 1.0) {
  constexpr size_t kBlock = size_t{1} << 22;
  Buffer<float> host(std::min(n, kBlock));
  core::fill_normal(host.data(), host.size(), seed, 0, 0.0, scale);
  Buffer<float> d(n, gpu, core::Uninit{}, "bench");
  for (size_t off = 0; off < n; off += kBlock)
    core::copy_bytes(d.data() + off, gpu, host.data(), Device::cpu(),
                     std::min(kBlock, n - off) * sizeof(float));
  return d;
}

Buffer<core::bf16> random_bf16(size_t n, uint64_t seed, Device gpu) {
  Buffer<core::bf16> host(n);
  core::fill_normal(host.data(), n, seed, 0, 0.0, 1.0);
  return host.to(gpu, "bench_bf16");
}

// Mean milliseconds per call of fn on `stream` (see the header comment).
double time_ms(kcu::Stream& stream, int reps, const std::function<void()>& fn) {
  fn();
  fn();
  stream.synchronize();
  kcu::Event start, end;
  start.record(stream);
  for (int i = 0; i < reps; ++i) fn();
  end.record(stream);
  end.synchronize();
  return static_cast<double>(kcu::Event::elapsed_ms(start, end)) / reps;
}

// The device's copy rate in bytes moved per second (read + write): a 1 GiB device-to-device copy,
// timed on the host around blocking copies (the copy is ~0.3 ms on an H100, far above the call's
// overhead), best of 5 after one warm-up.
double copy_rate(Device gpu) {
  const size_t n = size_t{1} << 30;
  Buffer<unsigned char> a(n, gpu, core::Uninit{}, "copy_a"), b(n, gpu, core::Uninit{}, "copy_b");
  double best = 1e30;
  for (int i = 0; i < 6; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    core::copy_bytes(b.data(), gpu, a.data(), gpu, n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::min(best, s);
  }
  return 2.0 * static_cast<double>(n) / best;
}

std::string dims(std::initializer_list<std::pair<const char*, int64_t>> d) {
  std::string s;
  for (const auto& [k, v] : d) {
    if (!s.empty()) s += ' ';
    s += k;
    s += '=';
    s += std::to_string(v);
  }
  return s;
}

int usage() {
  std::printf(
      "usage: cuda_kernels_bench [--out FILE] [--reps N] [--tokens T]\n"
      "  --out FILE    JSON output (default bench_cuda_kernels.json)\n"
      "  --reps N      timed calls per kernel (default 20)\n"
      "  --tokens T    tokens of the row kernels (default 32768; the MLP products use T/4)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "bench_cuda_kernels.json";
  int reps = 20;
  int64_t t = 32768;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) core::fail("cuda_kernels_bench", a, " needs a value");
      return argv[++i];
    };
    if (a == "--out")
      out = next();
    else if (a == "--reps")
      reps = std::stoi(next());
    else if (a == "--tokens")
      t = std::stoll(next());
    else if (a == "-h" || a == "--help")
      return usage();
    else
      return usage(), std::fprintf(stderr, "[cuda_kernels_bench] unknown option %s\n", a.c_str()),
             2;
  }
  core::require(reps >= 1 && t >= 8, "cuda_kernels_bench", "--reps ", reps, " --tokens ", t,
                ": need reps >= 1, tokens >= 8");

  const kcu::RuntimeInfo info = kcu::runtime_info();
  json j;
  j["bench"] = "cuda_kernels";
  j["runtime"] = kcu::version_string(info.runtime_version);
  j["driver"] = info.driver_version ? kcu::version_string(info.driver_version) : "none";
  if (info.gpus.empty()) {
    std::printf("[cuda_kernels_bench] no GPU visible: %s (nothing timed)\n", info.status.c_str());
    j["skipped"] = "no GPU visible: " + info.status;
    std::ofstream f(out);
    core::require(static_cast<bool>(f), "cuda_kernels_bench", "cannot write --out ", out);
    f << j.dump(1) << "\n";
    return 0;
  }
  const kcu::GpuInfo& g0 = info.gpus[0];
  j["gpu"] = g0.name;
  j["compute_capability"] = std::to_string(g0.major) + "." + std::to_string(g0.minor);
  j["reps"] = reps;
  const Device gpu = kcu::activate(0);
  kcu::Stream stream;
  const core::Exec ex = core::Exec::gpu(gpu, stream.get());
  const double rate = copy_rate(gpu);
  j["copy_gbps"] = rate / 1e9;
  std::printf("device copy rate %.1f GB/s (the bandwidth floor's rate)\n", rate / 1e9);
  std::vector<Row> rows;
  auto add = [&](const std::string& kernel, const std::string& shape, double ms, double bytes,
                 double flops, json extra = json::object()) {
    rows.push_back({kernel, shape, ms, bytes, flops, std::move(extra)});
    if (flops > 0)
      std::printf("%-22s %-34s %9.3f ms %8.1f TFLOP/s\n", kernel.c_str(), shape.c_str(), ms,
                  flops / (ms * 1e-3) / 1e12);
    else
      std::printf("%-22s %-34s %9.3f ms %8.1f GB/s  %5.2fx floor\n", kernel.c_str(), shape.c_str(),
                  ms, bytes / (ms * 1e-3) / 1e9, ms / (bytes / rate * 1e3));
    std::fflush(stdout);
  };
  const int64_t c = 4096, f = 14336, h = 32, d = 128, v = 128256;
  const double fl = sizeof(float);

  {  // RMSNorm [T, C]
    const size_t n = static_cast<size_t>(t * c);
    auto x = random_f32(n, 1, gpu), w = random_f32(c, 2, gpu), dout = random_f32(n, 3, gpu);
    Buffer<float> o(n, gpu, core::Uninit{}, "out"), rstd(t, gpu, core::Uninit{}, "rstd"),
        dx(n, gpu, core::Uninit{}, "dx"), dw(c, gpu, "dw");
    const std::string s = dims({{"T", t}, {"C", c}});
    add("rmsnorm_forward", s,
        time_ms(stream, reps,
                [&] {
                  kcu::rmsnorm_forward(x.data(), w.data(), t, c, 1e-5f, o.data(), rstd.data(), ex);
                }),
        fl * (2.0 * t * c + c + t), 0);
    add("rmsnorm_backward", s,
        time_ms(stream, reps,
                [&] {
                  kcu::rmsnorm_backward(dout.data(), x.data(), w.data(), rstd.data(), t, c,
                                        dx.data(), dw.data(), false, ex);
                }),
        // + the weight gradient's partial sums [T / 16, C], written once and read once
        fl * (3.0 * t * c + 2.0 * c + t +
              2.0 *
                  static_cast<double>((t + kcu::kRmsNormRowsPerGroup - 1) /
                                      kcu::kRmsNormRowsPerGroup) *
                  c),
        0);
  }
  {  // SwiGLU over [T/4, F]
    const int64_t tm = t / 4;
    const size_t n = static_cast<size_t>(tm * f);
    auto gt = random_f32(n, 4, gpu, 3.0), up = random_f32(n, 5, gpu), dout = random_f32(n, 6, gpu);
    Buffer<float> o(n, gpu, core::Uninit{}, "out"), dg(n, gpu, core::Uninit{}, "dg"),
        du(n, gpu, core::Uninit{}, "du");
    const std::string s = dims({{"T", tm}, {"F", f}});
    const double nn = static_cast<double>(n);
    add("swiglu_forward", s,
        time_ms(stream, reps,
                [&] {
                  kcu::swiglu_forward(gt.data(), up.data(), static_cast<int64_t>(n), o.data(), ex);
                }),
        fl * 3 * nn, 0);
    add("swiglu_backward", s,
        time_ms(stream, reps,
                [&] {
                  kcu::swiglu_backward(dout.data(), gt.data(), up.data(), static_cast<int64_t>(n),
                                       dg.data(), du.data(), ex);
                }),
        fl * 5 * nn, 0);
  }
  {  // RoPE [T, H, D]
    std::vector<int64_t> pos(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) pos[i] = 1000000 + i;
    const kcu::RopeTable table(pos.data(), t, d, 500000.0, ex);
    auto x = random_f32(static_cast<size_t>(t * h * d), 7, gpu);
    const std::string s = dims({{"T", t}, {"H", h}, {"D", d}});
    add("rope_forward", s, time_ms(stream, reps, [&] { table.forward(x.data(), h, ex); }),
        fl * (2.0 * t * h * d + 1.0 * t * d), 0);
  }
  {  // AdamW over 2^28 parameters
    const int64_t n = int64_t{1} << 28;
    auto p = random_f32(n, 8, gpu), gr = random_f32(n, 9, gpu, 1e-3),
         m = random_f32(n, 10, gpu, 1e-3);
    Buffer<float> vv(n, gpu, "v");
    Buffer<uint8_t> decay(n, gpu, "decay");
    kcu::AdamWStep st;
    st.lr = 1e-4;
    add("adamw_step", dims({{"n", n}}),
        time_ms(stream, reps,
                [&] {
                  kcu::adamw_step(p.data(), gr.data(), m.data(), vv.data(), decay.data(), n, st,
                                  ex);
                }),
        static_cast<double>(n) * (7 * fl + 1), 0);
  }
  {  // Embedding: T tokens of a V x C table
    Buffer<int32_t> host_tokens(t);
    Buffer<int64_t> host_pos(t);
    for (int64_t i = 0; i < t; ++i) {
      host_tokens[i] = static_cast<int32_t>((i * 7919) % v);
      host_pos[i] = i;
    }
    const Buffer<int32_t> tokens = host_tokens.to(gpu, "tokens");
    const Buffer<int64_t> pos = host_pos.to(gpu, "pos");
    auto w = random_f32(static_cast<size_t>(v * c), 11, gpu);
    auto dout = random_f32(static_cast<size_t>(t * c), 12, gpu);
    Buffer<float> o(static_cast<size_t>(t * c), gpu, core::Uninit{}, "out");
    Buffer<float> dw(static_cast<size_t>(v * c), gpu, "dw");
    const std::string s = dims({{"T", t}, {"C", c}, {"V", v}});
    add("embedding_forward", s,
        time_ms(stream, reps,
                [&] {
                  kcu::embedding_forward(tokens.data(), pos.data(), w.data(), t, c, v, o.data(),
                                         ex);
                }),
        fl * 2.0 * t * c, 0);
    add("embedding_backward", s,
        time_ms(stream, reps,
                [&] {
                  kcu::embedding_backward(tokens.data(), pos.data(), dout.data(), t, c, v,
                                          dw.data(), ex);
                }),
        fl * 3.0 * t * c, 0);
  }
  {  // GEMM 4096^3, fp32 (exact) and bf16 operands
    const int64_t n = 4096;
    const size_t nn = static_cast<size_t>(n * n);
    auto a = random_f32(nn, 13, gpu), b = random_f32(nn, 14, gpu);
    auto a16 = random_bf16(nn, 15, gpu), b16 = random_bf16(nn, 16, gpu);
    Buffer<float> cc(nn, gpu, core::Uninit{}, "c");
    const std::string s = dims({{"M", n}, {"N", n}, {"K", n}});
    const double flops = 2.0 * n * n * n;
    add("gemm_f32", s,
        time_ms(stream, reps,
                [&] {
                  kcu::gemm_f32(ex, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                                cc.data(), n);
                }),
        0, flops);
    add("gemm_bf16", s,
        time_ms(stream, reps,
                [&] {
                  kcu::gemm_bf16(ex, false, false, n, n, n, 1.0f, a16.data(), n, b16.data(), n,
                                 0.0f, cc.data(), n);
                }),
        0, flops);
  }
  {  // The MLP's up projection: [T/4, C] x [F, C]^T, fp32 and bf16 compute (rounding included)
    const int64_t tm = t / 4;
    auto in = random_f32(static_cast<size_t>(tm * c), 17, gpu);
    auto w = random_f32(static_cast<size_t>(f * c), 18, gpu, 0.02);
    Buffer<float> o(static_cast<size_t>(tm * f), gpu, core::Uninit{}, "out");
    const std::string s = dims({{"T", tm}, {"K", c}, {"N", f}});
    const double flops = 2.0 * tm * c * f;
    for (core::DType p : {core::DType::f32, core::DType::bf16})
      add(std::string("linear_forward_") + std::string(core::dtype_name(p)), s,
          time_ms(
              stream, reps,
              [&] { kcu::linear_forward(in.data(), w.data(), tm, c, f, o.data(), false, ex, p); }),
          0, flops);
  }

  {  // Merging attention partials and the backward's delta over [T, H, D]
    const size_t n = static_cast<size_t>(t * h * d), nr = static_cast<size_t>(t * h);
    auto o = random_f32(n, 19, gpu), oo = random_f32(n, 20, gpu), dout = random_f32(n, 21, gpu);
    auto la = random_f32(nr, 22, gpu, 3.0), lb = random_f32(nr, 23, gpu, 3.0);
    Buffer<float> delta(nr, gpu, core::Uninit{}, "delta");
    const std::string s = dims({{"T", t}, {"H", h}, {"D", d}});
    // Merging in place again and again keeps every value finite (a convex combination).
    add("merge_partials", s,
        time_ms(
            stream, reps,
            [&] { kcu::merge_partials(o.data(), la.data(), oo.data(), lb.data(), t, h, d, ex); }),
        fl * (3.0 * static_cast<double>(n) + 3.0 * static_cast<double>(nr)), 0);
    add("attention_delta", s,
        time_ms(stream, reps,
                [&] { kcu::attention_delta(dout.data(), o.data(), t, h, d, ex, delta.data()); }),
        fl * (2.0 * static_cast<double>(n) + static_cast<double>(nr)), 0);
  }
  {  // LM head + cross-entropy, fused: bf16 products at T, exact fp32 ones at T / 8
    const int64_t ch = 2048;
    auto w = random_f32(static_cast<size_t>(v * ch), 24, gpu, 0.02);
    Buffer<float> dw(static_cast<size_t>(v * ch), gpu, "dweight");
    for (core::DType p : {core::DType::bf16, core::DType::f32}) {
      const int64_t tl = p == core::DType::bf16 ? t : std::max<int64_t>(t / 8, 1);
      auto hid = random_f32(static_cast<size_t>(tl * ch), 25, gpu);
      Buffer<float> dh(static_cast<size_t>(tl * ch), gpu, core::Uninit{}, "dhidden");
      Buffer<int32_t> host_labels(tl);
      for (int64_t i = 0; i < tl; ++i) host_labels[i] = static_cast<int32_t>((i * 7919 + 13) % v);
      const Buffer<int32_t> labels = host_labels.to(gpu, "labels");
      kcu::LmHeadOptions o;
      o.compute = p;
      o.exec = ex;
      const kcu::LmHeadDims ld{tl, ch, v};
      const double flops = 6.0 * static_cast<double>(tl) * ch * static_cast<double>(v);
      add(std::string("lm_head_ce_") + std::string(core::dtype_name(p)),
          dims({{"T", tl}, {"C", ch}, {"V", v}}),
          time_ms(stream, std::max(1, reps / 5),
                  [&] {
                    kcu::lm_head_ce_fused(hid.data(), w.data(), labels.data(), ld,
                                          1.0 / static_cast<double>(tl), dh.data(), dw.data(), o);
                  }),
          0, flops,
          {{"token_tile", kcu::lm_head_token_tile(ld, o)},
           {"workspace_bytes", kcu::lm_head_workspace_bytes(ld, o)}});
    }
  }

  const kcu::GemmStats gs = kcu::gemm_stats();
  j["gemm_stats"] = {{"cublaslt", gs.cublaslt}, {"simple", gs.simple}, {"plans", gs.plans}};
  for (const Row& r : rows) {
    json e = {{"kernel", r.kernel}, {"shape", r.shape}, {"ms", r.ms}};
    if (r.flops > 0) {
      e["tflops"] = r.flops / (r.ms * 1e-3) / 1e12;
    } else {
      e["gbps"] = r.bytes / (r.ms * 1e-3) / 1e9;
      e["floor_ms"] = r.bytes / rate * 1e3;
      e["x_floor"] = r.ms / (r.bytes / rate * 1e3);
    }
    for (const auto& [k, val] : r.extra.items()) e[k] = val;
    j["results"].push_back(e);
  }
  std::ofstream fo(out);
  core::require(static_cast<bool>(fo), "cuda_kernels_bench", "cannot write --out ", out);
  fo << j.dump(1) << "\n";
  std::printf("gemm: %lld by cuBLASLt, %lld by the plain kernel\nwrote %s\n",
              static_cast<long long>(gs.cublaslt), static_cast<long long>(gs.simple), out.c_str());
  return 0;
}
