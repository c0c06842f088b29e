#include "longseq/plan/planner.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <thread>

#include "longseq/core/error.hpp"

namespace longseq::plan {

using attention::Algorithm;
using attention::Backward;
using attention::Route;
using attention::TeamPlacement;

namespace {

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

// One ring collective over P ranks (all-gather or reduce-scatter of `bytes` in total): P-1
// messages of bytes/P each, over the inter-node rail once the group spans nodes.
Term collective(const std::string& name, double bytes, const PlanOptions& o) {
  const bool inter = o.gpus > o.gpus_per_node;
  const Link& link = inter ? o.hw.inter : o.hw.intra;
  const double p = o.gpus, eff = o.hw.corrections.collective_efficiency;
  const double msgs = p - 1, moved = bytes * (p - 1) / p;
  Term t{name, msgs * link.latency_s + moved / (link.bandwidth_Bps * eff), ""};
  t.detail = fmt("alpha*msgs + bytes/beta = %.3g*%.0f + %.4g B / %.4g B/s", link.latency_s, msgs,
                 moved, link.bandwidth_Bps) +
             std::string(inter ? " (inter-node)" : " (intra-node)") +
             fmt(", empirical collective efficiency %.2f", eff);
  return t;
}

std::string attn_detail(const PassCost& c, const Hardware& hw) {
  char buf[400];
  std::snprintf(
      buf, sizeof buf,
      "%s; compute %.4g s (%.4g FLOP); per rank (mean) messages intra %.1f inter %.1f, bytes "
      "intra %.4g inter %.4g; alpha terms %.3g s; exposed comm %.4g s",
      c.model.c_str(), c.compute_s, c.flops, c.messages_intra, c.messages_inter, c.bytes_intra,
      c.bytes_inter, c.messages_intra * hw.intra.latency_s + c.messages_inter * hw.inter.latency_s,
      c.exposed_comm_s());
  return buf;
}

}  // namespace

void PlanOptions::validate() const {
  core::require(!hw.single_gpu(), "plan", "--hardware ", hw.name, " is a single GPU's profile (",
                hw.gpu.name,
                ", `longseq calibrate --device cuda`) without links: it predicts `longseq train "
                "--device cuda` through plan --train PRESET, not a cluster");
  core::require(gpus >= 1, "plan", "--gpus ", gpus, " must be >= 1");
  core::require(gpus_per_node >= 1, "plan", "--gpus-per-node ", gpus_per_node, " must be >= 1");
  core::require(gpus % gpus_per_node == 0 || gpus < gpus_per_node, "plan", "--gpus ", gpus,
                " is not divisible by --gpus-per-node ", gpus_per_node);
  core::require(gpus_per_node <= hw.gpus_per_node, "plan", "--gpus-per-node ", gpus_per_node,
                " exceeds the ", hw.gpus_per_node, " GPUs per node of --hardware ", hw.name);
  core::require(seq >= gpus, "plan", "--seq ", seq, " must be at least --gpus ", gpus);
  core::require(memory_limit_bytes >= 0, "plan", "--memory-limit must be >= 0");
  core::require(seq_selective_fraction > 0 && seq_selective_fraction < 1, "plan",
                "--seq-selective-fraction ", seq_selective_fraction, " must be in (0, 1)");
  model.config.validate();
}

AttnProblem attention_problem(const PlanOptions& o) {
  AttnProblem p;
  p.n = o.seq;
  p.hq = o.model.config.heads;
  p.hkv = o.model.config.kv_heads;
  p.d = o.model.config.head_dim;
  p.world = o.gpus;
  p.gpus_per_node = std::min(o.gpus_per_node, o.gpus);
  p.balance = o.balance;
  p.mask = o.mask;
  return p;
}

std::vector<Algorithm> candidate_algos(int gpus, int gpn) {
  std::vector<Algorithm> out;
  using F = Algorithm::Family;
  out.push_back(Algorithm::parse("ring"));
  out.push_back(Algorithm::parse("burst"));
  for (int i = 2; i <= std::min(gpn, gpus - 1); ++i)
    if (gpn % i == 0 && gpus % i == 0)
      for (Backward b : {Backward::q, Backward::kv}) {
        Algorithm a{Route::double_ring, b};
        a.inner = i;
        out.push_back(a);
      }
  for (int c = 2; c * c <= gpus; ++c)
    if (gpus % (c * c) == 0)
      for (TeamPlacement pl : {TeamPlacement::teams, TeamPlacement::rings}) {
        Algorithm a;
        a.family = F::startrail;
        a.team = c;
        a.placement = pl;
        out.push_back(a);
      }
  Algorithm uly = Algorithm::parse("ulysses");
  uly.degree = gpus;
  out.push_back(uly);
  for (int u = 2; u < gpus && u <= gpn; ++u)
    if (gpus % u == 0 && gpn % u == 0)
      for (Backward b : {Backward::q, Backward::kv}) {
        Algorithm a;
        a.family = F::usp;
        a.degree = u;
        a.backward = b;
        out.push_back(a);
      }
  return out;
}

Evaluation evaluate(const PlanOptions& o, const PlanConfig& cfg, const AttentionCost& attn) {
  Evaluation ev;
  ev.config = cfg;
  const model::LlamaConfig& m = o.model.config;
  const Hardware& hw = o.hw;
  const AttnProblem prob = attention_problem(o);
  const attention::Layout layout(prob.balance, prob.n, prob.world, prob.mask.block_size);
  const double t = static_cast<double>(layout.local_len());
  const double layers = static_cast<double>(m.layers);
  const double h = static_cast<double>(m.hidden), v = static_cast<double>(m.vocab);
  const double matmul_params =
      static_cast<double>(m.layer_parameters() - 2 * m.hidden);  // the two norms are not GEMMs

  // Linear layers (GEMMs): 2 FLOP per parameter per token forward, twice that backward.
  const double lin_fwd_flops = 2 * t * matmul_params;
  // One host of threads: ranks beyond its cores time-share them (Hardware::compute_share).
  const double gemm_rate = hw.gemm_flops() * hw.compute_share(o.gpus);
  const Term lin_fwd{
      "linear forward / layer", lin_fwd_flops / gemm_rate,
      fmt("flops/gamma = %.4g FLOP / (%.4g FLOP/s peak * %.2f empirical GEMM efficiency * %.2f "
          "core share)",
          lin_fwd_flops, hw.peak_flops, hw.corrections.gemm_efficiency, hw.compute_share(o.gpus))};
  const Term lin_bwd{"linear backward / layer", 2 * lin_fwd.seconds, "2 x linear forward"};
  const Term at_fwd{"attention forward / layer", attn.forward.seconds,
                    attn_detail(attn.forward, hw)};
  const Term at_bwd{"attention backward / layer", attn.backward.seconds,
                    attn_detail(attn.backward, hw)};
  Term recompute{
      "recomputation / layer (" + std::string(model::checkpoint_policy_name(cfg.checkpoint)) + ")",
      0, ""};
  switch (cfg.checkpoint) {
    case model::CheckpointPolicy::none:
      recompute.detail = "nothing recomputed";
      break;
    case model::CheckpointPolicy::full:
      recompute.seconds = lin_fwd.seconds + attn.forward.seconds;
      recompute.detail = "linear forward + attention forward";
      break;
    case model::CheckpointPolicy::selective_pp:
      recompute.seconds = lin_fwd.seconds;
      recompute.detail = "linear forward (attention output and LSE kept)";
      break;
    case model::CheckpointPolicy::seq_selective:
      recompute.seconds = lin_fwd.seconds + attn.partial_recompute.seconds;
      recompute.detail =
          fmt("linear forward + attention forward of the first %.2f of local tokens: ",
              attn.recompute_fraction) +
          attn_detail(attn.partial_recompute, hw);
      break;
  }
  // ZeRO-3 per layer: bf16 parameters gathered forward and again backward, bf16 gradients
  // reduce-scattered.
  const double layer_bytes = 2.0 * static_cast<double>(m.layer_parameters());
  const Term zero_ag = collective("ZeRO-3 all-gather / layer", layer_bytes, o);
  const Term zero_rs = collective("ZeRO-3 reduce-scatter / layer", layer_bytes, o);
  const double inter_busy_f = attn.forward.bytes_inter_max / hw.inter.bandwidth_Bps;
  const double recompute_inter_max = cfg.checkpoint == model::CheckpointPolicy::full
                                         ? attn.forward.bytes_inter_max
                                     : cfg.checkpoint == model::CheckpointPolicy::seq_selective
                                         ? attn.partial_recompute.bytes_inter_max
                                         : 0.0;
  const double recompute_inter = cfg.checkpoint == model::CheckpointPolicy::full
                                     ? attn.forward.bytes_inter
                                 : cfg.checkpoint == model::CheckpointPolicy::seq_selective
                                     ? attn.partial_recompute.bytes_inter
                                     : 0.0;
  const double inter_busy_b =
      (attn.backward.bytes_inter_max + recompute_inter_max) / hw.inter.bandwidth_Bps;
  const double comp_f = lin_fwd.seconds + at_fwd.seconds;
  const double comm_f = zero_ag.seconds + inter_busy_f;
  const double comp_b = recompute.seconds + lin_bwd.seconds + at_bwd.seconds;
  const double comm_b = zero_ag.seconds + zero_rs.seconds + inter_busy_b;
  const Term layer_f{
      "layer forward", std::max(comp_f, comm_f),
      fmt("max(compute+attention %.4g s, ZeRO-3 + attention inter-node NIC time %.4g s)", comp_f,
          comm_f)};
  const Term layer_b{
      "layer backward", std::max(comp_b, comm_b),
      fmt("max(recompute+compute+attention %.4g s, ZeRO-3 + attention inter-node NIC time %.4g s)",
          comp_b, comm_b)};
  const double head_flops = 6 * t * h * v;  // forward 2*T*h*V, backward 4*T*h*V
  const Term head{
      "LM head + loss (" + std::string(model::loss_mode_name(cfg.loss)) + ")",
      head_flops / gemm_rate,
      fmt("flops/gamma = %.4g FLOP (fwd 2ThV + bwd 4ThV; fused: no logits recompute)", head_flops)};
  ev.step_seconds = layers * (layer_f.seconds + layer_b.seconds) + head.seconds;
  ev.terms = {lin_fwd, at_fwd,    zero_ag, layer_f, lin_bwd,
              at_bwd,  recompute, zero_rs, layer_b, head};
  ev.terms.push_back({"step", ev.step_seconds,
                      fmt("layers * (forward + backward) + LM head = %.0f * (%.4g + %.4g) + %.4g",
                          layers, layer_f.seconds, layer_b.seconds, head.seconds) +
                          "; not modelled: elementwise kernels, optimizer step, embedding"});

  const double p = o.gpus;
  ev.tokens_per_sec_per_gpu = static_cast<double>(o.seq) / (ev.step_seconds * p);
  const double model_flops =
      3 * (layers * (lin_fwd_flops * p + attn.forward.flops_total) + 2 * t * h * v * p);
  ev.mfu = model_flops / (ev.step_seconds * p * hw.peak_flops);

  const double recompute_intra = cfg.checkpoint == model::CheckpointPolicy::full
                                     ? attn.forward.bytes_intra
                                 : cfg.checkpoint == model::CheckpointPolicy::seq_selective
                                     ? attn.partial_recompute.bytes_intra
                                     : 0.0;
  const bool zero_inter = o.gpus > o.gpus_per_node;
  const double zero_bytes = 3 * layer_bytes * (p - 1) / p;
  ev.comm_bytes_intra = layers * (attn.forward.bytes_intra + attn.backward.bytes_intra +
                                  recompute_intra + (zero_inter ? 0.0 : zero_bytes));
  ev.comm_bytes_inter = layers * (attn.forward.bytes_inter + attn.backward.bytes_inter +
                                  recompute_inter + (zero_inter ? zero_bytes : 0.0));

  MemoryInputs mi;
  mi.model = m;
  mi.world = o.gpus;
  mi.local_tokens = layout.local_len();
  mi.act_bytes = hw.dtype_bytes;
  mi.checkpoint = cfg.checkpoint;
  mi.loss = cfg.loss;
  mi.seq_selective_fraction = o.seq_selective_fraction;
  mi.attention_buffer_bytes = std::max(attn.buffer_bytes_forward, attn.buffer_bytes_backward);
  mi.attention_extra_bytes = attn.extra_activation_bytes;
  ev.memory = memory_model(mi);
  const double limit = o.memory_limit_bytes > 0 ? o.memory_limit_bytes : hw.memory_bytes;
  ev.feasible = ev.memory.total() <= limit;
  if (!ev.feasible)
    ev.reason = fmt("peak memory %.2f GiB exceeds the limit %.2f GiB",
                    ev.memory.total() / (1 << 30), limit / (1 << 30));
  return ev;
}

std::vector<Evaluation> plan(const PlanOptions& o) {
  o.validate();
  std::vector<Algorithm> algos;
  if (o.algos.empty())
    algos = candidate_algos(o.gpus, std::min(o.gpus_per_node, o.gpus));
  else
    for (const auto& s : o.algos) {
      Algorithm a = Algorithm::parse(s);
      // Name what "the ranks of one node" and "the whole world" are here, so the printed
      // configuration means the same to `train` on any topology.
      if (a.ring_family() && a.route == Route::double_ring && a.inner == 0)
        a.inner = std::min(o.gpus_per_node, o.gpus);
      if (a.family == Algorithm::Family::ulysses) a.degree = o.gpus;
      algos.push_back(a);
    }
  std::vector<model::CheckpointPolicy> cps = o.checkpoints;
  if (cps.empty())
    cps = {model::CheckpointPolicy::none, model::CheckpointPolicy::full,
           model::CheckpointPolicy::selective_pp, model::CheckpointPolicy::seq_selective};
  std::vector<model::LossMode> losses = o.losses;
  if (losses.empty()) losses = {model::LossMode::fused, model::LossMode::unfused};
  const AttnProblem prob = attention_problem(o);

  // The replays are independent: tasks on all hardware threads, results by index (so the ranking
  // is the same for any thread count). A task is one algorithm's backward, or one forward shared
  // by every algorithm with its forward_key (ring and burst, the two backward variants of a double
  // ring or of USP run the same forward schedules). Largest first: (rank, bundle) items are about
  // P x ring length, and the pool finishes sooner when the long replays start first.
  std::vector<AttentionCost> costs(algos.size());
  std::vector<std::string> reasons(algos.size());
  std::vector<size_t> shared(algos.size());  // the algorithm whose forward task serves algo i
  struct Task {
    size_t algo;
    bool forward;
    double size;
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < algos.size(); ++i) {
    shared[i] = i;
    for (size_t j = 0; j < i; ++j)
      if (forward_key(algos[j]) == forward_key(algos[i])) {
        shared[i] = j;
        break;
      }
    const Algorithm& a = algos[i];
    const double ring = a.ring_family()                      ? prob.world
                        : a.family == Algorithm::Family::usp ? prob.world / std::max(1, a.degree)
                        : a.family == Algorithm::Family::startrail
                            ? prob.world / std::max(1, a.team * a.team)
                            : 1.0;
    const double size = static_cast<double>(prob.world) * ring;
    if (shared[i] == i) tasks.push_back({i, true, size});
    tasks.push_back({i, false, size});
  }
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const Task& x, const Task& y) { return x.size > y.size; });
  std::vector<AttentionCost> forwards(algos.size()), backwards(algos.size());
  std::vector<std::exception_ptr> broken(tasks.size());
  std::vector<std::string> task_reason[2] = {std::vector<std::string>(algos.size()),
                                             std::vector<std::string>(algos.size())};
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t t = next++; t < tasks.size(); t = next++) {
      const Task& task = tasks[t];
      try {
        if (task.forward)
          forwards[task.algo] =
              cost_forward(algos[task.algo], prob, o.hw, o.seq_selective_fraction);
        else
          cost_backward(algos[task.algo], prob, o.hw, backwards[task.algo]);
      } catch (const core::Error& e) {
        task_reason[task.forward ? 0 : 1][task.algo] = e.what();
      } catch (...) {
        broken[t] = std::current_exception();
      }
    }
  };
  const size_t threads =
      std::min<size_t>(tasks.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (const auto& e : broken)
    if (e) std::rethrow_exception(e);
  // cost_attention's order: the forward's reason first (it would have thrown before the backward).
  // A reason names its algorithm, so a shared forward that failed is run again under the
  // algorithm's own name (an error path: validate_algo, which names it, fails first nearly always).
  for (size_t i = 0; i < algos.size(); ++i) {
    reasons[i] = task_reason[0][shared[i]];
    if (!reasons[i].empty() && shared[i] != i) try {
        forwards[i] = cost_forward(algos[i], prob, o.hw, o.seq_selective_fraction);
        reasons[i].clear();
        shared[i] = i;
      } catch (const core::Error& e) {
        reasons[i] = e.what();
      }
    if (reasons[i].empty()) reasons[i] = task_reason[1][i];
    if (!reasons[i].empty()) continue;
    costs[i] = forwards[shared[i]];
    costs[i].backward = std::move(backwards[i].backward);
    costs[i].buffer_bytes_backward = backwards[i].buffer_bytes_backward;
  }

  std::vector<Evaluation> out;
  for (size_t ai = 0; ai < algos.size(); ++ai) {
    const Algorithm& a = algos[ai];
    const AttentionCost& attn = costs[ai];
    const std::string& reason = reasons[ai];
    for (model::CheckpointPolicy cp : cps)
      for (model::LossMode lm : losses) {
        const PlanConfig cfg{a, cp, lm};
        if (!reason.empty()) {
          Evaluation ev;
          ev.config = cfg;
          ev.reason = reason;
          out.push_back(std::move(ev));
        } else {
          out.push_back(evaluate(o, cfg, attn));
        }
      }
  }
  std::stable_sort(out.begin(), out.end(), [](const Evaluation& x, const Evaluation& y) {
    if (x.feasible != y.feasible) return x.feasible;
    return x.feasible && x.step_seconds < y.step_seconds;
  });
  return out;
}

