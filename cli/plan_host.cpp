// `longseq plan --train PRESET`: the peak RSS of `longseq train --preset PRESET` on this host
// (plan/memory.hpp host_trainer_memory), one line per checkpoint policy, the breakdown of each,
// and with --longest the longest sequence each policy fits in the memory limit.
#include "plan_host.hpp"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "longseq/core/error.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/train/trainer.hpp"

namespace longseq::cli {

namespace {

double mib(double b) {
  return b / (1 << 20);
}

// MemTotal of /proc/meminfo in bytes (0 when unreadable).
double host_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

// The preset's --mask (with --doc-mask and the model's sliding_window).
std::string mask_of(const train::TrainConfig& c) {
  return c.mask_text();
}

// The predicted peak grows with N; bisect on multiples of longest_step(c) tokens (2 per context
// rank and a whole number of 1024-token blocks, so every layout divides it).
int64_t longest_step(const train::TrainConfig& c) {
  return 1024 * 2 * static_cast<int64_t>(c.world / std::max(c.dp, 1));
}

struct Longest {
  std::string checkpoint;
  int64_t seq = 0;  ///< 0: not even one step fits
  double predicted_bytes = 0;
};

std::vector<Longest> longest_per_policy(train::TrainConfig c, const std::string& mask_flag,
                                        int64_t tokens, double limit,
                                        const std::vector<std::string>& policies) {
  const int64_t step = longest_step(c);
  std::vector<Longest> out;
  for (const std::string& p : policies) {
    c.checkpoint = p;
    auto predict = [&](int64_t n) {
      c.seq = n;
      const std::string mk = !mask_flag.empty() ? mask_flag : mask_of(c);
      return plan::host_trainer_memory(host_inputs(c, mk, std::max(tokens, n))).total();
    };
    int64_t lo = 0, hi = 1;  // in steps: lo fits (0: none), hi does not
    while (hi <= (int64_t{1} << 16) && predict(hi * step) <= limit) lo = hi, hi *= 2;
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      (predict(mid * step) <= limit ? lo : hi) = mid;
    }
    out.push_back({p, lo * step, lo > 0 ? predict(lo * step) : 0});
  }
  return out;
}

}  // namespace

plan::HostTrainerInputs host_inputs(const train::TrainConfig& c, const std::string& mask_text,
                                    int64_t data_tokens) {
  plan::HostTrainerInputs in;
  const auto& m = c.model;
  in.model.name = c.preset;
  in.model.layers = m.layers;
  in.model.hidden = m.hidden;
  in.model.heads = m.heads;
  in.model.kv_heads = m.kv_heads;
  in.model.head_dim = m.head_dim;
  in.model.intermediate = m.intermediate;
  in.model.vocab = m.vocab;
  in.tied_embeddings = m.tied_embeddings;
  in.seq = c.seq;
  in.world = c.world;
  in.dp = c.dp;
  in.nodes = c.nodes;
  in.algo = c.algo;
  in.balance = c.balance;
  const model::TrainMask tm = model::TrainMask::parse(mask_text, c.seq);
  in.mask = tm.base;
  in.document_mask = tm.document;
  in.checkpoint = plan::parse_checkpoint(c.checkpoint);
  in.loss = plan::parse_loss(c.loss);
  in.seq_selective_fraction = c.seq_selective_fraction;
  in.ffn_chunk = c.ffn_chunk;
  in.lm_tile = c.lm_tile;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  in.threads = c.threads > 0 ? c.threads : std::max(1, hw / c.world);
  in.bf16 = train::parse_precision(c.precision) == core::DType::bf16;  // the trainer's vocabulary
  in.data_tokens = data_tokens;
  return in;
}

