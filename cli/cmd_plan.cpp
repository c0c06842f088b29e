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
#include "longseq/plan/planner.hpp"
#include "plan_host.hpp"

namespace longseq::cli {

namespace {

struct PlanArgs {
  std::string model = "llama-7b";
  std::string seq = "1M";
  int gpus = 32;
  int gpus_per_node = 8;
  std::string hardware = "a800";
  double memory_limit_gib = 0;
  std::string mask = "causal";
  std::string balance = "zigzag";
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

}  // namespace

std::function<int()> add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  app.add_option("--model", a->model,
                 "llama-7b | llama-14b | FILE.json (layers, hidden, heads, kv_heads, head_dim, "
                 "intermediate, vocab)");
  app.add_option("--seq", a->seq, "sequence length (suffixes K, M: 1M = 1048576)");
  app.add_option("--gpus", a->gpus, "total GPUs (ranks)");
  app.add_option("--gpus-per-node", a->gpus_per_node, "GPUs per node");
  app.add_option("--hardware", a->hardware,
                 "hardware profile name (data/hardware/*.json) or FILE.json");
  app.add_option("--memory-limit", a->memory_limit_gib,
                 "per-GPU memory limit in GiB (0: the profile's memory)");
  app.add_option("--mask", a->mask, "full | causal | window:W (window implies causal)");
  app.add_option("--balance", a->balance, "contiguous | zigzag | striped");
  app.add_option(
      "--algo", a->algo,
      "restrict to these algorithms (comma list of ring | burst | double-ring[:I][:burst|:ring] | "
      "startrail:C[:teams|:rings] | ulysses | usp:U[:burst|:ring])");
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
                 "--checkpoint, --loss, --memory-limit override; --explain: the breakdown)");
  app.add_flag("--longest", a->longest,
               "with --train: the longest N each policy fits in --memory-limit (0: MemTotal)");
  app.add_option("--ffn-chunk", a->ffn_chunk, "with --train: tokens per blockwise-FFN chunk");
  app.add_option("--data-tokens", a->data_tokens,
                 "with --train: tokens of the token file (default: read the preset's)");
  auto* seq_opt = app.get_option("--seq");
  auto* gpus_opt = app.get_option("--gpus");
  auto* mask_opt = app.get_option("--mask");
  auto* balance_opt = app.get_option("--balance");
  return [a, seq_opt, gpus_opt, mask_opt, balance_opt] {
    using namespace plan;
    if (!a->train.empty()) {
      HostPlanArgs h;
      h.preset = a->train;
      if (seq_opt->count() > 0) h.seq = parse_count(a->seq, "--seq");
      if (gpus_opt->count() > 0) h.world = a->gpus;
      if (mask_opt->count() > 0) h.mask = a->mask;
      h.algo = a->algo;
      if (balance_opt->count() > 0) h.balance = a->balance;
      h.loss = a->loss;
      h.checkpoints = split_list(a->checkpoint);
      h.ffn_chunk = a->ffn_chunk;
      h.data_tokens = a->data_tokens;
      h.memory_limit_gib = a->memory_limit_gib;
      h.longest = a->longest;
      h.explain = a->explain;
      h.json = a->json;
      return plan_host(h);
    }
    PlanOptions o;
    o.model = load_model(a->model);
    o.seq = parse_count(a->seq, "--seq");
    o.gpus = a->gpus;
    o.gpus_per_node = a->gpus_per_node;
    o.hw = load_hardware(a->hardware);
    if (o.hw.host_cores > 0)
      if (const std::string m = host_profile_mismatch(a->hardware); !m.empty())
        std::fprintf(stderr, "[plan] warning: %s\n", m.c_str());
    core::require(a->memory_limit_gib >= 0, "plan", "--memory-limit ", a->memory_limit_gib,
                  " must be >= 0");
    o.memory_limit_bytes = a->memory_limit_gib * (1 << 30);
    o.mask = attention::MaskSpec::parse(a->mask, false, o.seq);
    o.balance = attention::parse_balance(a->balance);
    o.seq_selective_fraction = a->seq_selective_fraction;
    o.algos = split_list(a->algo);
    for (const auto& c : split_list(a->checkpoint)) o.checkpoints.push_back(parse_checkpoint(c));
    for (const auto& l : split_list(a->loss)) o.losses.push_back(parse_loss(l));
    o.validate();
    const std::vector<Evaluation> evals = plan::plan(o);

    if (a->json) {
      std::fputs(plan_json(evals).c_str(), stdout);
    } else {
      std::printf("plan: %s, N = %lld, %d GPUs (%d per node), hardware %s, mask %s, %s balance\n",
                  o.model.name.c_str(), static_cast<long long>(o.seq), o.gpus, o.gpus_per_node,
                  o.hw.name.c_str(), o.mask.describe().c_str(), a->balance.c_str());
      std::printf("%-4s %-22s %-14s %-8s %10s %9s %6s %9s %10s %10s  %s\n", "#", "algo",
                  "checkpoint", "loss", "step [s]", "TGS", "MFU", "mem GiB", "intra GiB",
                  "inter GiB", "model");
      int shown = 0, feasible = 0;
      for (const Evaluation& e : evals) {
        if (!e.feasible) continue;
        ++feasible;
        if (a->top > 0 && shown >= a->top) continue;
        ++shown;
        // Every algorithm is costed by replaying its schedule: the "model" column says so.
        std::printf("%-4d %-22s %-14s %-8s %10.4g %9.2f %5.1f%% %9s %10s %10s  schedule\n", shown,
                    e.config.algo.name().c_str(),
                    std::string(checkpoint_name(e.config.checkpoint)).c_str(),
                    std::string(loss_name(e.config.loss)).c_str(), e.step_seconds,
                    e.tokens_per_sec_per_gpu, 100 * e.mfu, gib(e.memory.total()).c_str(),
                    gib(e.comm_bytes_intra).c_str(), gib(e.comm_bytes_inter).c_str());
      }
      if (feasible > shown)
        std::printf("     ... %d more feasible (--top 0 lists all)\n", feasible - shown);
      std::printf("\ninfeasible:\n");
      for (const Evaluation& e : evals)
        if (!e.feasible)
          std::printf("  %-22s %-14s %-8s %s\n", e.config.algo.name().c_str(),
                      std::string(checkpoint_name(e.config.checkpoint)).c_str(),
                      std::string(loss_name(e.config.loss)).c_str(), e.reason.c_str());
    }
    const Evaluation* best = evals.empty() || !evals.front().feasible ? nullptr : &evals.front();
    if (a->explain && best) {
      FILE* out = a->json ? stderr : stdout;
      std::fprintf(out, "\nwinner: %s, checkpoint %s, loss %s\n", best->config.algo.name().c_str(),
                   std::string(checkpoint_name(best->config.checkpoint)).c_str(),
                   std::string(loss_name(best->config.loss)).c_str());
      std::fprintf(out,
                   "  hardware %s: peak %.4g FLOP/s; intra alpha %.3g s beta %.4g B/s; inter alpha "
                   "%.3g s beta %.4g B/s per GPU\n",
                   o.hw.name.c_str(), o.hw.peak_flops, o.hw.intra.latency_s,
                   o.hw.intra.bandwidth_Bps, o.hw.inter.latency_s, o.hw.inter.bandwidth_Bps);
      std::fprintf(out,
                   "  empirical corrections (%s): GEMM %.2f, attention fwd %.2f, bwd %.2f, "
                   "collectives %.2f\n",
                   o.hw.corrections.source.c_str(), o.hw.corrections.gemm_efficiency,
                   o.hw.corrections.attention_fwd_efficiency,
                   o.hw.corrections.attention_bwd_efficiency,
                   o.hw.corrections.collective_efficiency);
      if (o.hw.tiles.enabled())
        std::fprintf(out,
                     "  empirical corrections: partial kernel tiles cost %.2f (fwd) / %.2f (bwd) x "
                     "a full tile's pair\n",
                     o.hw.corrections.partial_tile_cost_fwd,
                     o.hw.corrections.partial_tile_cost_bwd);
      if (o.hw.host_cores > 0)
        std::fprintf(out,
                     "  one host of %d cores: each of %d ranks computes at %.2f of a core; local "
                     "copy at the wait "
                     "alpha %.3g s beta %.4g B/s\n",
                     o.hw.host_cores, o.gpus, o.hw.compute_share(o.gpus), o.hw.wait_copy.latency_s,
                     o.hw.wait_copy.bandwidth_Bps);
      for (const Term& t : best->terms)
        std::fprintf(out, "  %-44s %12.6g s   %s\n", t.name.c_str(), t.seconds, t.detail.c_str());
      std::fprintf(out, "  memory (per GPU):\n");
      for (const auto& [name, bytes] : best->memory.items())
        std::fprintf(out, "    %-48s %10s GiB\n", name.c_str(), gib(bytes).c_str());
      std::fprintf(out, "    %-48s %10s GiB\n", "total", gib(best->memory.total()).c_str());
    }
    if (!a->timeline.empty() && best) {
      std::filesystem::create_directories(a->timeline);
      const AttentionCost c =
          cost_attention(best->config.algo, attention_problem(o), o.hw, 0, true);
      for (const auto& [pass, pc] :
           {std::pair{"forward", &c.forward}, std::pair{"backward", &c.backward}}) {
        const std::string path =
            a->timeline + "/" + safe_name(best->config.algo.name()) + "-" + pass + ".svg";
        write_file(path, timeline_svg(*pc->timeline,
                                      best->config.algo.name() + " " + pass + " (one layer)"));
        std::fprintf(stderr, "wrote %s\n", path.c_str());
      }
    }
    return best ? 0 : 3;
  };
}

}  // namespace longseq::cli
