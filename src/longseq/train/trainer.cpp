// train(): setup, checkpointing and the loop (the units of train/run.hpp; one step is step.cpp,
// metrics are metrics.cpp).
#include "longseq/train/trainer.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>

#include "longseq/comm/launch.hpp"
#include "longseq/core/checksum.hpp"
#include "longseq/core/cpu.hpp"
#include "longseq/core/data_path.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/io.hpp"
#include "longseq/core/threads.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/kernels/gemm.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/device.hpp"
#include "longseq/train/run.hpp"

namespace longseq::train {

using nlohmann::json;

// ---- data --------------------------------------------------------------------------------------

TokenFile load_training_data(const std::string& requested) {
  // "data/..." defaults resolve against the shipped data when run outside the repository.
  const std::string path = core::resolve_data_file(requested);
  if (path.size() > 4 && path.substr(path.size() - 4) == ".txt") {
    TokenFile f;
    f.tokens = byte_tokenize({core::read_file(path)});
    f.vocab = kByteVocab;
    f.eot = kByteEot;
    f.path = path;
    return f;
  }
  return read_token_file(path);
}

// ---- measurements ------------------------------------------------------------------------------

double measure_peak_gflops(core::DType precision) {
  return kernels::single_thread_gemm_flops(precision) * 1e-9 * core::hardware_threads();
}

// ---- setup -------------------------------------------------------------------------------------

namespace {

// The parsed configuration; validated before anything is loaded.
ParsedConfig parsed_config(const TrainConfig& cfg) {
  return cfg.parse();
}

TokenFile checked_data(const TrainConfig& cfg) {
  TokenFile data = load_training_data(cfg.data);
  core::require(data.vocab <= cfg.model.vocab, "train", "--data ", cfg.data, " has vocabulary ",
                data.vocab, ", larger than the model's ", cfg.model.vocab, " (set --vocab)");
  return data;
}

int threads_per_rank(const TrainConfig& cfg) {
  return core::default_threads(cfg.threads, cfg.world);
}

model::ModelOptions model_options(const TrainConfig& cfg, const ParsedConfig& p, int threads) {
  model::ModelOptions mo;
  mo.policy = p.checkpoint;
  mo.fused_loss = p.fused_loss;
  mo.ffn_chunk = cfg.ffn_chunk;
  mo.lm.token_tile = cfg.lm_tile;
  mo.threads = threads;
  mo.precision = p.precision;
  mo.seq_selective_fraction = cfg.seq_selective_fraction;
  mo.offload = cfg.offload;
  return mo;
}

json config_block(const RunSetup& s) {
  json config = s.cfg.to_json();
  config["parameters"] = s.layout.num_parameters();
  config["matmul_parameters"] = s.layout.matmul_parameters();
  config["threads_per_rank"] = s.threads;
  config["gemm_library"] = kernels::gemm_library();
  // Where the numbers came from: the CPU, the kernel variant (LONGSEQ_ISA may force a lower one)
  // and whether bf16 products were native or widened to fp32 (design.md §10).
  config["cpu"] = core::cpu_features().brand;
  config["cpu_features"] = core::cpu_features().list();
  config["kernel_isa"] = core::isa_name(core::active_isa());
  config["gemm_isa"] = kernels::gemm_isa();
  config["bf16"] = core::bf16_mode();
  config["peak_gflops_measured"] = s.peak_gflops;
  if (!s.parsed.device.is_cpu()) config["gpu"] = device_name(s.parsed.device);
  config["mfu_formula"] =
      "(6 * matmul_parameters * dp * grad_accum * seq + 12 * layers * heads * head_dim * "
      "visible_pairs * dp * grad_accum) / "
      "(step_seconds * peak); peak = " +
      device_peak_formula(s.parsed.device) + "; recomputation not counted";
  return config;
}

}  // namespace

RunSetup::RunSetup(const TrainConfig& c)
    : cfg(c),
      parsed(parsed_config(cfg)),
      data(checked_data(cfg)),
      loader(data, cfg.seq),
      layout(cfg.model_config()),
      seq_layout(parsed.balance, cfg.seq, cfg.cp(), parsed.mask.block()),
      threads(threads_per_rank(cfg)),
      options(model_options(cfg, parsed, threads)),
      peak_gflops(device_peak_gflops(parsed.device, parsed.precision)),
      config(config_block(*this)),
      end(cfg.stop_after > 0 ? std::min(cfg.steps, cfg.stop_after) : cfg.steps) {
  if (!cfg.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cfg.out, ec);
    core::require(!ec, "train", "--out ", cfg.out, ": cannot create: ", ec.message());
  }
}