int plan_host(const HostPlanArgs& a) {
  train::TrainConfig c = train::preset(a.preset);
  if (a.seq > 0) c.seq = a.seq;
  if (a.world > 0) c.world = a.world;
  if (!a.algo.empty()) c.algo = a.algo;
  if (!a.balance.empty()) c.balance = a.balance;
  if (!a.loss.empty()) c.loss = a.loss;
  if (a.ffn_chunk >= 0) c.ffn_chunk = a.ffn_chunk;
  const std::string mask = !a.mask.empty() ? a.mask : mask_of(c);
  int64_t tokens = a.data_tokens;
  if (tokens < 0) tokens = static_cast<int64_t>(train::load_training_data(c.data).tokens.size());
  const double limit =
      a.memory_limit_gib > 0 ? a.memory_limit_gib * (1 << 30) : host_memory_bytes();
  std::vector<std::string> policies = a.checkpoints;
  if (policies.empty()) policies = {"none", "full", "selective++", "seq-selective"};

  if (a.json) {
    nlohmann::json out = {{"preset", a.preset},
                          {"seq", c.seq},
                          {"world", c.world},
                          {"algo", c.algo},
                          {"balance", c.balance},
                          {"mask", mask},
                          {"loss", c.loss},
                          {"ffn_chunk", c.ffn_chunk},
                          {"data_tokens", tokens},
                          {"limit_bytes", limit},
                          {"policies", nlohmann::json::array()}};
    for (const std::string& p : policies) {
      c.checkpoint = p;
      const plan::HostTrainerMemory r = plan::host_trainer_memory(host_inputs(c, mask, tokens));
      nlohmann::json items = nlohmann::json::object();
      for (const auto& [name, bytes] : r.items) items[name] = bytes * r.ranks;
      out["policies"].push_back({{"checkpoint", p},
                                 {"predicted_bytes", r.total()},
                                 {"phase", r.phase},
                                 {"baseline", r.baseline},
                                 {"data", r.data},
                                 {"state", r.state},
                                 {"ranks_times_items", items}});
    }
    if (a.longest) {
      out["longest_step_tokens"] = longest_step(c);
      out["longest"] = nlohmann::json::array();
      for (const Longest& l : longest_per_policy(c, a.mask, tokens, limit, policies))
        out["longest"].push_back(
            {{"checkpoint", l.checkpoint}, {"seq", l.seq}, {"predicted_bytes", l.predicted_bytes}});
    }
    std::printf("%s\n", out.dump(1).c_str());
    return 0;
  }
  std::printf(
      "plan --train %s: peak RSS of `longseq train` on this host (%d ranks as threads of one "
      "process), %s, N = %lld, algo %s, balance %s, mask %s, loss %s, ffn chunk %lld, "
      "data %lld tokens; limit %.2f GiB%s\n",
      a.preset.c_str(), c.world, c.model.describe().c_str(), static_cast<long long>(c.seq),
      c.algo.c_str(), c.balance.c_str(), mask.c_str(), c.loss.c_str(),
      static_cast<long long>(c.ffn_chunk), static_cast<long long>(tokens), limit / (1 << 30),
      a.memory_limit_gib > 0 ? " (--memory-limit)" : " (MemTotal)");
  std::printf("%-14s %12s %10s  %s\n", "checkpoint", "peak MiB", "phase", "fits");
  std::vector<plan::HostTrainerMemory> results;
  for (const std::string& p : policies) {
    c.checkpoint = p;
    const plan::HostTrainerMemory r = plan::host_trainer_memory(host_inputs(c, mask, tokens));
    std::printf("%-14s %12.1f %10s  %s\n", p.c_str(), mib(r.total()), r.phase.c_str(),
                r.total() <= limit ? "yes" : "no");
    results.push_back(r);
  }
  if (a.explain)
    for (size_t i = 0; i < policies.size(); ++i) {
      const plan::HostTrainerMemory& r = results[i];
      std::printf("\n%s: peak in the %s phase\n", policies[i].c_str(), r.phase.c_str());
      std::printf("  %-64s %10.1f MiB\n", "baseline (binary, libraries, runtime; measured)",
                  mib(r.baseline));
      std::printf("  %-64s %10.1f MiB\n", "token file (uint32 per token)", mib(r.data));
      std::printf("  %-64s %10.1f MiB\n", "ZeRO-3 state, all ranks (params, grads, m, v, decay)",
                  mib(r.state));
      for (const auto& [name, bytes] : r.items)
        std::printf("  %d x %-60s %10.1f MiB\n", r.ranks, name.c_str(), mib(bytes * r.ranks));
      std::printf("  %-64s %10.1f MiB\n", "total", mib(r.total()));
    }
  if (a.longest) {
    std::printf("\nlongest N within %.2f GiB (multiples of %lld tokens):\n", limit / (1 << 30),
                static_cast<long long>(longest_step(c)));
    for (const Longest& l : longest_per_policy(c, a.mask, tokens, limit, policies))
      std::printf("  %-14s N = %9lld  (%.1f MiB predicted)\n", l.checkpoint.c_str(),
                  static_cast<long long>(l.seq), mib(l.predicted_bytes));
  }
  return 0;
}

}  // namespace longseq::cli
