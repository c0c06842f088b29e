#include "longseq/plan/planner.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

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

// One ring collective over the cluster's `ranks` (all-gather or reduce-scatter of `bytes` in
// total, comm's ring): ranks - 1 steps of bytes / ranks each, every rank sending at once, so a
// step lasts as long as its slowest hop: the inter-node rail once the ring spans nodes.
Term ring_collective(const std::string& name, double bytes, int ranks, int gpn,
                     const Hardware& hw) {
  if (ranks <= 1) return {name, 0, "one rank: nothing to move"};
  const bool inter = ranks > gpn;
  const Link& link = inter ? hw.inter : hw.intra;
  const double p = ranks, eff = hw.corrections.collective_efficiency;
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

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// The splits of `o` in search order, and those left out with the reason.
std::pair<std::vector<Split>, std::vector<SplitNote>> splits_of(const PlanOptions& o) {
  std::vector<Split> run;
  std::vector<SplitNote> refused;
  for (int cp = 1; cp <= o.gpus; ++cp) {
    if (o.gpus % cp != 0) continue;
    const int dp = o.gpus / cp;
    auto listed = [](const std::vector<int>& v, int x) {
      return v.empty() || std::find(v.begin(), v.end(), x) != v.end();
    };
    if (!listed(o.dps, dp) || !listed(o.cps, cp)) continue;
    if (o.global_batch > 0 && o.global_batch % dp != 0) continue;
    Split s{dp, cp, o.global_batch > 0 ? o.global_batch / dp : 1};
    if (o.seq < cp) {
      refused.push_back({s, core::cat("cp ", cp, " exceeds the ", o.seq, " tokens of --seq")});
      continue;
    }
    run.push_back(s);
  }
  return {run, refused};
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
  core::require(seq >= 1, "plan", "--seq ", seq, " must be >= 1");
  core::require(memory_limit_bytes >= 0, "plan", "--memory-limit must be >= 0");
  core::require(seq_selective_fraction > 0 && seq_selective_fraction < 1, "plan",
                "--seq-selective-fraction ", seq_selective_fraction, " must be in (0, 1)");
  for (int d : dps)
    core::require(d >= 1 && gpus % d == 0, "plan", "--dp ", d, " does not divide --gpus ", gpus);
  for (int c : cps)
    core::require(c >= 1 && gpus % c == 0, "plan", "--cp ", c, " does not divide --gpus ", gpus);
  core::require(global_batch >= 0, "plan", "--global-batch ", global_batch, " must be >= 0");
  core::require(top >= 0, "plan", "--top ", top, " must be >= 0");
  core::require(prune_gap >= 0 && prune_gap < 1, "plan", "--prune-gap ", prune_gap,
                " must be in [0, 1)");
  model.config.validate();
  const auto [run, refused] = splits_of(*this);
  if (!run.empty()) return;
  if (!refused.empty())
    core::fail("plan", "--seq ", seq, " is shorter than every context-parallel degree left to ",
               "search (the smallest: ", refused.front().split.cp, ")");
  if (global_batch > 0)
    core::fail("plan", "--global-batch ", global_batch, " sequences: no data-parallel degree",
               dps.empty() ? "" : " in --dp ", join(dps), cps.empty() ? "" : " (with --cp ",
               join(cps), cps.empty() ? "" : ")", " divides both it and --gpus ", gpus);
  core::fail("plan", "no split of --gpus ", gpus, " is dp ", join(dps), " x cp ", join(cps),
             ": dp x cp must equal --gpus");
}

std::vector<Split> candidate_splits(const PlanOptions& o) {
  o.validate();
  return splits_of(o).first;
}

AttnProblem attention_problem(const PlanOptions& o, const Split& s) {
  AttnProblem p;
  p.n = o.seq;
  p.hq = o.model.config.heads;
  p.hkv = o.model.config.kv_heads;
  p.d = o.model.config.head_dim;
  p.world = s.cp;
  p.gpus_per_node = std::min(o.gpus_per_node, o.gpus);
  p.balance = o.balance;
  p.mask = o.mask;
  p.replicas = s.dp;
  p.whole_world = o.exhaustive;
  p.host_ranks = o.gpus;
  return p;
}

AttnProblem attention_problem(const PlanOptions& o) {
  return attention_problem(o, Split{1, o.gpus, 1});
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
  const Split& sp = cfg.split;
  const model::LlamaConfig& m = o.model.config;
  const Hardware& hw = o.hw;
  const AttnProblem prob = attention_problem(o, sp);
  const attention::Layout layout(prob.balance, prob.n, prob.world, prob.mask.block_size);
  const double t = static_cast<double>(layout.local_len());
  const double layers = static_cast<double>(m.layers);
  const double h = static_cast<double>(m.hidden), v = static_cast<double>(m.vocab);
  const double matmul_params =
      static_cast<double>(m.layer_parameters() - 2 * m.hidden);  // the two norms are not GEMMs
  const int ranks = o.gpus;                                      // dp x cp: ZeRO-3's group
  const double k_micro = static_cast<double>(sp.grad_accum);

  // Linear layers (GEMMs): 2 FLOP per parameter per token forward, twice that backward.
  const double lin_fwd_flops = 2 * t * matmul_params;
  // One host of threads: ranks beyond its cores time-share them (Hardware::compute_share).
  const double share = hw.compute_share(ranks);
  const double gemm_rate = hw.gemm_flops() * share;
  const Term lin_fwd{
      "linear forward / layer", lin_fwd_flops / gemm_rate,
      fmt("flops/gamma = %.4g FLOP / (%.4g FLOP/s peak * %.2f empirical GEMM efficiency * %.2f "
          "core share)",
          lin_fwd_flops, hw.peak_flops, hw.corrections.gemm_efficiency, share)};
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
  // ZeRO-3 over all dp x cp ranks (train/zero.hpp): a unit's parameters gathered in the training
  // dtype (bf16 on the GPU profiles) before each use, its gradient reduce-scattered in fp32.
  const int gpn = std::min(o.gpus_per_node, o.gpus);
  const double gather_e = hw.dtype_bytes;
  const double layer_p = static_cast<double>(m.layer_parameters());
  const double emb_p = v * h, final_p = h + (m.tied_embeddings ? 0.0 : v * h);
  auto gather = [&](const char* name, double params) {
    return ring_collective(name, gather_e * params, ranks, gpn, hw);
  };
  auto scatter = [&](const char* name, double params) {
    return ring_collective(name, 4 * params, ranks, gpn, hw);
  };
  const Term zero_ag = gather("ZeRO-3 all-gather / layer", layer_p);
  const Term zero_rs = scatter("ZeRO-3 reduce-scatter / layer (fp32 gradients)", layer_p);
  const Term ag_emb = gather("ZeRO-3 all-gather of the embedding", emb_p);
  const Term rs_emb = scatter("ZeRO-3 reduce-scatter of the embedding", emb_p);
  const Term ag_fin = gather("ZeRO-3 all-gather of the final norm and LM head", final_p);
  const Term rs_fin = scatter("ZeRO-3 reduce-scatter of the final norm and LM head", final_p);

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
  const double comp_b = recompute.seconds + lin_bwd.seconds + at_bwd.seconds;
  // The layers in the trainer's order (model/transformer.cpp): the forward of layer l prefetches
  // layer l + 1 (the last one the final unit); the backward of layer l prefetches l - 1 while the
  // unit released before it is reduce-scattered (the last layer: the LM head's units).
  const int nl = m.layers;
  const double head_rs = rs_fin.seconds + (m.tied_embeddings ? rs_emb.seconds : 0.0);
  double fwd_layers = 0, bwd_layers = 0, beyond = 0;  // beyond: comm past the compute
  for (int l = 0; l < nl; ++l) {
    const double comm = (l + 1 < nl ? zero_ag.seconds : ag_fin.seconds) + inter_busy_f;
    fwd_layers += std::max(comp_f, comm);
    beyond += std::max(0.0, comm - comp_f);
  }
  for (int l = nl - 1; l >= 0; --l) {
    const double comm =
        (l > 0 ? zero_ag.seconds : 0.0) + (l == nl - 1 ? head_rs : zero_rs.seconds) + inter_busy_b;
    bwd_layers += std::max(comp_b, comm);
    beyond += std::max(0.0, comm - comp_b);
  }
  // What nothing overlaps: the embedding's and layer 0's gathers before the forward (the tied head
  // gathers the embedding again), the last layer's before the backward, layer 0's and the
  // embedding's reduce-scatters after it (the optimizer waits for them).
  const double exposed_zero = ag_emb.seconds + zero_ag.seconds +
                              (m.tied_embeddings ? ag_emb.seconds : 0.0) + zero_ag.seconds +
                              zero_rs.seconds + rs_emb.seconds;
  const Term exposed{
      "ZeRO-3 not overlapped / micro-batch", exposed_zero,
      std::string("gathers of the embedding and layer 0 before the forward") +
          (m.tied_embeddings ? ", of the tied head at the LM head" : "") +
          ", of the last layer before the backward; reduce-scatters of layer 0 and the embedding "
          "after it"};
  const double head_flops = 6 * t * h * v;  // forward 2*T*h*V, backward 4*T*h*V
  const Term head{
      "LM head + loss (" + std::string(model::loss_mode_name(cfg.loss)) + ")",
      head_flops / gemm_rate,
      fmt("flops/gamma = %.4g FLOP (fwd 2ThV + bwd 4ThV; fused: no logits recompute)", head_flops)};
  const Term micro{"micro-batch", exposed_zero + fwd_layers + head.seconds + bwd_layers,
                   fmt("exposed ZeRO-3 + forward layers + LM head + backward layers = %.4g + "
                       "%.4g + %.4g + %.4g",
                       exposed_zero, fwd_layers, head.seconds, bwd_layers)};
  // The step's scalar all-reduces (train/step.cpp: token count, loss, gradient norm): comm's ring
  // all-reduce of one element is a chain of 2 (ranks - 1) hops, 2 (nodes - 1) of them across nodes.
  const int nodes = (ranks + gpn - 1) / gpn;
  const double hops = 2.0 * (ranks - 1), inter_hops = 2.0 * (nodes - 1);
  const Term allreduce{
      "step all-reduces (token count, loss, gradient norm)",
      3 * ((hops - inter_hops) * hw.intra.latency_s + inter_hops * hw.inter.latency_s),
      fmt("3 x scalar ring all-reduce over %.0f ranks: %.0f hops, %.0f of them "
          "inter-node",
          ranks, hops, inter_hops)};
  // AdamW over the rank's shard (fp32 master, gradient, m, v): reads 4 and writes 3 arrays, plus
  // the clip's read and write and the norm's read: 40 bytes per parameter at memory bandwidth.
  const double shard = static_cast<double>(m.parameters()) / ranks;
  const Term optimizer{
      "optimizer step (AdamW, clip, norm)",
      hw.memory_bandwidth_Bps > 0 ? 40 * shard / hw.memory_bandwidth_Bps : 0.0,
      hw.memory_bandwidth_Bps > 0
          ? fmt("40 B x %.4g parameters of the shard / %.4g B/s memory bandwidth", shard,
                hw.memory_bandwidth_Bps)
          : std::string("not modelled: the profile gives no memory_bandwidth_Bps")};
  ev.step_seconds = k_micro * micro.seconds + allreduce.seconds + optimizer.seconds;
  ev.terms = {lin_fwd, at_fwd, zero_ag, ag_fin,  lin_bwd, at_bwd, recompute, zero_rs,
              rs_fin,  ag_emb, rs_emb,  exposed, head,    micro,  allreduce, optimizer};
  ev.terms.push_back(
      {"step", ev.step_seconds,
       fmt("K micro-batches x micro-batch + all-reduces + optimizer = %.0f x %.4g + %.4g + %.4g",
           k_micro, micro.seconds, allreduce.seconds, optimizer.seconds) +
           "; not modelled: elementwise kernels, embedding lookup"});
  // The step by kind: each layer's max() is its compute plus what its communication takes beyond.
  const double kl = k_micro * layers;
  const std::string zlink = ranks > gpn ? "inter-node" : "intra-node";
  ev.summary = {
      {"attention compute", kl * (attn.forward.compute_s + attn.backward.compute_s),
       "the critical rank's compute, forward and backward, all layers and micro-batches"},
      {"attention exposed communication",
       kl * (attn.forward.exposed_comm_s() + attn.backward.exposed_comm_s()),
       "waits of the critical rank in the replayed schedules"},
      {"recomputation", kl * recompute.seconds, recompute.detail},
      {"linear layers", kl * (lin_fwd.seconds + lin_bwd.seconds), "forward and backward GEMMs"},
      {"LM head + loss", k_micro * head.seconds, head.detail},
      {"ZeRO-3 exposed", k_micro * (exposed_zero + beyond),
       "ring collectives over the " + zlink +
           " links: not overlapped, or beyond the layers' compute (sharing the NICs with "
           "attention's inter-node bytes)"},
      {"step all-reduces", allreduce.seconds, allreduce.detail + " (" + zlink + " links)"},
      {"optimizer", optimizer.seconds, optimizer.detail}};

  const double p = ranks;
  ev.tokens_per_sec_per_gpu = k_micro * sp.dp * static_cast<double>(o.seq) / (ev.step_seconds * p);
  const double model_flops =
      3 * k_micro * (layers * (lin_fwd_flops * p + attn.forward.flops_total) + 2 * t * h * v * p);
  ev.mfu = model_flops / (ev.step_seconds * p * hw.peak_flops);

  const double recompute_intra = cfg.checkpoint == model::CheckpointPolicy::full
                                     ? attn.forward.bytes_intra
                                 : cfg.checkpoint == model::CheckpointPolicy::seq_selective
                                     ? attn.partial_recompute.bytes_intra
                                     : 0.0;
  // ZeRO-3 bytes a rank sends per micro-batch: (p - 1) / p of every gathered and scattered unit.
  const bool zero_inter = ranks > gpn;
  const double gathered =
      gather_e * (2 * layers * layer_p + emb_p * (m.tied_embeddings ? 2 : 1) + final_p);
  const double scattered = 4 * (layers * layer_p + emb_p + final_p);
  const double zero_bytes = (gathered + scattered) * (p - 1) / p;
  ev.comm_bytes_intra =
      k_micro * (layers * (attn.forward.bytes_intra + attn.backward.bytes_intra + recompute_intra) +
                 (zero_inter ? 0.0 : zero_bytes));
  ev.comm_bytes_inter =
      k_micro * (layers * (attn.forward.bytes_inter + attn.backward.bytes_inter + recompute_inter) +
                 (zero_inter ? zero_bytes : 0.0));

  MemoryInputs mi;
  mi.model = m;
  mi.world = ranks;
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

namespace {

// The algorithms of one split: the candidates, or --algo's with "the ranks of one node" and "the
// whole group" named, so the printed configuration means the same to `train` on any topology.
std::vector<Algorithm> split_algos(const PlanOptions& o, const Split& s) {
  const int gpn = std::min(o.gpus_per_node, o.gpus);
  if (o.algos.empty()) return candidate_algos(s.cp, std::min(gpn, s.cp));
  std::vector<Algorithm> out;
  for (const auto& name : o.algos) {
    Algorithm a = Algorithm::parse(name);
    if (a.ring_family() && a.route == Route::double_ring && a.inner == 0)
      a.inner = std::min(gpn, s.cp);
    if (a.family == Algorithm::Family::ulysses) a.degree = s.cp;
    out.push_back(a);
  }
  return out;
}

// Runs task(i) for every i < n on every hardware thread; results go by index, so nothing depends
// on the thread count. An exception a task lets out is rethrown once all have finished.
template <class Task>
void parallel_tasks(size_t n, Task&& task) {
  std::vector<std::exception_ptr> broken(n);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) try {
        task(i);
      } catch (...) {
        broken[i] = std::current_exception();
      }
  };
  const size_t threads = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (const auto& e : broken)
    if (e) std::rethrow_exception(e);
}

// One (split, algorithm) of the search: its configurations' lower bounds, then its replay.
struct Item {
  size_t split = 0;
  Algorithm algo;
  int64_t first = 0;   // candidate index of its first configuration
  std::string reason;  // refused (validate_algo): every configuration infeasible
  std::vector<Evaluation> bounds;
  double bound_key = std::numeric_limits<double>::infinity();  // best bound of a possible config
  AttentionCost cost;
  bool replayed = false, pruned = false;
  double threshold = 0;  // the key it was pruned against
};

// The configurations of items, replayed: forward tasks shared by the algorithms of one split with
// equal forward_key (cached across waves), backward tasks per item; on every hardware thread,
// results by index so the outcome does not depend on the thread count.
void replay_wave(const PlanOptions& o, const std::vector<Split>& splits, std::vector<Item>& items,
                 const std::vector<size_t>& wave,
                 std::map<std::pair<size_t, std::string>, AttentionCost>& forwards,
                 std::map<std::pair<size_t, std::string>, std::string>& forward_reasons) {
  struct Task {
    size_t item;
    bool forward;
    double size;
  };
  std::vector<Task> tasks;
  std::vector<std::pair<size_t, std::string>> fkeys(wave.size());
  std::map<std::pair<size_t, std::string>, size_t> planned;  // forward key -> task's item
  for (size_t w = 0; w < wave.size(); ++w) {
    const Item& it = items[wave[w]];
    const Split& s = splits[it.split];
    fkeys[w] = {it.split, forward_key(it.algo).name()};
    const Algorithm& a = it.algo;
    const double ring = a.ring_family()                      ? s.cp
                        : a.family == Algorithm::Family::usp ? s.cp / std::max(1, a.degree)
                        : a.family == Algorithm::Family::startrail
                            ? s.cp / std::max(1, a.team * a.team)
                            : 1.0;
    const double size = static_cast<double>(s.cp) * ring;
    if (!forwards.count(fkeys[w]) && !forward_reasons.count(fkeys[w]) && !planned.count(fkeys[w])) {
      planned[fkeys[w]] = wave[w];
      tasks.push_back({wave[w], true, size});
    }
    tasks.push_back({wave[w], false, size});
  }
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const Task& x, const Task& y) { return x.size > y.size; });
  std::vector<AttentionCost> results(tasks.size());
  std::vector<std::string> reasons(tasks.size());
  parallel_tasks(tasks.size(), [&](size_t t) {
    const Item& it = items[tasks[t].item];
    const AttnProblem prob = attention_problem(o, splits[it.split]);
    try {
      if (tasks[t].forward)
        results[t] = cost_forward(it.algo, prob, o.hw, o.seq_selective_fraction);
      else
        cost_backward(it.algo, prob, o.hw, results[t]);
    } catch (const core::Error& e) {
      reasons[t] = e.what();
    }
  });
  std::map<size_t, size_t> backward_of;  // item -> task
  for (size_t t = 0; t < tasks.size(); ++t) {
    const auto key =
        std::pair{items[tasks[t].item].split, forward_key(items[tasks[t].item].algo).name()};
    if (!tasks[t].forward) {
      backward_of[tasks[t].item] = t;
    } else if (reasons[t].empty()) {
      forwards[key] = std::move(results[t]);
    } else {
      forward_reasons[key] = reasons[t];
    }
  }
  for (size_t w = 0; w < wave.size(); ++w) {
    Item& it = items[wave[w]];
    const size_t bt = backward_of[wave[w]];
    // cost_attention's order: the forward's reason first. A reason names its algorithm, so a
    // shared forward that failed is run again under this algorithm's own name.
    std::string reason;
    AttentionCost c;
    if (forward_reasons.count(fkeys[w])) {
      try {
        c = cost_forward(it.algo, attention_problem(o, splits[it.split]), o.hw,
                         o.seq_selective_fraction);
      } catch (const core::Error& e) {
        reason = e.what();
      }
    } else {
      c = forwards[fkeys[w]];
    }
    if (reason.empty()) reason = reasons[bt];
    it.replayed = true;
    if (!reason.empty()) {
      it.reason = reason;
      continue;
    }
    c.backward = std::move(results[bt].backward);
    c.buffer_bytes_backward = results[bt].buffer_bytes_backward;
    it.cost = std::move(c);
  }
}

}  // namespace