RankRun::RankRun(const RunSetup& setup, comm::Group& w)
    : s(setup),
      world(w),
      replica(w.rank() / setup.cfg.cp()),
      ctx(w.split(replica, w.rank())),
      writer(w.rank() == 0),
      state(setup.layout, w, setup.cfg.seed),
      progress(setup.end, writer && !setup.cfg.quiet && Progress::stdout_is_terminal()) {
  state.set_gather_dtype(setup.parsed.precision);
  kernels = device_kernels(setup.parsed.device, setup.threads);
  if (!setup.parsed.device.is_cpu()) attach_device_state(*this, setup.parsed.device);
  base_mask = setup.parsed.mask.base;
}

// Above world 1 (ranks sharing a GPU, threads of the local backend) every rank's device holds
// the whole model, as data parallelism does: each rank's backward adds its tokens' gradient into
// its replica, run_step sums the replicas' gradients over the world (device_all_reduce), and
// every replica takes the same clipped AdamW step, so they stay equal. The host's shards (what
// checkpoints hold) are each rank's slice of it.
void attach_device_state(RankRun& run, core::Device device) {
  const model::ParamLayout& layout = run.s.layout;
  run.mirror = std::make_unique<model::DeviceReplica>(layout, device, run.s.cfg.seed);
  // The weight-decay mask in the replica's layout, unit by unit (the shards' rule).
  std::vector<uint8_t> decay(static_cast<size_t>(run.mirror->total()), 0);
  for (int u = 0; u < layout.num_units(); ++u) {
    const std::vector<uint8_t> m = unit_decay_mask(layout, u, layout.units()[u].size);
    std::copy(m.begin(), m.end(), decay.begin() + run.mirror->offset(u));
  }
  run.optimizer = std::make_unique<DeviceOptimizer>(*run.mirror, decay);
  prepare_device_executor(device, "train");  // device_all_reduce runs on it above world 1
  sync_to_device(run);
}

void sync_to_device(RankRun& run) {
  if (!run.mirror) return;
  // At world 1 a unit's shard is the whole unit: copied directly, without a full copy on the host
  // (1 GiB for LLaMA-1B's embedding).
  const bool whole = run.world.size() == 1;
  for (int u = 0; u < run.s.layout.num_units(); ++u) {
    if (whole) {
      run.mirror->upload(u, run.state.param_shard(u));
      run.optimizer->from_host(u, 1, run.state.m_shard(u));
      run.optimizer->from_host(u, 2, run.state.v_shard(u));
      continue;
    }
    run.mirror->upload(u, run.state.gather_full(u, 0).data());
    run.optimizer->from_host(u, 1, run.state.gather_full(u, 1).data());
    run.optimizer->from_host(u, 2, run.state.gather_full(u, 2).data());
  }
}

void sync_from_device(RankRun& run) {
  if (!run.mirror) return;
  const bool whole = run.world.size() == 1;  // as in sync_to_device
  std::vector<float> full;
  for (int u = 0; u < run.s.layout.num_units(); ++u) {
    if (whole) {
      run.mirror->unit_to_host(run.mirror->params(), u, run.state.param_shard(u));
      run.optimizer->to_host(u, 1, run.state.m_shard(u));
      run.optimizer->to_host(u, 2, run.state.v_shard(u));
      continue;
    }
    full.resize(static_cast<size_t>(run.s.layout.units()[u].size));
    run.mirror->unit_to_host(run.mirror->params(), u, full.data());
    run.state.load_full(u, 0, full.data());
    for (int which : {1, 2}) {
      run.optimizer->to_host(u, which, full.data());
      run.state.load_full(u, which, full.data());
    }
  }
}

// ---- checkpointing -----------------------------------------------------------------------------

