// `longseq plan`: ranks every configuration of a long-sequence training job by predicted step time
// on a modelled cluster (src/longseq/plan/planner.hpp; the model is described in docs/planner.md).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "longseq/core/error.hpp"
#include "longseq/plan/host_plan.hpp"
#include "longseq/plan/planner.hpp"
#include "table_flags.hpp"

namespace longseq::cli {

namespace {

struct PlanArgs {
  std::string model = "llama-7b";
  std::string seq = "1M";
  int gpus = 32;
  int gpus_per_node = 8;
  std::string hardware = "a800";
  double memory_limit_gib = 0;
  std::string mask = core::rows::mask.text;
  std::string balance = core::rows::balance.text;
  std::string algo;        // comma list
  std::string checkpoint;  // comma list
  std::string loss;        // comma list
  double seq_selective_fraction = 0.5;
  bool explain = false;
  bool json = false;
  int top = 20;
  std::string timeline;
  // --train: the host trainer's memory (plan_host.hpp)
  std::string train;
  int64_t ffn_chunk = -1, data_tokens = -1;
  bool longest = false;
  std::string device = core::rows::device.text;  // with --train: also the GPU run's memory
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string gib(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", b / (1 << 30));
  return buf;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  core::require(static_cast<bool>(out), "plan", "--timeline: cannot write ", path);
  out << text;
  core::require(static_cast<bool>(out), "plan", "--timeline: failed writing ", path);
}

std::string safe_name(std::string s) {
  for (char& c : s)
    if (c == ':') c = '_';
  return s;
}

double mib(double b) {
  return b / (1 << 20);
}

void print_host(const PlanArgs& a, const plan::HostPlan& r) {
  const train::TrainConfig& c = r.config;
  std::printf(
      "plan --train %s: peak RSS of `longseq train` on this host (%d ranks as threads of one "
      "process), %s, N = %lld, algo %s, balance %s, mask %s, loss %s, ffn chunk %lld, "
      "data %lld tokens; limit %.2f GiB%s\n",
      a.train.c_str(), c.world, c.model.describe().c_str(), static_cast<long long>(c.seq),
      c.algo.c_str(), c.balance.c_str(), r.mask.c_str(), c.loss.c_str(),
      static_cast<long long>(c.ffn_chunk), static_cast<long long>(r.data_tokens),
      r.limit_bytes / (1 << 30), r.limit_given ? " (--memory-limit)" : " (MemTotal)");
  const plan::DevicePlan* d = r.device ? &*r.device : nullptr;
  if (d) {
    std::printf(
        "GPU run (train --device %s, world 1): peak device memory as the trainer's "
        "device_peak_mib counts it (its allocator; not the CUDA context, cuBLASLt workspace or "
        "RoPE table); %s\n",
        d->device.c_str(),
        d->limit_bytes > 0 ? core::cat("profile ", d->hardware, ": ", d->gpu, ", ",
                                       d->limit_bytes / (1 << 30), " GiB")
                                 .c_str()
                           : "no GPU profile (--hardware): no limit");
    if (d->gemm_flops > 0)
      std::printf(
          "  step >= %.3g s: %.4g model FLOPs at the profile's %s GEMM rate %.4g TFLOP/s "
          "(recomputation not counted)\n",
          d->step_seconds_bound(), d->step_flops, c.precision.c_str(), d->gemm_flops / 1e12);
  }
  std::printf("%-14s %12s %10s  %-4s", "checkpoint", "peak MiB", "phase", "fits");
  if (d) std::printf(" %12s  %-22s %s", "GPU MiB", "GPU phase", "fits GPU");
  std::printf("\n");
  for (size_t i = 0; i < r.policies.size(); ++i) {
    std::printf("%-14s %12.1f %10s  %-4s", r.policies[i].c_str(), mib(r.memory[i].total()),
                r.memory[i].phase.c_str(), r.memory[i].total() <= r.limit_bytes ? "yes" : "no");
    if (d) {
      const plan::DeviceTrainerMemory& g = d->memory[i];
      std::printf(" %12.1f  %-22s %s", mib(g.peak), g.phase.c_str(),
                  d->limit_bytes <= 0        ? "?"
                  : g.peak <= d->limit_bytes ? "yes"
                                             : "no");
    }
    std::printf("\n");
  }
  if (a.explain)
    for (size_t i = 0; i < r.policies.size(); ++i) {
      const plan::HostTrainerMemory& m = r.memory[i];
      std::printf("\n%s: peak in the %s phase\n", r.policies[i].c_str(), m.phase.c_str());
      std::printf("  %-64s %10.1f MiB\n", "baseline (binary, libraries, runtime; measured)",
                  mib(m.baseline));
      std::printf("  %-64s %10.1f MiB\n", "token file (uint32 per token)", mib(m.data));
      std::printf("  %-64s %10.1f MiB\n", "ZeRO-3 state, all ranks (params, grads, m, v, decay)",
                  mib(m.state));
      for (const auto& [name, bytes] : m.items)
        std::printf("  %d x %-60s %10.1f MiB\n", m.ranks, name.c_str(), mib(bytes * m.ranks));
      std::printf("  %-64s %10.1f MiB\n", "total", mib(m.total()));
      if (d) {
        const plan::DeviceTrainerMemory& g = d->memory[i];
        std::printf("  GPU (%s), peak at %s:\n", d->device.c_str(), g.phase.c_str());
        for (const auto& [name, bytes] : g.items)
          std::printf("    %-62s %10.1f MiB\n", name.c_str(), mib(bytes));
        std::printf("    %-62s %10.1f MiB\n", "total", mib(g.peak));
      }
    }
  if (!a.longest) return;
  std::printf("\nlongest N within %.2f GiB (multiples of %lld tokens):\n",
              r.limit_bytes / (1 << 30), static_cast<long long>(r.longest_step));
  for (const plan::Longest& l : r.longest)
    std::printf("  %-14s N = %9lld  (%.1f MiB predicted)\n", l.checkpoint.c_str(),
                static_cast<long long>(l.seq), mib(l.predicted_bytes));
}

// `plan --train`: the host trainer's peak RSS (plan/host_plan.hpp), printed.
int run_host(const PlanArgs& a, const CLI::App& app) {
  plan::HostPlanRequest h;
  h.preset = a.train;
  auto given = [&](const char* flag) { return app.get_option(flag)->count() > 0; };
  if (given("--seq")) h.seq = plan::parse_count(a.seq, "--seq");
  if (given("--gpus")) h.world = a.gpus;
  if (given("--mask")) h.mask = a.mask;
  h.algo = a.algo;
  if (given("--balance")) h.balance = a.balance;
  h.loss = a.loss;
  h.checkpoints = split_list(a.checkpoint);
  h.ffn_chunk = a.ffn_chunk;
  h.data_tokens = a.data_tokens;
  h.memory_limit_gib = a.memory_limit_gib;
  h.longest = a.longest;
  h.device = a.device;
  if (given("--hardware")) h.hardware = a.hardware;
  const plan::HostPlan r = plan::host_plan(h);
  if (a.json) {
    std::printf("%s\n", r.to_json(a.train).dump(1).c_str());
    return 0;
  }
  print_host(a, r);
  return 0;
}

plan::PlanOptions plan_options(const PlanArgs& a) {
  using namespace plan;
  PlanOptions o;
  o.model = load_model(a.model);
  o.seq = parse_count(a.seq, "--seq");
  o.gpus = a.gpus;
  o.gpus_per_node = a.gpus_per_node;
  o.hw = load_hardware(a.hardware);
  if (o.hw.host_cores > 0)
    if (const std::string m = host_profile_mismatch(a.hardware); !m.empty())
      std::fprintf(stderr, "[plan] warning: %s\n", m.c_str());
  core::require(a.memory_limit_gib >= 0, "plan", "--memory-limit ", a.memory_limit_gib,
                " must be >= 0");
  o.memory_limit_bytes = a.memory_limit_gib * (1 << 30);
  o.mask = attention::MaskSpec::parse(a.mask, false, o.seq);
  o.balance = attention::parse_balance(a.balance);
  o.seq_selective_fraction = a.seq_selective_fraction;
  o.algos = split_list(a.algo);
  for (const auto& c : split_list(a.checkpoint))
    o.checkpoints.push_back(model::parse_checkpoint_policy(c));
  for (const auto& l : split_list(a.loss)) o.losses.push_back(model::parse_loss_mode(l));
  o.validate();
  return o;
}

void print_ranking(const PlanArgs& a, const plan::PlanOptions& o,
                   const std::vector<plan::Evaluation>& evals) {
  using namespace plan;
  if (a.json) {
    std::fputs(plan_json(evals).c_str(), stdout);
  } else {
    std::printf("plan: %s, N = %lld, %d GPUs (%d per node), hardware %s, mask %s, %s balance\n",
                o.model.name.c_str(), static_cast<long long>(o.seq), o.gpus, o.gpus_per_node,
                o.hw.name.c_str(), o.mask.describe().c_str(), a.balance.c_str());
    std::printf("%-4s %-22s %-14s %-8s %10s %9s %6s %9s %10s %10s  %s\n", "#", "algo", "checkpoint",
                "loss", "step [s]", "TGS", "MFU", "mem GiB", "intra GiB", "inter GiB", "model");
    int shown = 0, feasible = 0;
    for (const Evaluation& e : evals) {
      if (!e.feasible) continue;
      ++feasible;
      if (a.top > 0 && shown >= a.top) continue;
      ++shown;
      // Every algorithm is costed by replaying its schedule: the "model" column says so.
      std::printf("%-4d %-22s %-14s %-8s %10.4g %9.2f %5.1f%% %9s %10s %10s  schedule\n", shown,
                  e.config.algo.name().c_str(),
                  std::string(model::checkpoint_policy_name(e.config.checkpoint)).c_str(),
                  std::string(model::loss_mode_name(e.config.loss)).c_str(), e.step_seconds,
                  e.tokens_per_sec_per_gpu, 100 * e.mfu, gib(e.memory.total()).c_str(),
                  gib(e.comm_bytes_intra).c_str(), gib(e.comm_bytes_inter).c_str());
    }
    if (feasible > shown)
      std::printf("     ... %d more feasible (--top 0 lists all)\n", feasible - shown);
    std::printf("\ninfeasible:\n");
    for (const Evaluation& e : evals)
      if (!e.feasible)
        std::printf("  %-22s %-14s %-8s %s\n", e.config.algo.name().c_str(),
                    std::string(model::checkpoint_policy_name(e.config.checkpoint)).c_str(),
                    std::string(model::loss_mode_name(e.config.loss)).c_str(), e.reason.c_str());
  }
}

// --explain: every term of the winner's step time, the profile's corrections, its memory.
void print_explain(FILE* out, const plan::PlanOptions& o, const plan::Evaluation& b) {
  using namespace plan;
  std::fprintf(out, "\nwinner: %s, checkpoint %s, loss %s\n", b.config.algo.name().c_str(),
               std::string(model::checkpoint_policy_name(b.config.checkpoint)).c_str(),
               std::string(model::loss_mode_name(b.config.loss)).c_str());
  std::fprintf(out,
               "  hardware %s: peak %.4g FLOP/s; intra alpha %.3g s beta %.4g B/s; inter alpha "
               "%.3g s beta %.4g B/s per GPU\n",
               o.hw.name.c_str(), o.hw.peak_flops, o.hw.intra.latency_s, o.hw.intra.bandwidth_Bps,
               o.hw.inter.latency_s, o.hw.inter.bandwidth_Bps);
  std::fprintf(out,
               "  empirical corrections (%s): GEMM %.2f, attention fwd %.2f, bwd %.2f, "
               "collectives %.2f\n",
               o.hw.corrections.source.c_str(), o.hw.corrections.gemm_efficiency,
               o.hw.corrections.attention_fwd_efficiency, o.hw.corrections.attention_bwd_efficiency,
               o.hw.corrections.collective_efficiency);
  if (o.hw.attention_curve.enabled()) {
    // The curve replaces the constant attention efficiencies per kernel call (hardware.hpp).
    std::fprintf(out, "  measured attention efficiency by block length (%s):",
                 o.hw.attention_curve.source.c_str());
    for (const auto& pt : o.hw.attention_curve.points)
      std::fprintf(out, " %.0f: %.3f/%.3f", pt.tokens, pt.fwd, pt.bwd);
    std::fprintf(out, " (tokens: fwd/bwd); it replaces the constants above per kernel call\n");
  }
  if (o.hw.tiles.enabled())
    std::fprintf(out,
                 "  empirical corrections: partial kernel tiles cost %.2f (fwd) / %.2f (bwd) x "
                 "a full tile's pair\n",
                 o.hw.corrections.partial_tile_cost_fwd, o.hw.corrections.partial_tile_cost_bwd);
  if (o.hw.host_cores > 0)
    std::fprintf(out,
                 "  one host of %d cores: each of %d ranks computes at %.2f of a core; local "
                 "copy at the wait "
                 "alpha %.3g s beta %.4g B/s\n",
                 o.hw.host_cores, o.gpus, o.hw.compute_share(o.gpus), o.hw.wait_copy.latency_s,
                 o.hw.wait_copy.bandwidth_Bps);
  for (const Term& t : b.terms)
    std::fprintf(out, "  %-44s %12.6g s   %s\n", t.name.c_str(), t.seconds, t.detail.c_str());
  std::fprintf(out, "  memory (per GPU):\n");
  for (const auto& [name, bytes] : b.memory.items())
    std::fprintf(out, "    %-48s %10s GiB\n", name.c_str(), gib(bytes).c_str());
  std::fprintf(out, "    %-48s %10s GiB\n", "total", gib(b.memory.total()).c_str());
}

void write_timelines(const std::string& dir, const plan::PlanOptions& o,
                     const plan::Evaluation& best) {
  using namespace plan;
  std::filesystem::create_directories(dir);
  const AttentionCost c = cost_attention(best.config.algo, attention_problem(o), o.hw, 0, true);
  for (const auto& [pass, pc] :
       {std::pair{"forward", &c.forward}, std::pair{"backward", &c.backward}}) {
    const std::string path = dir + "/" + safe_name(best.config.algo.name()) + "-" + pass + ".svg";
    write_file(path,
               timeline_svg(*pc->timeline, best.config.algo.name() + " " + pass + " (one layer)"));
    std::fprintf(stderr, "wrote %s\n", path.c_str());
  }
}

int run_cluster(const PlanArgs& a) {
  const plan::PlanOptions o = plan_options(a);
  const std::vector<plan::Evaluation> evals = plan::plan(o);
  print_ranking(a, o, evals);
  const plan::Evaluation* best =
      evals.empty() || !evals.front().feasible ? nullptr : &evals.front();
  if (a.explain && best) print_explain(a.json ? stderr : stdout, o, *best);
  if (!a.timeline.empty() && best) write_timelines(a.timeline, o, *best);
  return best ? 0 : 3;
}

}  // namespace

std::function<int()> add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  app.add_option("--model", a->model,
                 "llama-7b | llama-14b | FILE.json (layers, hidden, heads, kv_heads, head_dim, "
                 "intermediate, vocab, tied_embeddings; the trainer's shapes)");
  app.add_option("--seq", a->seq, "sequence length (suffixes K, M: 1M = 1048576)");
  app.add_option("--gpus", a->gpus, "total GPUs (ranks)");
  app.add_option("--gpus-per-node", a->gpus_per_node, "GPUs per node");
  app.add_option("--hardware", a->hardware,
                 "hardware profile name (data/hardware/*.json) or FILE.json");
  app.add_option("--memory-limit", a->memory_limit_gib,
                 "per-GPU memory limit in GiB (0: the profile's memory)");
  add_row(app, core::rows::mask, a->mask);
  add_row(app, core::rows::balance, a->balance);
  app.add_option(
      "--algo", a->algo,
      std::string("restrict to these algorithms (comma list of ") + core::rows::kAlgoGrammar + ")");
  app.add_option(
      "--checkpoint", a->checkpoint,
      "restrict checkpoint policies (comma list: none, full, selective++, seq-selective)");
  app.add_option("--loss", a->loss, "restrict loss modes (comma list: fused, unfused)");
  app.add_option("--seq-selective-fraction", a->seq_selective_fraction,
                 "share of local tokens seq-selective recomputes");
  app.add_flag("--explain", a->explain, "print every term of the winner's step time");
  app.add_flag("--json", a->json, "print the ranking as JSON");
  app.add_option("--top", a->top, "feasible configurations to print in the table (0: all)");
  app.add_option(
      "--timeline", a->timeline,
      "directory: write the winner's attention timelines (SVG, schedule-based algorithms)");
  app.add_option("--train", a->train,
                 "PRESET | FILE.json: predict the peak RSS of `longseq train` on this host per "
                 "checkpoint policy instead (--seq, --gpus = world, --mask, --algo, --balance, "
                 "--checkpoint, --loss, --memory-limit override; --explain: the breakdown); with "
                 "--device cuda or --hardware GPU-PROFILE (calibrate --device cuda) also the GPU "
                 "memory of `train --device cuda` at world 1");
  app.add_flag("--longest", a->longest,
               "with --train: the longest N each policy fits in --memory-limit (0: MemTotal)");
  app.add_option("--ffn-chunk", a->ffn_chunk, "with --train: tokens per blockwise-FFN chunk");
  app.add_option("--data-tokens", a->data_tokens,
                 "with --train: tokens of the token file (default: read the preset's)");
  add_row(app, core::rows::device, a->device);
  return [a, app = &app] {
    // The cluster planner models GPUs already; --device names the trainer's device for --train.
    core::require(a->train.empty() ? core::Device::parse(a->device, "plan").is_cpu() : true, "plan",
                  "--device ", a->device,
                  " applies to --train PRESET (the GPU memory of `longseq train --device cuda`)");
    return a->train.empty() ? run_cluster(*a) : run_host(*a, *app);
  };
}

}  // namespace longseq::cli