std::string plan_json(const std::vector<Evaluation>& evals) {
  using nlohmann::json;
  json configs = json::array();
  for (const Evaluation& e : evals) {
    const Algorithm& a = e.config.algo;
    using F = Algorithm::Family;
    json j;
    j["algo"] = a.name();
    const bool dr = a.ring_family() && a.route == Route::double_ring;
    j["inner_ring"] = dr ? json(a.inner) : json(nullptr);
    j["team_c"] = a.family == F::startrail ? json(a.team) : json(nullptr);
    j["ulysses"] = a.family == F::usp || a.family == F::ulysses ? json(a.degree) : json(nullptr);
    j["checkpoint"] = std::string(model::checkpoint_policy_name(e.config.checkpoint));
    j["loss"] = std::string(model::loss_mode_name(e.config.loss));
    j["feasible"] = e.feasible;
    j["reason"] = e.reason;
    const bool costed = e.step_seconds > 0;
    j["step_seconds"] = costed ? json(e.step_seconds) : json(nullptr);
    j["tokens_per_sec_per_gpu"] = costed ? json(e.tokens_per_sec_per_gpu) : json(nullptr);
    j["mfu"] = costed ? json(e.mfu) : json(nullptr);
    j["peak_memory_bytes"] = costed ? json(e.memory.total()) : json(nullptr);
    j["comm_bytes"] = {{"intra", e.comm_bytes_intra}, {"inter", e.comm_bytes_inter}};
    j["cost_model"] = "schedule";  // every algorithm is costed by replaying its schedules
    configs.push_back(std::move(j));
  }
  return json{{"configs", configs}}.dump(2) + "\n";
}

}  // namespace longseq::plan