PlanResult plan_search(const PlanOptions& o) {
  o.validate();
  PlanResult res;
  std::tie(res.splits, res.refused) = splits_of(o);
  std::vector<model::CheckpointPolicy> cps = o.checkpoints;
  if (cps.empty())
    cps = {model::CheckpointPolicy::none, model::CheckpointPolicy::full,
           model::CheckpointPolicy::selective_pp, model::CheckpointPolicy::seq_selective};
  std::vector<model::LossMode> losses = o.losses;
  if (losses.empty()) losses = {model::LossMode::fused, model::LossMode::unfused};
  const double limit = o.memory_limit_bytes > 0 ? o.memory_limit_bytes : o.hw.memory_bytes;

  // Every (split, algorithm) in candidate order, with the lower bounds of its configurations.
  std::vector<Item> items;
  int64_t index = 0;
  for (size_t si = 0; si < res.splits.size(); ++si)
    for (const Algorithm& a : split_algos(o, res.splits[si])) {
      Item it;
      it.split = si;
      it.algo = a;
      it.first = index;
      index += static_cast<int64_t>(cps.size() * losses.size());
      items.push_back(std::move(it));
    }
  // The bounds: linear in the ranks per item, on every hardware thread.
  parallel_tasks(items.size(), [&](size_t i) {
    Item& it = items[i];
    try {
      const AttentionCost lb = attention_lower_bound(
          it.algo, attention_problem(o, res.splits[it.split]), o.hw, o.seq_selective_fraction);
      for (model::CheckpointPolicy cp : cps)
        for (model::LossMode lm : losses) {
          Evaluation b = evaluate(o, {it.algo, cp, lm, res.splits[it.split]}, lb);
          if (b.feasible) it.bound_key = std::min(it.bound_key, b.key());
          it.bounds.push_back(std::move(b));
        }
    } catch (const core::Error& e) {
      it.reason = e.what();
    }
  });

  // Search order: splits by cp ascending, inside a split by bound (ties: candidate order). A
  // pair none of whose configurations fits even without its attention buffers is left out when
  // pruning (said so from its bound); replaying everything (--top 0, --exhaustive) replays it too,
  // so that every configuration gets its exact numbers.
  const bool prune = o.top > 0 && !o.exhaustive;
  std::vector<size_t> order;
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].reason.empty() && (std::isfinite(items[i].bound_key) || !prune))
      order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (items[x].split != items[y].split) return items[x].split < items[y].split;
    return items[x].bound_key < items[y].bound_key;
  });
  // The keys of the feasible configurations replayed so far, and the top-th smallest.
  std::vector<double> keys;
  auto threshold = [&] {
    if (!prune || keys.size() < static_cast<size_t>(o.top))
      return std::numeric_limits<double>::infinity();
    std::nth_element(keys.begin(), keys.begin() + (o.top - 1), keys.end());
    return keys[static_cast<size_t>(o.top - 1)];
  };
  // Waves of a fixed size: what is replayed depends on the order only, never on the threads.
  constexpr size_t kWave = 4;
  std::map<std::pair<size_t, std::string>, AttentionCost> forwards;
  std::map<std::pair<size_t, std::string>, std::string> forward_reasons;
  for (size_t next = 0; next < order.size();) {
    const double thr = threshold(), cut = thr * (1 - o.prune_gap);
    std::vector<size_t> wave;
    for (; next < order.size() && wave.size() < kWave; ++next) {
      Item& it = items[order[next]];
      if (it.bound_key > cut) {
        it.pruned = true;
        it.threshold = thr;
        continue;
      }
      wave.push_back(order[next]);
    }
    if (wave.empty()) continue;
    replay_wave(o, res.splits, items, wave, forwards, forward_reasons);
    for (size_t i : wave) {
      const Item& it = items[i];
      if (!it.reason.empty()) continue;
      for (model::CheckpointPolicy cp : cps)
        for (model::LossMode lm : losses) {
          const Evaluation e = evaluate(o, {it.algo, cp, lm, res.splits[it.split]}, it.cost);
          if (e.feasible) keys.push_back(e.key());
        }
    }
  }

  // The configurations: replayed ones exactly, the others from their bounds.
  for (Item& it : items) {
    int64_t idx = it.first;
    size_t b = 0;
    if (it.replayed) ++res.replayed;
    if (it.pruned) ++res.pruned;
    for (model::CheckpointPolicy cp : cps)
      for (model::LossMode lm : losses) {
        const PlanConfig cfg{it.algo, cp, lm, res.splits[it.split]};
        Evaluation ev;
        if (!it.reason.empty()) {
          ev.config = cfg;
          ev.reason = it.reason;
        } else if (it.replayed) {
          ev = evaluate(o, cfg, it.cost);
          ev.bound_seconds = it.bounds[b].step_seconds;
        } else {
          const Evaluation& lb = it.bounds[b];
          ev.config = cfg;
          ev.bound_seconds = lb.step_seconds;
          if (!lb.feasible) {
            ev.reason =
                fmt("peak memory at least %.2f GiB (before the attention's buffers) "
                    "exceeds the limit %.2f GiB",
                    lb.memory.total() / (1 << 30), limit / (1 << 30));
          } else {
            ev.pruned = true;
            ev.reason =
                fmt("pruned: step at least %.4g s (%.4g s per sequence), more than "
                    "the %.0f best replayed (the last: %.4g s per sequence)",
                    lb.step_seconds, lb.key(), o.top, it.threshold);
            if (o.prune_gap > 0) ev.reason += fmt(" less the gap %.3g", o.prune_gap);
          }
        }
        ev.index = idx++;
        ++b;
        res.configs.push_back(std::move(ev));
      }
  }
  auto rank = [](const Evaluation& e) { return e.feasible ? 0 : e.pruned ? 1 : 2; };
  std::sort(res.configs.begin(), res.configs.end(), [&](const Evaluation& x, const Evaluation& y) {
    if (rank(x) != rank(y)) return rank(x) < rank(y);
    if (x.feasible && x.key() != y.key()) return x.key() < y.key();
    if (x.pruned) {
      const double bx = x.bound_seconds / (x.config.split.dp * x.config.split.grad_accum);
      const double by = y.bound_seconds / (y.config.split.dp * y.config.split.grad_accum);
      if (bx != by) return bx < by;
    }
    return x.index < y.index;
  });
  return res;
}

