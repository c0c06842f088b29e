// `longseq plan`: ranks every configuration of a long-sequence training job by predicted step time
// on a modelled cluster (src/longseq/plan/planner.hpp; the model is described in docs/planner.md).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "longseq/core/error.hpp"
#include "longseq/plan/host_plan.hpp"
#include "longseq/plan/planner.hpp"
#include "longseq/plan/request.hpp"
#include "table_flags.hpp"

namespace longseq::cli {

namespace {

std::string gib(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", b / (1 << 30));
  return buf;
}

void write_file(const char* flag, const std::string& path, const std::string& text) {
  std::ofstream out(path);
  core::require(static_cast<bool>(out), "plan", flag, ": cannot write ", path);
  out << text;
  core::require(static_cast<bool>(out), "plan", flag, ": failed writing ", path);
}

std::string safe_name(std::string s) {
  for (char& c : s)
    if (c == ':') c = '_';
  return s;
}

double mib(double b) {
  return b / (1 << 20);
}

void print_host(const plan::PlanRequest& a, bool explain, const plan::HostPlan& r) {
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
  if (explain)
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

// The output flags: what to print of the answer, and which files to write.
struct Output {
  bool explain = false, json = false;
  std::string timeline, svg;
};

void print_ranking(const plan::PlanRequest& a, const plan::PlanReport& rep) {
  using namespace plan;
  const PlanOptions& o = *rep.options;
  const std::vector<Evaluation>& evals = rep.result.configs;
  std::printf(
      "plan: %s, N = %lld, %d GPUs (%d per node), hardware %s, mask %s, %s balance, %s\n",
      o.model.name.c_str(), static_cast<long long>(o.seq), o.gpus, o.gpus_per_node,
      o.hw.name.c_str(), o.mask.describe().c_str(), a.balance.c_str(),
      o.global_batch > 0
          ? core::cat("global batch ", o.global_batch, " sequences (ranked by step time)").c_str()
          : "one sequence per replica per step (ranked by throughput)");
  std::printf("%-4s %6s %6s %4s %-22s %-14s %-8s %10s %9s %6s %9s %10s %10s\n", "#", "dp", "cp",
              "K", "algo", "checkpoint", "loss", "step [s]", "TGS", "MFU", "mem GiB", "intra GiB",
              "inter GiB");
  int shown = 0, feasible = 0, pruned = 0;
  for (const Evaluation& e : evals) {
    pruned += e.pruned ? 1 : 0;
    if (!e.feasible) continue;
    ++feasible;
    if (a.top > 0 && shown >= a.top) continue;
    ++shown;
    std::printf("%-4d %6d %6d %4lld %-22s %-14s %-8s %10.4g %9.2f %5.1f%% %9s %10s %10s\n", shown,
                e.config.split.dp, e.config.split.cp,
                static_cast<long long>(e.config.split.grad_accum), e.config.algo.name().c_str(),
                std::string(model::checkpoint_policy_name(e.config.checkpoint)).c_str(),
                std::string(model::loss_mode_name(e.config.loss)).c_str(), e.step_seconds,
                e.tokens_per_sec_per_gpu, 100 * e.mfu, gib(e.memory.total()).c_str(),
                gib(e.comm_bytes_intra).c_str(), gib(e.comm_bytes_inter).c_str());
  }
  if (feasible > shown)
    std::printf("     ... %d more feasible, replayed (--top 0 replays and lists all)\n",
                feasible - shown);
  if (pruned > 0)
    std::printf(
        "     %d configurations not replayed: their lower bounds cannot reach the top %d "
        "(--json lists them with the bound)\n",
        pruned, a.top);
  for (const SplitNote& n : rep.result.refused)
    std::printf("     split dp %d x cp %d left out: %s\n", n.split.dp, n.split.cp,
                n.reason.c_str());
  // Every split adds its infeasible configurations: the first --top are printed.
  std::printf("\ninfeasible:\n");
  int listed = 0, infeasible = 0;
  for (const Evaluation& e : evals) {
    if (e.feasible || e.pruned) continue;
    ++infeasible;
    if (a.top > 0 && listed >= a.top) continue;
    ++listed;
    std::printf("  %4d x %-5d %-22s %-14s %-8s %s\n", e.config.split.dp, e.config.split.cp,
                e.config.algo.name().c_str(),
                std::string(model::checkpoint_policy_name(e.config.checkpoint)).c_str(),
                std::string(model::loss_mode_name(e.config.loss)).c_str(), e.reason.c_str());
  }
  if (infeasible > listed)
    std::printf("  ... %d more infeasible (--top 0 or --json lists all)\n", infeasible - listed);
}

void write_timelines(const std::string& dir, const plan::PlanOptions& o,
                     const plan::Evaluation& best) {
  using namespace plan;
  std::filesystem::create_directories(dir);
  const AttentionCost c =
      cost_attention(best.config.algo, attention_problem(o, best.config.split), o.hw, 0, true);
  for (const auto& [pass, pc] :
       {std::pair{"forward", &c.forward}, std::pair{"backward", &c.backward}}) {
    const std::string path = dir + "/" + safe_name(best.config.algo.name()) + "-" + pass + ".svg";
    write_file("--timeline", path,
               timeline_svg(*pc->timeline, best.config.algo.name() + " " + pass + " (one layer)"));
    std::fprintf(stderr, "wrote %s\n", path.c_str());
  }
}

int run(const plan::PlanRequest& a, const Output& out) {
  const plan::PlanReport rep = plan::run_plan(a);
  for (const std::string& w : rep.warnings) std::fprintf(stderr, "[plan] warning: %s\n", w.c_str());
  if (rep.host) {
    core::require(out.svg.empty() && out.timeline.empty(), "plan",
                  "--svg and --timeline draw the cluster planner's answer, not --train's");
    if (out.json)
      std::printf("%s\n", rep.to_json().dump(1).c_str());
    else
      print_host(a, out.explain, *rep.host);
    return 0;
  }
  if (out.json)
    std::fputs((rep.to_json().dump(2) + "\n").c_str(), stdout);
  else
    print_ranking(a, rep);
  const plan::Evaluation* best = rep.winner();
  if (out.explain && best)
    std::fputs(plan::explain_text(rep, true).c_str(), out.json ? stderr : stdout);
  if (!out.svg.empty() && best) {
    write_file("--svg", out.svg, plan::plan_svg(rep));
    std::fprintf(stderr, "wrote %s\n", out.svg.c_str());
  }
  if (!out.timeline.empty() && best) write_timelines(out.timeline, *rep.options, *best);
  return best ? 0 : 3;
}

}  // namespace

std::function<int()> add_plan(CLI::App& app) {
  // The flags are the fields of plan::PlanRequest (request.hpp), its defaults theirs.
  auto a = std::make_shared<plan::PlanRequest>();
  auto out = std::make_shared<Output>();
  app.add_option("--model", a->model,
                 "llama-7b | llama-14b | FILE.json (layers, hidden, heads, kv_heads, head_dim, "
                 "intermediate, vocab, tied_embeddings; the trainer's shapes)");
  app.add_option("--seq", a->seq, "sequence length (suffixes K, M: 1M = 1048576)");
  app.add_option("--gpus", a->gpus, "total GPUs: dp replicas x cp context ranks");
  app.add_option("--gpus-per-node", a->gpus_per_node, "GPUs per node");
  app.add_option("--hardware", a->hardware,
                 "hardware profile name (data/hardware/*.json) or FILE.json");
  app.add_option("--memory-limit", a->memory_limit,
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
  app.add_option("--dp", a->dp,
                 "restrict the data-parallel degrees (comma list, each dividing --gpus; "
                 "cp = gpus / dp; default: every divisor)");
  app.add_option("--cp", a->cp,
                 "restrict the context-parallel degrees (comma list, each dividing --gpus)");
  app.add_option("--global-batch", a->global_batch,
                 "sequences per optimizer step: tokens (64M: a whole number of --seq) or "
                 "sequences (16seq); dp must divide it, K = batch / dp micro-batches (train "
                 "--grad-accum); default: one sequence per replica, ranked by throughput");
  app.add_option("--top", a->top,
                 "the configurations ranked exactly and printed (0: replay and list all; beyond "
                 "the top, configurations whose lower bound cannot reach it are not replayed)");
  app.add_option("--prune-gap", a->prune_gap,
                 "also skip configurations that could beat the top by at most this fraction "
                 "(0: exact; -1: exact up to 1024 GPUs, 0.01 above)");
  app.add_flag("--exhaustive", a->exhaustive,
               "replay every replica's group as one cluster and prune nothing (the reference)");
  app.add_flag("--explain", out->explain,
               "print the winner's split, step time by kind and term, memory by term");
  app.add_flag("--json", out->json, "print the ranking as JSON");
  app.add_option("--svg", out->svg,
                 "FILE: draw the best configurations' seconds per sequence and memory by term");
  app.add_option(
      "--timeline", out->timeline,
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
  return [a, out, app = &app] {
    // The request's `given`: the flags typed (field names: --gpus-per-node is gpus_per_node).
    for (const CLI::Option* opt : app->get_options())
      if (opt->count() > 0 && !opt->get_lnames().empty()) {
        std::string name = opt->get_lnames().front();
        for (char& c : name)
          if (c == '-') c = '_';
        a->given.push_back(name);
      }
    return run(*a, *out);
  };
}

}  // namespace longseq::cli
