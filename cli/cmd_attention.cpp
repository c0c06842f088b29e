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
#include "longseq/model/attention_op.hpp"
#include "longseq/train/device.hpp"
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
  std::string device = rows::device.text;
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

// --device cuda: the whole sequence on one GPU (world 1), through the attention the trainer runs
// there (train::device_attention): the inputs cut into the layout's local order (padding rows
// zero) and copied to the device, --warmup untimed passes, the measured forward (+ backward),
// the results copied back to global order. The same files as a CPU run, so the two compare
// directly; no communication, so the byte counters are zero.
Outcome run_on_device(const AttentionArgs& a, const attention::GlobalInputs& in,
                      const attention::AttentionSpec& spec, attention::Balance balance,
                      core::Device device) {
  using namespace attention;
  const Layout layout(balance, in.n(), 1, spec.mask->block_size);
  const int64_t l = layout.local_len(), hq = in.hq(), hkv = in.hkv(), d = in.d();
  auto to_device = [&](const core::Tensor<float>& global, int64_t heads, const char* name) {
    core::Tensor<float> local(core::Shape{l, heads, d});
    layout.shard(global.data(), heads * d, 0, local.data());
    core::Tensor<float> dev(local.shape(), device, core::Uninit{}, name);
    core::copy_bytes(dev.data(), device, local.data(), core::Device::cpu(),
                     sizeof(float) * static_cast<size_t>(local.numel()));
    return dev;
  };
  auto to_global = [&](const core::Tensor<float>& dev, int64_t row) {
    core::Tensor<float> local(dev.shape());
    core::copy_bytes(local.data(), core::Device::cpu(), dev.data(), device,
                     sizeof(float) * static_cast<size_t>(dev.numel()));
    const core::Shape shape = dev.shape().rank() == 3 ? core::Shape{in.n(), dev.dim(1), dev.dim(2)}
                                                      : core::Shape{in.n(), dev.dim(1)};
    core::Tensor<float> global(shape);
    layout.unshard(local.data(), row, 0, global.data());
    return global;
  };
  Outcome out;
  out.world = 1;
  out.threads = 1;
  comm::Options one;
  one.world = 1;
  one.backend = "local";
  comm::run(one, [&](comm::Group& g) {
    auto op = train::device_attention(device, spec.algo, spec.mask, layout, g, 1, spec.precision,
                                      "attention");
    const core::Tensor<float> q = to_device(in.q, hq, "q"), k = to_device(in.k, hkv, "k"),
                              v = to_device(in.v, hkv, "v");
    core::Tensor<float> dout;
    if (in.backward()) dout = to_device(in.dout, hq, "dO");
    auto pass = [&](HarnessRun* keep) {
      const model::AttentionTimes t0 = op->times();
      AttentionSaved saved = op->forward(q.view(), k.view(), v.view());
      const model::AttentionTimes t1 = op->times();
      AttentionGrads grads;
      if (in.backward()) grads = op->backward(dout.view(), saved);
      const model::AttentionTimes t2 = op->times();
      if (!keep) return;
      RankRecord rr;
      rr.forward.compute_s = t1.compute_s - t0.compute_s;
      rr.backward.compute_s = t2.compute_s - t1.compute_s;
      keep->ranks = {rr};
      keep->o = to_global(saved.o, hq * d);
      keep->lse = to_global(saved.lse, hq);
      if (in.backward()) {
        keep->dq = to_global(grads.dq, hq * d);
        keep->dk = to_global(grads.dk, hkv * d);
        keep->dv = to_global(grads.dv, hkv * d);
      }
    };
    for (int i = 0; i < a.warmup; ++i) pass(nullptr);
    const core::Timer measured;
    pass(&out.run);
    out.seconds = measured.elapsed();
  });
  out.run.work = attention_work(*spec.mask, in.n(), in.hq(), in.d());
  out.have_rank0 = true;
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
          {"device", a.device},
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
  const core::Device device = core::Device::parse(a.device, "attention");
  if (!device.is_cpu()) {
    core::require(a.scale == 0, "attention", "--device ", a.device,
                  " takes the default scale 1/sqrt(D) only: drop --scale ", a.scale);
    // Ranks on a GPU are threads of one process sharing it (their transfers device-to-device
    // copies); the mpi backend moves host memory only.
    core::require(world == 1 || comm::resolve_backend(a.backend).name == "local", "attention",
                  "--device ", a.device, " at --world ", world,
                  " runs its ranks as threads of one process sharing the GPU: use --backend "
                  "local (got ",
                  comm::resolve_backend(a.backend).name, ")");
  }
  // One rank on a GPU: the trainer's whole-sequence attention; several: the executor there.
  if (!device.is_cpu() && world > 1) {
    spec.device = device;
    train::prepare_device_executor(device, "attention");
  }
  const Outcome r = device.is_cpu() || world > 1 ? run_ranks(a, in, spec, balance, cfg)
                                                 : run_on_device(a, in, spec, balance, device);
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
  add_row(app, rows::device, a->device);
  // Not a core row: the backends' names and help are the registry's (comm/backends.hpp), so a
  // new backend shows here without an edit.
  app.add_option("--backend", a->backend, comm::backend_help())->capture_default_str();
  app.add_option("--out", a->out, "output directory (o.npy, lse.npy, dq/dk/dv.npy, stats.json)");
  return [a] { return run_attention(*a); };
}

}  // namespace longseq::cli