namespace {

// The records of the steps before `step` that a checkpoint carries (trainer_state.json's
// "log_history", as Hugging Face's Trainer names it), checked: strictly increasing steps in
// [0, step), so that each step is in metrics.json exactly once however often the run was
// interrupted. A checkpoint written before the history was recorded has none: an empty history.
std::vector<StepRecord> history_of(const json& ts, int64_t step, const std::string& where) {
  std::vector<StepRecord> h;
  if (!ts.contains("log_history")) return h;
  const json& a = ts["log_history"];
  core::require(a.is_array(), "train", where, ": log_history is ", a.type_name(),
                ", expected an array of step records");
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string at = core::cat(where, ": log_history[", i, "]");
    h.push_back(record_from_json(a[i], at));
    const int64_t s = h.back().step;
    const int64_t lo = h.size() > 1 ? h[h.size() - 2].step + 1 : 0;
    core::require(s >= lo && s < step, "train", at, ": step ", s, " out of range [", lo, ", ", step,
                  ") (each step once, in order, before the checkpoint's step ", step, ")");
  }
  return h;
}

// The identity of the training data: its token count and the CRC-32C of the tokens as read
// (uint32 each). The order of sequences is a function of the file, so a resume on other data (a
// file truncated or regenerated since) would silently train on another sequence order.
json data_identity(const TokenFile& f) {
  return {{"tokens", f.tokens.size()},
          {"crc32c",
           core::crc32c_hex(core::crc32c(f.tokens.data(), f.tokens.size() * sizeof(uint32_t)))}};
}

// --resume: the data must be what the checkpoint was trained on (checkpoints written before the
// identity was recorded are not checked).
void check_same_data(const json& ts, const RunSetup& s, const std::string& where) {
  if (!ts.contains("data") || !ts["data"].is_object() || !ts["data"].contains("identity")) return;
  const json have = data_identity(s.data), want = ts["data"]["identity"];
  core::require(have == want, "train", where, ": --data ", s.data.path,
                " is not the data the "
                "checkpoint was trained on (",
                want.dump(), " then, ", have.dump(),
                " now): a changed or truncated file would change the sequence order");
}

}  // namespace

int64_t restore(RankRun& run) {
  const TrainConfig& cfg = run.s.cfg;
  if (!cfg.init_from.empty()) load_hf_weights(cfg.init_from, run.state);
  if (cfg.resume.empty()) {
    sync_to_device(run);  // --init-from's weights, or nothing new
    return 0;
  }
  const json ts = load_checkpoint(cfg.resume, run.state);
  core::require(ts.at("seed").get<uint64_t>() == cfg.seed, "train", "--resume ", cfg.resume,
                ": checkpoint seed ", ts.at("seed").get<uint64_t>(), " differs from --seed ",
                cfg.seed);
  const int64_t step = ts.at("step").get<int64_t>();
  check_same_data(ts, run.s, "--resume " + cfg.resume);
  run.records = history_of(ts, step, "--resume " + cfg.resume + ": trainer_state.json");
  sync_to_device(run);
  return step;
}

void save_if_due(RankRun& run, int64_t step, bool stopping) {
  const TrainConfig& cfg = run.s.cfg;
  // A stop by SIGINT / SIGTERM ends the run early: saved like its last step.
  const bool last = step + 1 == run.s.end || stopping;
  const bool due = !cfg.out.empty() && cfg.save_every >= 0 &&
                   (last || (cfg.save_every > 0 && (step + 1) % cfg.save_every == 0));
  if (!due) return;
  json ts = {
      {"step", step + 1},
      {"seed", cfg.seed},
      {"data",
       {{"file", cfg.data},
        {"next_step", step + 1},
        {"sequences", run.s.loader.num_sequences()},
        {"identity", data_identity(run.s.data)},
        {"order", "sequence ((step * grad_accum + micro-batch) * dp + replica) mod sequences"}}},
      {"rng",
       {{"kind", "counter-based (core/rng.hpp); initialisation stream derive_seed(seed, unit)"},
        {"seed", cfg.seed}}},
      {"config", run.s.config}};
  // Every step so far (with the history restored at --resume): a run resumed from this
  // checkpoint writes the whole run's metrics.json, not only the steps after the resume.
  json history = json::array();
  for (const StepRecord& r : run.records) history.push_back(record_json(r));
  ts["log_history"] = std::move(history);
  sync_from_device(run);  // the device's parameters and moments are what is saved
  save_checkpoint(cfg.out, run.state, ts, run.writer);
}

// ---- the loop ----------------------------------------------------------------------------------

