// `longseq calibrate`: measures this machine and writes its hardware profile (default
// data/hardware/local.json) for `longseq plan --hardware local` and bench/plan_calibration_bench.
//
// Measured, each with the real part that the executor runs:
//   gemm     kernels::gemm_f32 1024^3 on one thread (a rank computes on --threads threads): the
//            profile's "peak" (gemm_efficiency 1 by definition).
//   attention  kernels::cpu attention_block_forward / backward, --block x --block, 8 heads, D 128,
//            full mask, FLOPs counted as 4 and 10 per (q, k) pair and head-dim element (the
//            planner's convention). Timed twice: alone, and with one copy per core running at once
//            (every core busy, the regime of a distributed run with world >= cores). The profile's
//            efficiencies are the all-cores-busy rates over the GEMM peak (a labelled correction).
//   local link  comm::run(backend "local", world 2): ping-pong of isend/irecv from 1 KiB to 64 MiB
//            (x4 steps); one-way time = half the round trip. alpha = one-way time of 1 KiB, beta
//            from the 64 MiB point. Written as intra, inter (one host) and wait_copy (the local
//            backend copies at the wait: hardware.hpp).
//   mpi link  the same ping-pong between ranks 0 and 1 through the MPI backend, only when launched
//            by mpirun (`mpirun -np 2 longseq calibrate`; rank 0 measures the rest and writes the
//            profile); otherwise the profile says "not measured".
//   cores    std::thread::hardware_concurrency(): host_cores (ranks beyond it time-share cores).
// Kernel rates are timed on the thread CPU clock (best of --repeats), the ping-pong on the wall
// clock (its waits sleep); the 1-minute load average is recorded next to them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "commands.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/attention.hpp"
#include "longseq/kernels/gemm.hpp"
#include "longseq/plan/attention_cost.hpp"
#include "longseq/plan/hardware.hpp"
#include "longseq/plan/memory.hpp"

namespace longseq::cli {

namespace {

struct CalibrateArgs {
  std::string out;
  int threads = 1;
  int repeats = 5;
  int64_t block = 1024;
  double memory_gib = 0;
  double pingpong_s = 0.05;  // target seconds per ping-pong size
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Best of `repeats` on the calling thread's CPU clock: the machine is shared with other jobs, and
// a descheduled thread's wall time says nothing about the kernel; its CPU time is what the kernel
// costs on a core of its own (what the model's gamma means). Hyper-thread siblings that compute
// at once still slow each other's CPU seconds, so the all-cores-busy rate keeps that effect.
template <class F>
double best_time(int repeats, F&& f) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const double t0 = thread_cpu_s();
    f();
    best = std::min(best, thread_cpu_s() - t0);
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

struct AttnRates {
  double fwd = 0, bwd = 0;  // FLOP/s per rank, per computed (q, k) pair x 4 (10) x Hq x D
  double fwd_s = 0, bwd_s = 0;  // slowest rank's best time of one call
  plan::TileWork fwd_work, bwd_work;
};

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
    kernels::cpu::attention_delta(do_.data(), o_.data(), dims_.tq, dims_.hq, dims_.d, threads, delta_.data());
  }
  void forward() {
    const kernels::Tokens qt{qpos_.data(), nullptr}, kt{kpos_.data(), nullptr};
    kernels::cpu::attention_block_forward(q_.data(), k_.data(), v_.data(), qt, kt, mask(), scale(), dims_,
                                          threads_, ws_, o_.data(), lse_.data());
  }
  void backward() {
    const kernels::Tokens qt{qpos_.data(), nullptr}, kt{kpos_.data(), nullptr};
    kernels::cpu::attention_block_backward(q_.data(), k_.data(), v_.data(), do_.data(), lse_.data(), delta_.data(),
                                           qt, kt, mask(), scale(), dims_, threads_, ws_, dq_.data(), dk_.data(),
                                           dv_.data());
  }
  /// (q, k) pairs the kernels compute in full and partial tiles (the planner's tile replay).
  plan::TileWork tile_work(bool fwd) const {
    attention::MaskSpec m;
    m.causal = strided_;
    const attention::Chunk q{0, dims_.tq, 0, strided_ ? 2 : 1}, k{0, dims_.tk, strided_ ? 1 : 0, strided_ ? 2 : 1};
    return plan::kernel_tile_work(q, k, 2 * dims_.tq, m, fwd ? kernels::cpu::kForwardTileQ : kernels::cpu::kBackwardTileQ,
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
    for (int r = 1; r < ranks; ++r) th.emplace_back([&, r] { t[r] = best_time(repeats, [&] { op(*b[r]); }); });
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

struct PingPoint {
  size_t bytes = 0;
  int iters = 0;
  double one_way_s = 0;
};

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
      const double t0 = now_s();
      one();
      const double rt = std::max(now_s() - t0, 1e-7);
      iters = static_cast<int>(std::clamp(target_s / rt, 3.0, 20000.0));
      g.isend(peer, &iters, sizeof iters, 9).wait();
    } else {
      one();
      g.irecv(peer, &iters, sizeof iters, 9).wait();
    }
    // Best of three batches (shared machine): the least disturbed batch.
    double best = 1e30;
    for (int batch = 0; batch < 3; ++batch) {
      const double t0 = now_s();
      for (int i = 0; i < iters; ++i) one();
      best = std::min(best, (now_s() - t0) / iters);
    }
    if (r == 0) out.push_back({bytes, iters, best / 2});
  }
  return out;
}

double load_average() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

plan::Link fit_link(const std::vector<PingPoint>& pts) {
  LONGSEQ_CHECK(pts.size() >= 2);
  plan::Link l;
  l.latency_s = pts.front().one_way_s;
  const PingPoint& big = pts.back();
  l.bandwidth_Bps = static_cast<double>(big.bytes) / std::max(big.one_way_s - l.latency_s, 1e-9);
  return l;
}

nlohmann::json points_json(const std::vector<PingPoint>& pts) {
  nlohmann::json a = nlohmann::json::array();
  for (const PingPoint& p : pts)
    a.push_back({{"bytes", p.bytes}, {"iters", p.iters}, {"one_way_s", p.one_way_s},
                 {"GBps", static_cast<double>(p.bytes) / p.one_way_s / 1e9}});
  return a;
}

}  // namespace

