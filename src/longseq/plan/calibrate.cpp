// `longseq calibrate`'s measurements (plan/calibrate.hpp says what is measured and how).
#include "longseq/plan/calibrate.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/threads.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/kernels/cpu/attention.hpp"
#include "longseq/kernels/gemm.hpp"
#include "longseq/plan/attention_cost.hpp"
#include "longseq/plan/hardware.hpp"
#include "longseq/plan/memory.hpp"
#include "longseq/train/device.hpp"

namespace longseq::plan {

namespace {

// Best of `repeats` on the calling thread's CPU clock: the machine is shared with other jobs, and
// a descheduled thread's wall time says nothing about the kernel; its CPU time is what the kernel
// costs on a core of its own (what the model's gamma means). Hyper-thread siblings that compute
// at once still slow each other's CPU seconds, so the all-cores-busy rate keeps that effect.
template <class F>
double best_time(int repeats, F&& f) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const double t0 = core::thread_cpu_seconds();
    f();
    best = std::min(best, core::thread_cpu_seconds() - t0);
  }
  return best;
}

// One rank's attention block kernels on its own buffers.
class AttnBench {
 public:
  // strided: queries at positions 0, 2, 4, ..., keys at 1, 3, 5, ... under a causal mask (one
  // striped pair of world 2): every tile on the diagonal band is partial and cannot be trimmed.
  AttnBench(int64_t block, int threads, bool strided)
      : dims_{block, block, 8, 8, 128}, threads_(threads), strided_(strided) {
    const int64_t qn = dims_.tq * dims_.hq * dims_.d, kn = dims_.tk * dims_.hkv * dims_.d;
    q_.resize(qn), k_.resize(kn), v_.resize(kn), o_.resize(qn), do_.resize(qn);
    lse_.resize(dims_.tq * dims_.hq), delta_.resize(dims_.tq * dims_.hq);
    dq_.resize(qn), dk_.resize(kn), dv_.resize(kn);
    for (int64_t i = 0; i < qn; ++i) q_[i] = do_[i] = std::sin(0.001f * static_cast<float>(i));
    for (int64_t i = 0; i < kn; ++i) k_[i] = v_[i] = std::cos(0.002f * static_cast<float>(i));
    qpos_.resize(block), kpos_.resize(block);
    for (int64_t i = 0; i < block; ++i) {
      qpos_[i] = strided ? 2 * i : i;
      kpos_[i] = strided ? 2 * i + 1 : i;
    }
    ws_.resize(std::max(kernels::cpu::attention_forward_workspace_floats(dims_, threads),
                        kernels::cpu::attention_backward_workspace_floats(dims_, threads)));
    forward();
    kernels::cpu::attention_delta(do_.data(), o_.data(), dims_.tq, dims_.hq, dims_.d, threads,
                                  delta_.data());
  }
  void forward() {
    const kernels::Tokens qt{qpos_.data(), nullptr}, kt{kpos_.data(), nullptr};
    kernels::cpu::attention_block_forward(q_.data(), k_.data(), v_.data(), qt, kt, mask(), scale(),
                                          dims_, threads_, ws_, o_.data(), lse_.data());
  }
  void backward() {
    const kernels::Tokens qt{qpos_.data(), nullptr}, kt{kpos_.data(), nullptr};
    kernels::cpu::attention_block_backward(q_.data(), k_.data(), v_.data(), do_.data(), lse_.data(),
                                           delta_.data(), qt, kt, mask(), scale(), dims_, threads_,
                                           ws_, dq_.data(), dk_.data(), dv_.data());
  }
  /// (q, k) pairs the kernels compute in full and partial tiles (the planner's tile replay).
  TileWork tile_work(bool fwd) const {
    attention::MaskSpec m;
    m.causal = strided_;
    const attention::Chunk q{0, dims_.tq, 0, strided_ ? 2 : 1},
        k{0, dims_.tk, strided_ ? 1 : 0, strided_ ? 2 : 1};
    return kernel_tile_work(q, k, 2 * dims_.tq, m,
                            fwd ? kernels::cpu::kForwardTileQ : kernels::cpu::kBackwardTileQ,
                            fwd ? kernels::cpu::kForwardTileK : kernels::cpu::kBackwardTileK);
  }
  double hd() const { return static_cast<double>(dims_.hq * dims_.d); }

