// `longseq attention`: distributed attention on .npy inputs (or seeded random ones), for users and
// for conformance checks with other tools. Inputs and outputs are in global token order.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "longseq/attention/distributed.hpp"
#include "longseq/attention/harness.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/npy.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/threads.hpp"
#include "longseq/core/timer.hpp"
#include "table_flags.hpp"

namespace longseq::cli {

namespace {

namespace rows = core::rows;

struct AttentionArgs {
  std::string q, k, v, dout;
  std::string random;  // N,Hq,Hkv,D
  uint64_t seed = 1;
  std::string mask = rows::mask.text;
  bool causal = false;
  std::string algo = rows::algo.text;
  int world = rows::world.number;  // not given: local 1, mpirun its -np (world_opt)
  int nodes = rows::nodes.number;  // not given: local 1, mpirun the hosts MPI reports
  std::string balance = rows::balance.text;
  double scale = 0;
  std::string link = rows::link.text;
  std::string out;
  int threads = rows::threads.number;
  int warmup = 0;  // untimed runs before the measured one
  std::string backend = comm::Options{}.backend;
  std::string precision = rows::precision.text;
  const CLI::Option* world_opt = nullptr;
  const CLI::Option* nodes_opt = nullptr;
};

// What rank 0 brings back from the run.
struct Outcome {
  attention::HarnessRun run;
  bool have_rank0 = false;
  int threads = 0, nodes = 1, world = 1;
  double seconds = 0;
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

// The inputs in global order, checked once (GlobalInputs::validate, naming the flags).
attention::GlobalInputs read_inputs(const AttentionArgs& a) {
  attention::GlobalInputs in;
  if (!a.random.empty()) {
    core::require(a.q.empty() && a.k.empty() && a.v.empty() && a.dout.empty(), "attention",
                  "--random replaces --q/--k/--v/--do");
    const auto d = parse_dims(a.random);
    return attention::GlobalInputs::random(d[0], d[1], d[2], d[3], a.seed);
  }
  core::require(!a.q.empty() && !a.k.empty() && !a.v.empty(), "attention",
                "needs --q, --k and --v (or --random N,Hq,Hkv,D)");
  in.q = core::read_npy_f32(a.q, 3, "--q");
  in.k = core::read_npy_f32(a.k, 3, "--k");
  in.v = core::read_npy_f32(a.v, 3, "--v");
  if (!a.dout.empty()) in.dout = core::read_npy_f32(a.dout, 3, "--do");
  in.validate("attention", {"--q", "--k", "--v", "--do"});
  return in;
}

// Flags that need no input; every process checks the same, so every process fails alike.
void check_flags(const AttentionArgs& a) {
  core::require(a.world >= 1, "attention", "--world ", a.world, " must be at least 1");
  core::require(a.nodes >= 1, "attention", "--nodes ", a.nodes, " must be at least 1");
  core::require(a.warmup >= 0, "attention", "--warmup ", a.warmup, " must be 0 or more");
  core::require(a.threads >= 0, "attention", "--threads ", a.threads,
                " must be at least 1 (or 0: hardware threads / ranks on the host)");
  core::require(a.scale >= 0, "attention", "--scale must be >= 0, got ", a.scale);
}

comm::Options comm_options(const AttentionArgs& a) {
  comm::Options cfg;
  cfg.backend = a.backend;
  cfg.world = a.world_opt->count() > 0 ? a.world : 0;  // 0: mpirun's -np (or 1)
  cfg.nodes = a.nodes_opt->count() > 0 ? a.nodes : 0;  // 0: the hosts MPI reports (or 1)
  // Under mpirun a failed rank ends the job instead of leaving peers waiting.
  cfg.abort_on_failure = true;
  cfg.link = comm::LinkModel::parse(a.link);
  return cfg;
}

// Runs --warmup untimed passes and the measured one on every rank; rank 0's result comes back.
Outcome run_ranks(const AttentionArgs& a, const attention::GlobalInputs& in,
                  const attention::AttentionSpec& spec, attention::Balance balance,
                  const comm::Options& cfg) {
  using namespace attention;
  Outcome out;
  const core::Timer wall;
  core::Timer measured;
  double measured_s = 0.0;
  comm::run(cfg, [&](comm::Group& g) {
    const Layout layout(balance, in.n(), g.size(), spec.mask->block_size);
    // The local backend runs every rank here; under mpirun the ranks split evenly over the hosts.
    AttentionSpec rank_spec = spec;
    rank_spec.threads =
        core::default_threads(a.threads, g.size() / std::max(1, g.topology().num_nodes()));
    for (int i = 0; i < a.warmup; ++i) (void)run_harness(in, rank_spec, layout, g);
    // With warm-up runs, the time is the measured run's alone, from when every rank has
    // finished warming up (the barrier) to rank 0's end.
    if (a.warmup > 0) {
      g.barrier();
      if (g.rank() == 0) measured.restart();
    }
    HarnessRun run = run_harness(in, rank_spec, layout, g);
    if (g.rank() != 0) return;  // local backend: the calling thread; MPI: one process of the job
    if (a.warmup > 0) measured_s = measured.elapsed();
    out.run = std::move(run);
    out.threads = rank_spec.threads;
    out.nodes = g.topology().num_nodes();
    out.world = g.size();
    out.have_rank0 = true;
  });
  out.seconds = a.warmup > 0 ? measured_s : wall.elapsed();
  return out;
}

nlohmann::json stats_json(const AttentionArgs& a, const attention::AttentionSpec& spec,
                          const attention::GlobalInputs& in, const Outcome& r) {
  const bool backward = in.backward();
  nlohmann::json ranks = nlohmann::json::array();
  for (const attention::RankRecord& rr : r.run.ranks) ranks.push_back(rr.to_json(backward));
  return {{"algo", spec.algo.name()},
          {"balance", a.balance},
          {"mask", spec.mask->describe()},
          {"n", in.n()},
          {"hq", in.hq()},
          {"hkv", in.hkv()},
          {"d", in.d()},
          {"world", r.world},
          {"threads_per_rank", r.threads},
          {"nodes", r.nodes},
          {"backend", std::string(comm::resolve_backend(a.backend).name)},
          {"precision", std::string(core::dtype_name(spec.precision))},
          {"seconds", r.seconds},
          {"visible_pairs", r.run.work.visible_pairs},
          {"forward_flops", r.run.work.forward_flops},
          {"backward_flops", backward ? r.run.work.backward_flops : 0.0},
          {"bytes_sent_intra", r.run.bytes_sent_intra()},
          {"bytes_sent_inter", r.run.bytes_sent_inter()},
          {"ranks", ranks}};
}

void write_outputs(const std::string& dir, const Outcome& r, bool backward,
                   const nlohmann::json& stats) {
  std::filesystem::create_directories(dir);
  core::write_npy(dir + "/o.npy", r.run.o);
  core::write_npy(dir + "/lse.npy", r.run.lse);
  if (backward) {
    core::write_npy(dir + "/dq.npy", r.run.dq);
    core::write_npy(dir + "/dk.npy", r.run.dk);
    core::write_npy(dir + "/dv.npy", r.run.dv);
  }
  std::ofstream f(dir + "/stats.json");
  f << stats.dump(2) << "\n";
  core::require(static_cast<bool>(f), "attention", "--out: failed writing ", dir, "/stats.json");
}

void print_summary(const AttentionArgs& a, const attention::AttentionSpec& spec,
                   const attention::GlobalInputs& in, const Outcome& r) {
  const bool backward = in.backward();
  std::printf(
      "%s attention (%s), %s, mask %s: N = %lld, Hq = %lld, Hkv = %lld, D = %lld, world %d on %d "
      "node(s): %.3f s%s\n",
      spec.algo.name().c_str(), std::string(core::dtype_name(spec.precision)).c_str(),
      a.balance.c_str(), spec.mask->describe().c_str(), static_cast<long long>(in.n()),
      static_cast<long long>(in.hq()), static_cast<long long>(in.hkv()),
      static_cast<long long>(in.d()), r.world, r.nodes, r.seconds,
      backward ? " (forward + backward)" : "");
  for (const attention::RankRecord& rr : r.run.ranks) {
    std::printf("  rank %d (node %d): forward %s", rr.rank, rr.node,
                rr.forward_bytes.to_json().dump().c_str());
    if (backward) std::printf("  backward %s", rr.backward_bytes.to_json().dump().c_str());
    std::printf("\n");
  }
}

int run_attention(const AttentionArgs& a) {
  using namespace attention;
  check_flags(a);
  AttentionSpec spec;
  spec.precision = core::parse_precision(a.precision, "attention");
  const GlobalInputs in = read_inputs(a);
  spec.algo = Algorithm::parse(a.algo);
  spec.mask = std::make_shared<MaskSpec>(MaskSpec::parse(a.mask, a.causal, in.n()));
  spec.scale = a.scale;
  const Balance balance = parse_balance(a.balance);
  if (balance == Balance::block_striped)
    core::require(!spec.mask->block_mask.empty(), "attention",
                  "--balance block-striped needs a blocks:FILE:B mask");
  const comm::Options cfg = comm_options(a);
  const int world = comm::world_size(cfg);
  const int nodes_flag = cfg.nodes == 0 ? 1 : cfg.nodes;
  core::require(world % nodes_flag == 0, "attention", "--nodes ", nodes_flag,
                " must divide the world of ", world, " ranks");
  // Refuse a layout that cannot exist before any rank starts (a clear message, once per process).
  (void)Layout(balance, in.n(), world, spec.mask->block_size);
  const Outcome r = run_ranks(a, in, spec, balance, cfg);
  // Another process of the mpirun job writes and prints: the one holding rank 0 of the MPI
  // world, or, with --backend local under mpirun (every process runs the same threads), the
  // launcher's rank 0.
  const bool local_copy =
      comm::resolve_backend(a.backend).name == "local" && comm::launcher_rank() != 0;
  if (!r.have_rank0 || local_copy) return 0;
  const nlohmann::json stats = stats_json(a, spec, in, r);
  if (!a.out.empty()) write_outputs(a.out, r, in.backward(), stats);
  print_summary(a, spec, in, r);
  return 0;
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
  add_row(app, rows::mask, a->mask);
  app.add_flag("--causal", a->causal, "add causality (e.g. to a block mask)");
  add_row(app, rows::algo, a->algo);
  a->world_opt = add_row(app, rows::world, a->world);
  a->nodes_opt = add_row(app, rows::nodes, a->nodes);
  add_row(app, rows::balance, a->balance);
  app.add_option("--scale", a->scale, "softmax scale (0 = 1/sqrt(D))");
  add_row(app, rows::link, a->link);
  add_row(app, rows::threads, a->threads);
  app.add_option("--warmup", a->warmup,
                 "untimed runs of the same work before the measured one (primes the GEMM "
                 "library's per-shape kernels and first-touch memory); outputs, stats.json and "
                 "the time are the measured run's");
  add_row(app, rows::precision, a->precision);
  // Not a core row: the backends' names and help are the registry's (comm/backends.hpp), so a
  // new backend shows here without an edit.
  app.add_option("--backend", a->backend, comm::backend_help())->capture_default_str();
  app.add_option("--out", a->out, "output directory (o.npy, lse.npy, dq/dk/dv.npy, stats.json)");
  return [a] { return run_attention(*a); };
}

}  // namespace longseq::cli