std::function<int()> add_calibrate(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  a->out = plan::data_dir() + "/hardware/local.json";
  app.add_option("--out", a->out, "profile to write")->capture_default_str();
  app.add_option("--threads", a->threads, "compute threads per rank (the executor's AttentionSpec::threads)")
      ->capture_default_str();
  app.add_option("--repeats", a->repeats, "timed repetitions per kernel measurement (best is kept)")
      ->capture_default_str();
  app.add_option("--block", a->block, "attention block size (tokens) of the kernel measurement")->capture_default_str();
  app.add_option("--pingpong-seconds", a->pingpong_s, "target seconds per ping-pong size")->capture_default_str();
  app.add_option("--memory-gib", a->memory_gib, "memory per rank in GiB (0: physical memory / 2)");
  return [a] {
    core::require(a->threads >= 1, "calibrate", "--threads ", a->threads, " must be >= 1");
    core::require(a->repeats >= 1, "calibrate", "--repeats ", a->repeats, " must be >= 1");
    core::require(a->block >= 64 && a->block <= 8192, "calibrate", "--block ", a->block, " must be in [64, 8192]");
    core::require(a->pingpong_s > 0, "calibrate", "--pingpong-seconds ", a->pingpong_s, " must be > 0");

    // MPI first: every process of the mpirun job takes part; only rank 0 goes on.
    std::vector<PingPoint> mpi_pts;
    std::string mpi_note = "not measured: not launched under mpirun";
    if (comm::launched_by_mpirun()) {
      if (!comm::mpi_available()) {
        mpi_note = "not measured: launched under mpirun but the MPI backend was not built";
      } else {
        comm::Options opt;
        opt.backend = "mpi";
        opt.world = 0;
        int my_rank = 0, size = 1;
        comm::run(opt, [&](comm::Group& g) {
          my_rank = g.rank();
          size = g.size();
          if (size >= 2) mpi_pts = pingpong(g, a->pingpong_s);
          g.barrier();
        });
        if (my_rank != 0) return 0;
        if (size < 2) mpi_note = "not measured: mpirun started a single process (use -np 2)";
      }
    }

    plan::Hardware hw;
    hw.name = "local";
    hw.description = "this machine: ranks are threads of one process (comm local backend), f32";
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    hw.gpus_per_node = cores;
    hw.host_cores = cores;
    const double gemm = gemm_rate(a->repeats);
    const AttnRates alone = attention_rates(a->block, a->threads, a->repeats, 1, false);
    const int busy = std::max(1, cores / a->threads);
    const AttnRates all = attention_rates(a->block, a->threads, a->repeats, busy, false);
    // Partial tiles: time of the strided causal block = (full + c * partial) pairs at the full
    // rate, solved for c (a labelled correction).
    const AttnRates strided = attention_rates(a->block, a->threads, a->repeats, busy, true);
    auto partial_cost = [](double t, double rate, double per_pair, const plan::TileWork& w) {
      if (w.partial == 0) return 1.0;
      const double c = (t * rate / per_pair - static_cast<double>(w.full)) / static_cast<double>(w.partial);
      return std::clamp(c, 0.5, 10.0);
    };
    const double hd = 8.0 * 128.0;
    const double pc_fwd = partial_cost(strided.fwd_s, all.fwd, 4.0 * hd, strided.fwd_work);
    const double pc_bwd = partial_cost(strided.bwd_s, all.bwd, 10.0 * hd, strided.bwd_work);

    std::vector<PingPoint> local_pts;
    comm::Options lo;
    lo.backend = "local";
    lo.world = 2;
    comm::run(lo, [&](comm::Group& g) {
      auto p = pingpong(g, a->pingpong_s);
      if (g.rank() == 0) local_pts = std::move(p);
    });
    const plan::Link local = fit_link(local_pts);

    hw.peak_flops = gemm * a->threads;  // the rate a rank's GEMMs reach: the planner's "peak"
    hw.dtype_bytes = 4;
    const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    hw.memory_bytes = a->memory_gib > 0 ? a->memory_gib * (1 << 30) : phys / 2;
    hw.intra = local;
    hw.inter = local;  // one host: a declared --nodes split uses the same memory
    hw.inter_node_bandwidth_Bps = local.bandwidth_Bps * hw.gpus_per_node;
    hw.wait_copy = local;
    hw.corrections.gemm_efficiency = 1.0;  // peak_flops *is* the measured GEMM rate
    hw.corrections.attention_fwd_efficiency = std::min(1.5, all.fwd / hw.peak_flops);
    hw.corrections.attention_bwd_efficiency = std::min(1.5, all.bwd / hw.peak_flops);
    hw.corrections.collective_efficiency = 1.0;
    hw.tiles = {kernels::cpu::kForwardTileQ, kernels::cpu::kForwardTileK, kernels::cpu::kBackwardTileQ,
                kernels::cpu::kBackwardTileK};
    hw.corrections.partial_tile_cost_fwd = pc_fwd;
    hw.corrections.partial_tile_cost_bwd = pc_bwd;
    hw.corrections.source = core::cat(
        "measured by longseq calibrate: kernels::cpu attention ", a->block, "x", a->block,
        " full mask, 8 heads, D 128, ", a->threads, " thread(s) per rank, ", busy,
        " rank(s) computing at once (all cores busy), relative to gemm_f32 1024^3 (", kernels::gemm_library(),
        "); partial_tile_cost_* from the same block with striped causal positions (q 0,2,4.., k 1,3,5..): "
        "(time x full-tile rate - full-tile pairs) / partial-tile pairs");
    hw.source = "measured by longseq calibrate: link = comm local backend ping-pong (isend/irecv, world 2, "
                "1 KiB..64 MiB), alpha = 1 KiB one-way time, beta = 64 MiB point";
    if (!mpi_pts.empty()) {
      hw.mpi = fit_link(mpi_pts);
      hw.mpi_measured = true;
      mpi_note = "comm MPI backend ping-pong between ranks 0 and 1 (mpirun)";
    }
    hw.mpi_note = mpi_note;

    nlohmann::json j = nlohmann::json::parse(plan::hardware_to_json(hw));
    j["measurements"] = {
        {"gemm_f32_flops", gemm},
        {"attention_alone", {{"fwd_flops", alone.fwd}, {"bwd_flops", alone.bwd}}},
        {"attention_all_cores_busy", {{"ranks", busy}, {"fwd_flops", all.fwd}, {"bwd_flops", all.bwd}}},
        {"attention_strided_causal",
         {{"fwd_s", strided.fwd_s}, {"bwd_s", strided.bwd_s},
          {"fwd_pairs", {{"full", strided.fwd_work.full}, {"partial", strided.fwd_work.partial}}},
          {"bwd_pairs", {{"full", strided.bwd_work.full}, {"partial", strided.bwd_work.partial}}}}},
        {"load_average_1min", load_average()},
        {"host", plan::this_host()},  // `plan --hardware` compares it with the machine it runs on
        {"pingpong_local", points_json(local_pts)},
        {"pingpong_mpi", mpi_pts.empty() ? nlohmann::json("not measured") : points_json(mpi_pts)}};
    std::ofstream out(a->out);
    core::require(static_cast<bool>(out), "calibrate", "--out: cannot write ", a->out);
    out << j.dump(2) << "\n";
    core::require(static_cast<bool>(out), "calibrate", "--out: failed writing ", a->out);

    std::printf("gemm_f32 1024^3: %.3g GFLOP/s per thread\n", gemm / 1e9);
    std::printf("attention %lldx%lld: forward %.3g GFLOP/s alone, %.3g with %d rank(s) busy; backward %.3g / %.3g\n",
                static_cast<long long>(a->block), static_cast<long long>(a->block), alone.fwd / 1e9, all.fwd / 1e9,
                busy, alone.bwd / 1e9, all.bwd / 1e9);
    std::printf("partial tiles cost %.3f (forward), %.3f (backward) x a full tile's pair\n", pc_fwd, pc_bwd);
    std::printf("local ping-pong (one way):\n");
    for (const PingPoint& p : local_pts)
      std::printf("  %9zu B  %10.3f us  %7.3f GB/s\n", p.bytes, p.one_way_s * 1e6,
                  static_cast<double>(p.bytes) / p.one_way_s / 1e9);
    std::printf("local link: alpha %.3g us, beta %.3g GB/s\n", local.latency_s * 1e6, local.bandwidth_Bps / 1e9);
    if (hw.mpi_measured)
      std::printf("mpi link: alpha %.3g us, beta %.3g GB/s\n", hw.mpi.latency_s * 1e6, hw.mpi.bandwidth_Bps / 1e9);
    else
      std::printf("mpi link: %s\n", mpi_note.c_str());
    std::printf("host cores: %d\nwrote %s\n", cores, a->out.c_str());
    return 0;
  };
}

}  // namespace longseq::cli
