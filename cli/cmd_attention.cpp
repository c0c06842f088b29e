// `longseq attention`: distributed attention on .npy inputs (or seeded random ones), for users and
// for conformance checks with other tools. Inputs and outputs are in global token order.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "longseq/attention/distributed.hpp"
#include "longseq/attention/harness.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/npy.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/timer.hpp"

namespace longseq::cli {

namespace {

struct AttentionArgs {
  std::string q, k, v, dout;
  std::string random;  // N,Hq,Hkv,D
  uint64_t seed = 1;
  std::string mask = "full";
  bool causal = false;
  std::string algo = "burst";
  int world = -1;  // -1: not given (local: 1; mpirun: its -np)
  int nodes = -1;  // -1: not given (local: 1; mpirun: the hosts MPI reports)
  std::string balance = "zigzag";
  double scale = 0;
  std::string link;
  std::string out;
  int threads = 0;  // 0: the host's hardware threads / its ranks
  int warmup = 0;   // untimed runs before the measured one
  std::string backend = "any";
  std::string precision = "f32";
};

std::vector<int64_t> parse_dims(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    try {
      size_t used = 0;
      out.push_back(std::stoll(tok, &used));
      if (used != tok.size()) throw std::invalid_argument(tok);
    } catch (...) {
      core::fail("attention", "--random '", s, "': '", tok, "' is not an integer");
    }
  }
  core::require(out.size() == 4 && out[0] > 0 && out[1] > 0 && out[2] > 0 && out[3] > 0,
                "attention", "--random needs N,Hq,Hkv,D (positive integers), got '", s, "'");
  return out;
}

}  // namespace