 private:
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(dims_.d)); }
  kernels::Mask mask() const {
    kernels::Mask m;
    m.causal = strided_;
    return m;
  }
  kernels::cpu::AttnDims dims_;
  int threads_;
  bool strided_;
  std::vector<float> q_, k_, v_, o_, do_, lse_, delta_, dq_, dk_, dv_, ws_;
  std::vector<int64_t> qpos_, kpos_;
};

// Per-rank rates with `ranks` ranks computing at once (each on its own thread and buffers); the
// slowest rank's best time counts.
AttnRates attention_rates(int64_t block, int threads, int repeats, int ranks, bool strided) {
  std::vector<std::unique_ptr<AttnBench>> b;
  for (int r = 0; r < ranks; ++r) b.push_back(std::make_unique<AttnBench>(block, threads, strided));
  auto concurrent = [&](auto&& op) {
    std::vector<double> t(ranks);
    std::vector<std::thread> th;
    for (int r = 1; r < ranks; ++r)
      th.emplace_back([&, r] { t[r] = best_time(repeats, [&] { op(*b[r]); }); });
    t[0] = best_time(repeats, [&] { op(*b[0]); });
    for (auto& x : th) x.join();
    return *std::max_element(t.begin(), t.end());
  };
  const double tf = concurrent([](AttnBench& a) { a.forward(); });
  const double tb = concurrent([](AttnBench& a) { a.backward(); });
  AttnRates out;
  out.fwd_s = tf;
  out.bwd_s = tb;
  out.fwd_work = b[0]->tile_work(true);
  out.bwd_work = b[0]->tile_work(false);
  const double fp = static_cast<double>(out.fwd_work.full + out.fwd_work.partial);
  const double bp = static_cast<double>(out.bwd_work.full + out.bwd_work.partial);
  out.fwd = 4.0 * fp * b[0]->hd() / tf;
  out.bwd = 10.0 * bp * b[0]->hd() / tb;
  return out;
}

// Ping-pong between group ranks 0 and 1 (others idle): rank 0 isend -> rank 1 irecv, then back.
// Iterations per size make each point last about `target_s`. Returns rank 0's timings (empty on
// other ranks).
std::vector<PingPoint> pingpong(comm::Group& g, double target_s) {
  std::vector<PingPoint> out;
  const int r = g.rank();
  if (r > 1) return out;
  const int peer = 1 - r;
  std::vector<char> sbuf(size_t{64} << 20, 1), rbuf(size_t{64} << 20);
  for (size_t bytes = 1024; bytes <= (size_t{64} << 20); bytes *= 4) {
    auto one = [&] {
      if (r == 0) {
        g.isend(peer, sbuf.data(), bytes, 7).wait();
        g.irecv(peer, rbuf.data(), bytes, 8).wait();
      } else {
        g.irecv(peer, rbuf.data(), bytes, 7).wait();
        g.isend(peer, sbuf.data(), bytes, 8).wait();
      }
    };
    one();  // warm-up (first touch of the receive buffer)
    // Rank 0 decides the iteration count from one timed round and tells rank 1.
    int iters = 0;
    if (r == 0) {
      const double t0 = core::now_seconds();
      one();
      const double rt = std::max(core::now_seconds() - t0, 1e-7);
      iters = static_cast<int>(std::clamp(target_s / rt, 3.0, 20000.0));
      g.isend(peer, &iters, sizeof iters, 9).wait();
    } else {
      one();
      g.irecv(peer, &iters, sizeof iters, 9).wait();
    }
    // Best of three batches (shared machine): the least disturbed batch.
    double best = 1e30;
    for (int batch = 0; batch < 3; ++batch) {
      const double t0 = core::now_seconds();
      for (int i = 0; i < iters; ++i) one();
      best = std::min(best, (core::now_seconds() - t0) / iters);
    }
    if (r == 0) out.push_back({bytes, iters, best / 2});
  }
  return out;
}

double load_average() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

Link fit_link(const std::vector<PingPoint>& pts) {
  LONGSEQ_CHECK(pts.size() >= 2);
  Link l;
  l.latency_s = pts.front().one_way_s;
  const PingPoint& big = pts.back();
  l.bandwidth_Bps = static_cast<double>(big.bytes) / std::max(big.one_way_s - l.latency_s, 1e-9);
  return l;
}

