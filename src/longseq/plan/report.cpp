// The planner's reports for a person (request.hpp): the --explain text of the winner and the SVG
// of the best configurations.
#include <cstdarg>
#include <cstdio>

#include "longseq/core/error.hpp"
#include "longseq/core/plot.hpp"
#include "longseq/plan/request.hpp"

namespace longseq::plan {

namespace {

std::string line(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

std::string config_name(const Evaluation& e) {
  return core::cat("dp ", e.config.split.dp, " x cp ", e.config.split.cp, " ", e.config.algo.name(),
                   " ", model::checkpoint_policy_name(e.config.checkpoint), " ",
                   model::loss_mode_name(e.config.loss));
}

// Exposed attention communication of one step of the winner, forward and backward, all layers and
// micro-batches, with the profile `hw` (one link class made free by the caller).
double exposed_attention(const PlanOptions& o, const Evaluation& b, const Hardware& hw) {
  const AttentionCost c =
      cost_attention(b.config.algo, attention_problem(o, b.config.split), hw, 0, false);
  return static_cast<double>(b.config.split.grad_accum) *
         static_cast<double>(o.model.config.layers) *
         (c.forward.exposed_comm_s() + c.backward.exposed_comm_s());
}

}  // namespace

std::string explain_text(const PlanReport& report, bool link_split) {
  const Evaluation* b = report.winner();
  if (!report.options || !b) return "\nno configuration fits: nothing to explain\n";
  const PlanOptions& o = *report.options;
  const Hardware& hw = o.hw;
  const Split& s = b->config.split;
  std::string out;
  out += line("\nwinner: %s, checkpoint %s, loss %s\n", b->config.algo.name().c_str(),
              std::string(model::checkpoint_policy_name(b->config.checkpoint)).c_str(),
              std::string(model::loss_mode_name(b->config.loss)).c_str());
  out += line(
      "  split: dp %d replicas x cp %d context ranks (ZeRO-3 over all %d); %lld micro-batch(es) "
      "per replica per step: %lld sequences of %lld tokens per step (train --world %d --dp %d "
      "--grad-accum %lld)\n",
      s.dp, s.cp, o.gpus, static_cast<long long>(s.grad_accum),
      static_cast<long long>(s.dp * s.grad_accum), static_cast<long long>(o.seq), o.gpus, s.dp,
      static_cast<long long>(s.grad_accum));
  out += line(
      "  hardware %s: peak %.4g FLOP/s; intra alpha %.3g s beta %.4g B/s; inter alpha %.3g s "
      "beta %.4g B/s per GPU; memory bandwidth %.4g B/s\n",
      hw.name.c_str(), hw.peak_flops, hw.intra.latency_s, hw.intra.bandwidth_Bps,
      hw.inter.latency_s, hw.inter.bandwidth_Bps, hw.memory_bandwidth_Bps);
  out += line(
      "  empirical corrections (%s): GEMM %.2f, attention fwd %.2f, bwd %.2f, collectives %.2f\n",
      hw.corrections.source.c_str(), hw.corrections.gemm_efficiency,
      hw.corrections.attention_fwd_efficiency, hw.corrections.attention_bwd_efficiency,
      hw.corrections.collective_efficiency);
  if (hw.attention_curve.enabled()) {
    // The curve replaces the constant attention efficiencies per kernel call (hardware.hpp).
    out += line("  measured attention efficiency by block length (%s):",
                hw.attention_curve.source.c_str());
    for (const auto& pt : hw.attention_curve.points)
      out += line(" %.0f: %.3f/%.3f", pt.tokens, pt.fwd, pt.bwd);
    out += " (tokens: fwd/bwd); it replaces the constants above per kernel call\n";
  }
  if (hw.tiles.enabled())
    out += line(
        "  empirical corrections: partial kernel tiles cost %.2f (fwd) / %.2f (bwd) x a full "
        "tile's pair\n",
        hw.corrections.partial_tile_cost_fwd, hw.corrections.partial_tile_cost_bwd);
  if (hw.host_cores > 0)
    out += line(
        "  one host of %d cores: each of %d ranks computes at %.2f of a core; local copy at the "
        "wait alpha %.3g s beta %.4g B/s\n",
        hw.host_cores, o.gpus, hw.compute_share(o.gpus), hw.wait_copy.latency_s,
        hw.wait_copy.bandwidth_Bps);
  out += line("  step time by kind (%.6g s per step, %.6g s per sequence):\n", b->step_seconds,
              b->key());
  for (const Term& t : b->summary) {
    out += line("    %-34s %12.6g s %6.1f %%   %s\n", t.name.c_str(), t.seconds,
                100 * t.seconds / b->step_seconds, t.detail.c_str());
    if (link_split && t.name == "attention exposed communication" && t.seconds > 0) {
      Hardware intra_free = hw, inter_free = hw;
      intra_free.intra = {0, 1e30};
      inter_free.inter = {0, 1e30};
      out += line(
          "      %-32s %12.6g s   (the intra-node links free: what the inter-node ones leave)\n",
          "inter-node", exposed_attention(o, *b, intra_free));
      out += line(
          "      %-32s %12.6g s   (the inter-node links free: what the intra-node ones leave)\n",
          "intra-node", exposed_attention(o, *b, inter_free));
    }
  }
  out += "  every term:\n";
  for (const Term& t : b->terms)
    out += line("    %-52s %12.6g s   %s\n", t.name.c_str(), t.seconds, t.detail.c_str());
  out += "  memory (per GPU):\n";
  for (const auto& [name, bytes] : b->memory.items())
    out += line("    %-52s %10.2f GiB\n", name.c_str(), bytes / (1 << 30));
  out += line("    %-52s %10.2f GiB\n", "total", b->memory.total() / (1 << 30));
  const PlanResult& r = report.result;
  std::string splits;
  for (const Split& sp : r.splits)
    splits += core::cat(splits.empty() ? "" : ", ", sp.dp, "x", sp.cp);
  out += line(
      "  search: %zu splits (dp x cp: %s), %lld algorithm replays, %lld pruned by their lower "
      "bound; %s\n",
      r.splits.size(), splits.c_str(), static_cast<long long>(r.replayed),
      static_cast<long long>(r.pruned),
      o.exhaustive ? "exhaustive: every replica's group replayed, nothing pruned"
      : o.top == 0 ? "nothing pruned (--top 0)"
      : o.prune_gap > 0
          ? core::cat("the first ", o.top, " are exact up to the gap ", o.prune_gap).c_str()
          : core::cat("the first ", o.top, " of the ranking are exact").c_str());
  return out;
}

std::string plan_svg(const PlanReport& report, int count) {
  core::require(report.options.has_value(), "plan",
                "--svg draws the cluster planner's ranking, "
                "not --train's");
  core::plot::StackedBars bars;
  const PlanOptions& o = *report.options;
  bars.title = core::cat("longseq plan: ", o.model.name, ", N = ", o.seq, ", ", o.gpus, " GPUs (",
                         o.gpus_per_node, " per node), ", o.hw.name, ": the best configurations");
  core::plot::BarPanel time{"seconds per sequence (step / sequences per step)", {}, {}};
  core::plot::BarPanel mem{"peak memory per GPU (GiB)", {}, {}};
  int rank = 0;
  for (const Evaluation& e : report.result.configs) {
    if (!e.feasible || rank >= count) break;
    ++rank;
    bars.rows.push_back(core::cat("#", rank, " ", config_name(e)));
    const double per = static_cast<double>(e.config.split.dp * e.config.split.grad_accum);
    std::vector<double> t, m;
    if (time.parts.empty())
      for (const Term& s : e.summary) time.parts.push_back(s.name);
    for (const Term& s : e.summary) t.push_back(std::max(0.0, s.seconds / per));
    if (mem.parts.empty())
      for (const auto& [name, bytes] : e.memory.items()) mem.parts.push_back(name);
    for (const auto& [name, bytes] : e.memory.items()) m.push_back(bytes / (1 << 30));
    time.values.push_back(std::move(t));
    mem.values.push_back(std::move(m));
  }
  bars.panels = {time, mem};
  return core::plot::stacked_bars_svg(bars);
}

}  // namespace longseq::plan