std::function<int()> add_attention(CLI::App& app) {
  auto a = std::make_shared<AttentionArgs>();
  app.add_option("--q", a->q, "queries, float32 .npy [N, Hq, D] in global token order");
  app.add_option("--k", a->k, "keys, float32 .npy [N, Hkv, D]");
  app.add_option("--v", a->v, "values, float32 .npy [N, Hkv, D]");
  app.add_option("--do", a->dout,
                 "output gradient, float32 .npy [N, Hq, D]: runs the backward too");
  app.add_option("--random", a->random,
                 "instead of files: seeded inputs of N,Hq,Hkv,D (runs the backward)");
  app.add_option("--seed", a->seed, "seed for --random");
  app.add_option(
      "--mask", a->mask,
      "full | causal | window:W | document:FILE | blocks:FILE:B, comma-separated to combine");
  app.add_flag("--causal", a->causal, "add causality (e.g. to a block mask)");
  app.add_option("--algo", a->algo,
                 "ring | burst | double-ring[:I][:burst|:ring] | startrail:C[:teams|:rings] | "
                 "ulysses | usp:U[:burst|:ring]");
  app.add_option("--world", a->world,
                 "ranks (local backend; under mpirun, if given, must equal -np)")
      ->default_str("1, or mpirun's -np");
  app.add_option("--nodes", a->nodes,
                 "nodes the ranks are split over, evenly (declared; under mpirun the default is "
                 "the hosts MPI reports)")
      ->default_str("1, or mpirun's hosts");
  app.add_option("--balance", a->balance, "contiguous | zigzag | striped | block-striped");
  app.add_option("--scale", a->scale, "softmax scale (0 = 1/sqrt(D))");
  app.add_option("--link", a->link,
                 "link model intra=LAT,BW:inter=LAT,BW, e.g. intra=5us,20GB/s:inter=20us,2.5GB/s");
  app.add_option("--threads", a->threads,
                 "compute threads per rank (0: hardware threads / ranks on the host, as train)");
  app.add_option("--warmup", a->warmup,
                 "untimed runs of the same work before the measured one (primes the GEMM "
                 "library's per-shape kernels and first-touch memory); outputs, stats.json and "
                 "the time are the measured run's");
  app.add_option("--precision", a->precision,
                 "f32 (or fp32) | bf16: precision of q, k, v, dO in the kernels and on the wire "
                 "(outputs stay float32)");
  app.add_option("--backend", a->backend, "local | mpi | any (any: MPI when started by mpirun)");
  app.add_option("--out", a->out, "output directory (o.npy, lse.npy, dq/dk/dv.npy, stats.json)");
  return [a] {
    using namespace attention;
    // ---- flags that need no input (every process checks the same, so every process fails alike)
    core::require(a->world == -1 || a->world >= 1, "attention", "--world ", a->world,
                  " must be at least 1");
    core::require(a->nodes == -1 || a->nodes >= 1, "attention", "--nodes ", a->nodes,
                  " must be at least 1");
    core::require(a->warmup >= 0, "attention", "--warmup ", a->warmup, " must be 0 or more");
    core::require(a->threads >= 0, "attention", "--threads ", a->threads,
                  " must be at least 1 (or 0: hardware threads / ranks on the host)");
    const core::DType precision = core::parse_precision(a->precision, "attention");
    core::require(a->scale >= 0, "attention", "--scale must be >= 0, got ", a->scale);

    // ---- inputs (global order)
    GlobalInputs in;
    if (!a->random.empty()) {
      core::require(a->q.empty() && a->k.empty() && a->v.empty() && a->dout.empty(), "attention",
                    "--random replaces --q/--k/--v/--do");
      const auto d = parse_dims(a->random);
      core::require(d[1] % d[2] == 0, "attention", "--random ", a->random, ": query heads ", d[1],
                    " must be a multiple of key/value heads ", d[2]);
      in = GlobalInputs::random(d[0], d[1], d[2], d[3], a->seed);
    } else {
      core::require(!a->q.empty() && !a->k.empty() && !a->v.empty(), "attention",
                    "needs --q, --k and --v (or --random N,Hq,Hkv,D)");
      in.q = core::read_npy_f32(a->q, 3, "--q");
      in.k = core::read_npy_f32(a->k, 3, "--k");
      in.v = core::read_npy_f32(a->v, 3, "--v");
      if (!a->dout.empty()) in.dout = core::read_npy_f32(a->dout, 3, "--do");
      // Zero extents would divide by zero further on: refuse them by flag.
      for (const auto& [flag, t] :
           {std::pair<const char*, const core::Tensor<float>*>{"--q", &in.q},
            {"--k", &in.k},
            {"--v", &in.v},
            {"--do", &in.dout}}) {
        if (t->shape().rank() == 0) continue;  // --do not given
        core::require(t->dim(0) > 0 && t->dim(1) > 0 && t->dim(2) > 0, "attention", flag,
                      " has shape ", t->shape().str(), ": every extent must be positive");
      }
      core::require(in.k.shape() == in.v.shape(), "attention", "--k ", in.k.shape().str(),
                    " and --v ", in.v.shape().str(), " must have the same shape");
      core::require(in.k.dim(0) == in.n() && in.k.dim(2) == in.d(), "attention", "--k ",
                    in.k.shape().str(), " must be [", in.n(), ", Hkv, ", in.d(), "] to match --q ",
                    in.q.shape().str());
      core::require(in.hq() % in.hkv() == 0, "attention", "query heads ", in.hq(), " (--q ",
                    in.q.shape().str(), ") must be a multiple of key/value heads ", in.hkv(),
                    " (--k ", in.k.shape().str(), ")");
      if (in.backward())
        core::require(in.dout.shape() == in.q.shape(), "attention", "--do ", in.dout.shape().str(),
                      " must match --q ", in.q.shape().str());
    }
    in.validate("attention");
    const int64_t n = in.n(), hq = in.hq(), hkv = in.hkv(), d = in.d();
    const bool backward = in.backward();

    AttentionSpec spec;
    spec.algo = Algorithm::parse(a->algo);
    spec.mask = std::make_shared<MaskSpec>(MaskSpec::parse(a->mask, a->causal, n));
    spec.scale = a->scale;
    spec.threads = std::max(1, a->threads);  // 0 is resolved per rank below
    spec.precision = precision;
    const Balance balance = parse_balance(a->balance);
    if (balance == Balance::block_striped)
      core::require(!spec.mask->block_mask.empty(), "attention",
                    "--balance block-striped needs a blocks:FILE:B mask");

    comm::Options cfg;
    cfg.backend = a->backend;
    cfg.world = a->world == -1 ? 0 : a->world;
    cfg.nodes = a->nodes == -1 ? 0 : a->nodes;
    cfg.abort_on_failure =
        true;  // under mpirun a failed rank ends the job instead of leaving peers waiting
    if (!a->link.empty()) cfg.link = comm::LinkModel::parse(a->link);
    const int world = comm::world_size(cfg);
    const int nodes_flag = cfg.nodes == 0 ? 1 : cfg.nodes;
    core::require(world % nodes_flag == 0, "attention", "--nodes ", nodes_flag,
                  " must divide the world of ", world, " ranks");
    // Refuse a layout that cannot exist before any rank starts (a clear message, once per process).
    const Layout check(balance, n, world, spec.mask->block_size);
    (void)check;

    HarnessRun result;
    bool have_rank0 = false;
    int threads_used = spec.threads;
    int nodes = 1;
    const core::Timer wall;
    core::Timer measured;
    double measured_s = 0.0;
    comm::run(cfg, [&](comm::Group& g) {
      const Layout layout(balance, n, g.size(), spec.mask->block_size);
      // No idle core by default: the host's hardware threads shared by the ranks it runs (the
      // local backend runs all of them here; under mpirun the ranks split evenly over the hosts).
      AttentionSpec rank_spec = spec;
      if (a->threads == 0) {
        const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        const int on_host = std::max(1, g.size() / std::max(1, g.topology().num_nodes()));
        rank_spec.threads = std::max(1, hw / on_host);
      }
      for (int i = 0; i < a->warmup; ++i) (void)run_harness(in, rank_spec, layout, g);
      // With warm-up runs, the time is the measured run's alone, from when every rank has
      // finished warming up (the barrier) to rank 0's end.
      if (a->warmup > 0) {
        g.barrier();
        if (g.rank() == 0) measured.restart();
      }
      HarnessRun run = run_harness(in, rank_spec, layout, g);
      if (g.rank() == 0 && a->warmup > 0) measured_s = measured.elapsed();
      if (g.rank() == 0) threads_used = rank_spec.threads;
      if (g.rank() == 0) {  // local backend: the calling thread; MPI: one process of the job
        result = std::move(run);
        nodes = g.topology().num_nodes();
        have_rank0 = true;
      }
    });
    const double seconds = a->warmup > 0 ? measured_s : wall.elapsed();
    // Another process of the mpirun job writes and prints: the one holding rank 0 of the MPI
    // world, or, with --backend local under mpirun (every process runs the same threads), the
    // launcher's rank 0.
    const bool local_copy =
        comm::resolve_backend(a->backend).name == "local" && comm::launcher_rank() != 0;
    if (!have_rank0 || local_copy) return 0;

    nlohmann::json ranks = nlohmann::json::array();
    for (const RankRecord& r : result.ranks) ranks.push_back(r.to_json(backward));
    nlohmann::json stats = {{"algo", spec.algo.name()},
                            {"balance", a->balance},
                            {"mask", spec.mask->describe()},
                            {"n", n},
                            {"hq", hq},
                            {"hkv", hkv},
                            {"d", d},
                            {"world", world},
                            {"threads_per_rank", threads_used},
                            {"nodes", nodes},
                            {"backend", std::string(comm::resolve_backend(a->backend).name)},
                            {"precision", std::string(core::dtype_name(spec.precision))},
                            {"seconds", seconds},
                            {"visible_pairs", result.work.visible_pairs},
                            {"forward_flops", result.work.forward_flops},
                            {"backward_flops", backward ? result.work.backward_flops : 0.0},
                            {"bytes_sent_intra", result.bytes_sent_intra()},
                            {"bytes_sent_inter", result.bytes_sent_inter()},
                            {"ranks", ranks}};
    if (!a->out.empty()) {
      std::filesystem::create_directories(a->out);
      core::write_npy(a->out + "/o.npy", result.o);
      core::write_npy(a->out + "/lse.npy", result.lse);
      if (backward) {
        core::write_npy(a->out + "/dq.npy", result.dq);
        core::write_npy(a->out + "/dk.npy", result.dk);
        core::write_npy(a->out + "/dv.npy", result.dv);
      }
      std::ofstream f(a->out + "/stats.json");
      f << stats.dump(2) << "\n";
      core::require(static_cast<bool>(f), "attention", "--out: failed writing ", a->out,
                    "/stats.json");
    }
    std::printf(
        "%s attention (%s), %s, mask %s: N = %lld, Hq = %lld, Hkv = %lld, D = %lld, world %d on %d "
        "node(s): %.3f s%s\n",
        spec.algo.name().c_str(), std::string(core::dtype_name(spec.precision)).c_str(),
        a->balance.c_str(), spec.mask->describe().c_str(), static_cast<long long>(n),
        static_cast<long long>(hq), static_cast<long long>(hkv), static_cast<long long>(d), world,
        nodes, seconds, backward ? " (forward + backward)" : "");
    for (const RankRecord& r : result.ranks) {
      std::printf("  rank %d (node %d): forward %s", r.rank, r.node,
                  r.forward_bytes.to_json().dump().c_str());
      if (backward) std::printf("  backward %s", r.backward_bytes.to_json().dump().c_str());
      std::printf("\n");
    }
    return 0;
  };
}

}  // namespace longseq::cli