nlohmann::json points_json(const std::vector<PingPoint>& pts) {
  nlohmann::json a = nlohmann::json::array();
  for (const PingPoint& p : pts)
    a.push_back({{"bytes", p.bytes},
                 {"iters", p.iters},
                 {"one_way_s", p.one_way_s},
                 {"GBps", static_cast<double>(p.bytes) / p.one_way_s / 1e9}});
  return a;
}

}  // namespace

void CalibrateOptions::validate() const {
  core::require(threads >= 0, "calibrate", "--threads ", threads,
                " must be >= 0 (0: the host's hardware threads)");
  core::require(repeats >= 1, "calibrate", "--repeats ", repeats, " must be >= 1");
  core::require(block >= 64 && block <= 8192, "calibrate", "--block ", block,
                " must be in [64, 8192]");
  core::require(pingpong_s > 0, "calibrate", "--pingpong-seconds ", pingpong_s, " must be > 0");
  core::require(memory_gib >= 0, "calibrate", "--memory-gib ", memory_gib, " must be >= 0");
}

namespace {

// The MPI ping-pong when launched by mpirun (every process takes part). Returns false on ranks
// other than 0, which have nothing more to do.
bool measure_mpi(const CalibrateOptions& o, Calibration& c) {
  c.mpi_note = "not measured: not launched under mpirun";
  if (!comm::launched_by_mpirun()) return true;
  if (!comm::mpi_available()) {
    c.mpi_note = "not measured: launched under mpirun but the MPI backend was not built";
    return true;
  }
  comm::Options opt;
  opt.backend = "mpi";
  opt.world = 0;
  int my_rank = 0, size = 1;
  comm::run(opt, [&](comm::Group& g) {
    my_rank = g.rank();
    size = g.size();
    if (size >= 2) c.mpi_pts = pingpong(g, o.pingpong_s);
    g.barrier();
  });
  if (size < 2) c.mpi_note = "not measured: mpirun started a single process (use -np 2)";
  return my_rank == 0;
}

// Partial tiles: time of the strided causal block = (full + c * partial) pairs at the full rate,
// solved for c (a labelled correction).
double partial_cost(double t, double rate, double per_pair, const TileWork& w) {
  if (w.partial == 0) return 1.0;
  const double c =
      (t * rate / per_pair - static_cast<double>(w.full)) / static_cast<double>(w.partial);
  return std::clamp(c, 0.5, 10.0);
}

void measure_compute(const CalibrateOptions& o, Calibration& c) {
  c.cores = core::hardware_threads();
  c.threads = core::default_threads(o.threads, 1);
  c.gemm_flops = kernels::single_thread_gemm_flops(core::DType::f32, o.repeats);
  c.alone = attention_rates(o.block, c.threads, o.repeats, 1, false);
  c.busy = std::max(1, c.cores / c.threads);
  // One rank on every thread already keeps every core busy: the same timing.
  c.all = c.busy == 1 ? c.alone : attention_rates(o.block, c.threads, o.repeats, c.busy, false);
  c.strided = attention_rates(o.block, c.threads, o.repeats, c.busy, true);
  const double hd = 8.0 * 128.0;
  c.partial_cost_fwd = partial_cost(c.strided.fwd_s, c.all.fwd, 4.0 * hd, c.strided.fwd_work);
  c.partial_cost_bwd = partial_cost(c.strided.bwd_s, c.all.bwd, 10.0 * hd, c.strided.bwd_work);
}

void measure_local_link(const CalibrateOptions& o, Calibration& c) {
  comm::Options lo;
  lo.backend = "local";
  lo.world = 2;
  comm::run(lo, [&](comm::Group& g) {
    auto p = pingpong(g, o.pingpong_s);
    if (g.rank() == 0) c.local_pts = std::move(p);
  });
  c.local = fit_link(c.local_pts);
}

void fill_profile(const CalibrateOptions& o, Calibration& c) {
  Hardware& hw = c.hw;
  hw.name = "local";
  hw.description = "this machine: ranks are threads of one process (comm local backend), f32";
  hw.gpus_per_node = c.cores;
  hw.host_cores = c.cores;
  // Per thread: the planner's `local` rank computes on one core (compute_share), so the rates of
  // ranks of --threads threads enter divided by them (docs/planner.md, "Calibration").
  hw.peak_flops = c.gemm_flops;
  hw.dtype_bytes = 4;
  const double phys =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  hw.memory_bytes = o.memory_gib > 0 ? o.memory_gib * (1 << 30) : phys / 2;
  hw.intra = c.local;
  hw.inter = c.local;  // one host: a declared --nodes split uses the same memory
  hw.inter_node_bandwidth_Bps = c.local.bandwidth_Bps * hw.gpus_per_node;
  hw.wait_copy = c.local;
  hw.corrections.gemm_efficiency = 1.0;  // peak_flops *is* the measured GEMM rate
  hw.corrections.attention_fwd_efficiency = std::min(1.5, c.all.fwd / c.threads / hw.peak_flops);
  hw.corrections.attention_bwd_efficiency = std::min(1.5, c.all.bwd / c.threads / hw.peak_flops);
  hw.corrections.collective_efficiency = 1.0;
  hw.tiles = {kernels::cpu::kForwardTileQ, kernels::cpu::kForwardTileK,
              kernels::cpu::kBackwardTileQ, kernels::cpu::kBackwardTileK};
  hw.corrections.partial_tile_cost_fwd = c.partial_cost_fwd;
  hw.corrections.partial_tile_cost_bwd = c.partial_cost_bwd;
  hw.corrections.source = core::cat(
      "measured by longseq calibrate: kernels::cpu attention ", o.block, "x", o.block,
      " full mask, 8 heads, D 128, ", c.threads, " thread(s) per rank (rates per thread), ", c.busy,
      " rank(s) computing at once (all cores busy), relative to gemm_f32 1024^3 (",
      kernels::gemm_library(),
      "); partial_tile_cost_* from the same block with striped causal positions (q "
      "0,2,4.., k 1,3,5..): "
      "(time x full-tile rate - full-tile pairs) / partial-tile pairs");
  hw.source =
      "measured by longseq calibrate: link = comm local backend ping-pong (isend/irecv, world 2, "
      "1 KiB..64 MiB), alpha = 1 KiB one-way time, beta = 64 MiB point";
  if (!c.mpi_pts.empty()) {
    hw.mpi = fit_link(c.mpi_pts);
    hw.mpi_measured = true;
    c.mpi_note = "comm MPI backend ping-pong between ranks 0 and 1 (mpirun)";
  }
  hw.mpi_note = c.mpi_note;
}

}  // namespace