namespace {

// SIGINT / SIGTERM: the handler only records the signal; the loop looks at it between steps
// (stop_signal), so a step and a checkpoint being written always complete, and every rank stops
// after the same step. docs/reliability.md states the semantics and the exit status.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler stores into it");

extern "C" void record_stop_signal(int sig) {
  g_stop_signal.store(sig);
}

// Installs the handlers for one train() call and restores the previous ones after it (train() is
// a library call; a program embedding it keeps its own handlers outside the run). SA_RESETHAND:
// a second signal takes the default action, so an impatient second Ctrl-C still ends the process
// at once.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    struct sigaction sa = {};
    sa.sa_handler = record_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ = {}, old_term_ = {};
};

// Collective: the signal any rank of the world has received (0: none). Under mpirun each process
// has its own handler and signals may reach the processes at different steps; the maximum makes
// every rank stop after the same step.
int stop_signal(RankRun& run) {
  int32_t sig = g_stop_signal.load();
  run.world.all_reduce(&sig, &sig, 1, core::DType::i32, comm::ReduceOp::max);
  return sig;
}

// What the writer rank hands back from inside comm::run.
struct RunOutput {
  std::vector<StepRecord> records;
  int64_t first_step = 0;
  std::vector<float> params, grads;
  int stop_signal = 0;
};

void run_rank(const RunSetup& setup, comm::Group& world, RunOutput& out) {
  RankRun run(setup, world);
  const int64_t start = restore(run);
  const size_t restored = run.records.size();  // the history a --resume checkpoint carried
  if (run.writer && !setup.cfg.quiet) {
    // Where the step times below come from (design.md §10): a forced variant or emulated bf16
    // explains a slow run before anyone reads the per-op account.
    const json& c = setup.config;
    std::printf(
        "  %d ranks x %d threads on %s: kernels %s, gemm %s (%s), bf16 %s; peak %.0f "
        "GFLOP/s %s\n",
        setup.cfg.world, setup.threads, c["cpu"].get<std::string>().c_str(),
        c["kernel_isa"].get<std::string>().c_str(), c["gemm_library"].get<std::string>().c_str(),
        c["gemm_isa"].get<std::string>().c_str(), c["bf16"].get<std::string>().c_str(),
        setup.peak_gflops, std::string(core::dtype_name(setup.parsed.precision)).c_str());
    if (!setup.parsed.device.is_cpu())
      std::printf("  model on %s (%s): peak %.0f GFLOP/s %s\n", setup.cfg.device.c_str(),
                  c["gpu"].get<std::string>().c_str(), setup.peak_gflops,
                  std::string(core::dtype_name(setup.parsed.precision)).c_str());
    std::fflush(stdout);
  }
  for (int64_t step = start; step < setup.end; ++step) {
    const StepResult res = run_step(run, step);
    const StepRecord rec = measure(run, res);
    run.records.push_back(rec);
    report(run, rec);
    const int sig = stop_signal(run);
    save_if_due(run, step, sig != 0);
    if (sig != 0) {
      if (run.writer) out.stop_signal = sig;
      break;
    }
  }
  run.progress.finish();
  std::vector<float> params;
  sync_from_device(run);
  if (setup.cfg.keep_params) params = gather_all(run, false);
  if (!run.writer) return;
  out.records.assign(run.records.begin() + static_cast<std::ptrdiff_t>(restored),
                     run.records.end());
  out.first_step = start;
  out.params = std::move(params);
  out.grads = std::move(run.final_grads);
}

comm::Options comm_options(const RunSetup& s) {
  comm::Options opt;
  opt.backend = "any";
  opt.world = s.cfg.world;
  // Under mpirun the default --nodes 1 takes the hosts MPI reports (0: real topology), so a
  // multi-host job splits its double ring and counts inter-node bytes by the real hosts; any
  // other value declares that many nodes, as with the local backend.
  opt.nodes = s.cfg.nodes == 1 && comm::launched_by_mpirun() ? 0 : s.cfg.nodes;
  opt.link = s.parsed.link;
  opt.abort_on_failure = s.cfg.abort_on_failure;
  return opt;
}

}  // namespace

TrainSummary train(const TrainConfig& cfg) {
  const StopSignals signals;
  const RunSetup setup(cfg);
  RunOutput out;
  comm::run(comm_options(setup), [&](comm::Group& world) { run_rank(setup, world, out); });
  TrainSummary summary;
  summary.steps = std::move(out.records);
  summary.first_step = out.first_step;
  summary.peak_gflops = setup.peak_gflops;
  summary.params = std::move(out.params);
  summary.grads = std::move(out.grads);
  summary.stop_signal = out.stop_signal;
  return summary;
}

}  // namespace longseq::train