std::vector<Evaluation> plan(const PlanOptions& o) {
  return plan_search(o).configs;
}

nlohmann::json configs_json(const std::vector<Evaluation>& evals) {
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
    j["dp"] = e.config.split.dp;
    j["cp"] = e.config.split.cp;
    j["grad_accum"] = e.config.split.grad_accum;
    j["feasible"] = e.feasible;
    j["pruned"] = e.pruned;
    j["reason"] = e.reason;
    const bool costed = e.step_seconds > 0;
    j["step_seconds"] = costed ? json(e.step_seconds) : json(nullptr);
    j["lower_bound_seconds"] = e.bound_seconds > 0 ? json(e.bound_seconds) : json(nullptr);
    j["tokens_per_sec_per_gpu"] = costed ? json(e.tokens_per_sec_per_gpu) : json(nullptr);
    j["mfu"] = costed ? json(e.mfu) : json(nullptr);
    j["peak_memory_bytes"] = costed ? json(e.memory.total()) : json(nullptr);
    j["comm_bytes"] = {{"intra", e.comm_bytes_intra}, {"inter", e.comm_bytes_inter}};
    j["cost_model"] = "schedule";  // every algorithm is costed by replaying its schedules
    configs.push_back(std::move(j));
  }
  return json{{"configs", configs}};
}

std::string plan_json(const std::vector<Evaluation>& evals) {
  return configs_json(evals).dump(2) + "\n";
}

}  // namespace longseq::plan