std::optional<Calibration> calibrate(const CalibrateOptions& o) {
  o.validate();
  Calibration c;
  // MPI first: every process of the mpirun job takes part; only rank 0 goes on.
  if (!measure_mpi(o, c)) return std::nullopt;
  measure_compute(o, c);
  measure_local_link(o, c);
  fill_profile(o, c);
  return c;
}

std::string calibration_json(const Calibration& c) {
  nlohmann::json j = nlohmann::json::parse(hardware_to_json(c.hw));
  j["measurements"] = {
      {"gemm_f32_flops", c.gemm_flops},
      {"threads_per_rank", c.threads},
      {"attention_alone",
       {{"fwd_flops", c.alone.fwd},
        {"bwd_flops", c.alone.bwd},
        {"fwd_flops_per_thread", c.alone.fwd / c.threads},
        {"bwd_flops_per_thread", c.alone.bwd / c.threads}}},
      {"attention_all_cores_busy",
       {{"ranks", c.busy},
        {"fwd_flops", c.all.fwd},
        {"bwd_flops", c.all.bwd},
        {"fwd_flops_per_thread", c.all.fwd / c.threads},
        {"bwd_flops_per_thread", c.all.bwd / c.threads}}},
      {"attention_strided_causal",
       {{"fwd_s", c.strided.fwd_s},
        {"bwd_s", c.strided.bwd_s},
        {"fwd_pairs", {{"full", c.strided.fwd_work.full}, {"partial", c.strided.fwd_work.partial}}},
        {"bwd_pairs",
         {{"full", c.strided.bwd_work.full}, {"partial", c.strided.bwd_work.partial}}}}},
      {"load_average_1min", load_average()},
      {"host", this_host()},  // `plan --hardware` compares it with the machine it runs on
      {"pingpong_local", points_json(c.local_pts)},
      {"pingpong_mpi",
       c.mpi_pts.empty() ? nlohmann::json("not measured") : points_json(c.mpi_pts)}};
  return j.dump(2) + "\n";
}

std::string calibration_summary(const Calibration& c, int64_t block) {
  const long long b = static_cast<long long>(block);
  std::string s = core::cat("gemm_f32 1024^3: ", c.gemm_flops / 1e9, " GFLOP/s per thread\n");
  const double t = c.threads;
  s += core::cat("attention ", b, "x", b, " on ", c.threads,
                 " thread(s) per rank, GFLOP/s per rank (per thread): forward ", c.alone.fwd / 1e9,
                 " (", c.alone.fwd / t / 1e9, ") alone, ", c.all.fwd / 1e9, " (",
                 c.all.fwd / t / 1e9, ") with ", c.busy, " rank(s) busy; backward ",
                 c.alone.bwd / 1e9, " (", c.alone.bwd / t / 1e9, ") / ", c.all.bwd / 1e9, " (",
                 c.all.bwd / t / 1e9, ")\n");
  s += core::cat("partial tiles cost ", c.partial_cost_fwd, " (forward), ", c.partial_cost_bwd,
                 " (backward) x a full tile's pair\nlocal ping-pong (one way):\n");
  char line[128];
  for (const PingPoint& p : c.local_pts) {
    std::snprintf(line, sizeof line, "  %9zu B  %10.3f us  %7.3f GB/s\n", p.bytes,
                  p.one_way_s * 1e6, static_cast<double>(p.bytes) / p.one_way_s / 1e9);
    s += line;
  }
  s += core::cat("local link: alpha ", c.local.latency_s * 1e6, " us, beta ",
                 c.local.bandwidth_Bps / 1e9, " GB/s\n");
  if (c.hw.mpi_measured)
    s += core::cat("mpi link: alpha ", c.hw.mpi.latency_s * 1e6, " us, beta ",
                   c.hw.mpi.bandwidth_Bps / 1e9, " GB/s\n");
  else
    s += "mpi link: " + c.mpi_note + "\n";
  return s + core::cat("host cores: ", c.cores, "\n");
}

Hardware calibrate_gpu(core::Device device, const std::string& name) {
  core::require(!device.is_cpu(), "calibrate", "--device ", device.str(),
                ": calibrate_gpu measures a GPU (--device cuda or cuda:N)");
  core::require(train::cuda_built(), "calibrate", "--device ", device.str(),
                ": this build has no CUDA backend (configure with a CUDA toolkit: LONGSEQ_CUDA=ON, "
                "docs/gpu.md); `longseq calibrate` without --device measures this host");
  Hardware hw;
  hw.name = name;
  // device_memory_bytes first: it names a missing GPU before anything is measured.
  try {
    hw.memory_bytes = train::device_memory_bytes(device);
  } catch (const core::Error& e) {
    core::fail("calibrate", "--device ", device.str(), ": cannot measure it: ", e.what());
  }
  hw.gpu.name = train::device_name(device);
  hw.gpu.gemm_bf16_flops = 1e9 * train::device_peak_gflops(device, core::DType::bf16);
  hw.gpu.gemm_f32_flops = 1e9 * train::device_peak_gflops(device, core::DType::f32);
  hw.gpu.memory_bandwidth_Bps = train::device_copy_bandwidth(device, size_t{1} << 30, 5);
  hw.peak_flops = hw.gpu.gemm_bf16_flops;
  hw.dtype_bytes = 2;
  hw.gpus_per_node = 1;
  hw.description = core::cat("one ", hw.gpu.name, " (", device.str(), ")");
  hw.source = core::cat("measured by longseq calibrate --device ", device.str(), " on ",
                        this_host()["cpu_model"].get<std::string>());
  hw.corrections.source = "none: a single GPU's profile holds measured rates only";
  return hw;
}

std::string gpu_calibration_json(const Hardware& hw, core::Device device) {
  nlohmann::json j = nlohmann::json::parse(hardware_to_json(hw));
  j["measurements"] = {
      {"device", device.str()}, {"load_average_1min", load_average()}, {"host", this_host()}};
  return j.dump(2) + "\n";
}

std::string gpu_calibration_summary(const Hardware& hw) {
  return core::cat(hw.gpu.name, ": ", hw.memory_bytes / (1 << 30), " GiB; GEMM 8192^3 bf16 ",
                   hw.gpu.gemm_bf16_flops / 1e12, " TFLOP/s, fp32 ", hw.gpu.gemm_f32_flops / 1e12,
                   " TFLOP/s; device copy ", hw.gpu.memory_bandwidth_Bps / 1e9, " GB/s\n");
}

}  // namespace longseq::plan
