// `longseq plan` as one call (request.hpp): the flags' texts parsed into PlanOptions or a
// HostPlanRequest, the answer, and its JSON.
#include "longseq/plan/request.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "longseq/core/device.hpp"
#include "longseq/core/error.hpp"

namespace longseq::plan {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// A comma list of degrees ("1,2,4"), each a positive count.
std::vector<int> degrees(const std::string& text, const char* flag) {
  std::vector<int> out;
  for (const std::string& item : split_list(text)) {
    const int64_t v = parse_count(item, flag);
    core::require(v <= (1 << 30), "plan", flag, " ", item, " is larger than any cluster");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

bool given(const PlanRequest& r, const char* field) {
  return std::find(r.given.begin(), r.given.end(), field) != r.given.end();
}

}  // namespace

int64_t parse_global_batch(const std::string& text, int64_t seq) {
  if (text.empty()) return 0;
  std::string lower = text;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* unit : {"sequences", "seqs", "seq"}) {
    const std::string u = unit;
    if (lower.size() > u.size() && lower.compare(lower.size() - u.size(), u.size(), u) == 0)
      return parse_count(text.substr(0, text.size() - u.size()), "--global-batch");
  }
  const int64_t tokens = parse_count(text, "--global-batch");
  core::require(seq > 0 && tokens % seq == 0, "plan", "--global-batch ", text, " (", tokens,
                " tokens) is not a whole number of --seq ", seq,
                "-token sequences; give a multiple of ", seq, " tokens, or sequences as '",
                std::max<int64_t>(1, seq > 0 ? tokens / seq : 1), "seq'");
  return tokens / seq;
}

PlanOptions plan_options(const PlanRequest& r, std::vector<std::string>* warnings) {
  PlanOptions o;
  o.model = load_model(r.model);
  o.seq = parse_count(r.seq, "--seq");
  o.gpus = r.gpus;
  o.gpus_per_node = r.gpus_per_node;
  o.hw = load_hardware(r.hardware);
  if (o.hw.host_cores > 0 && warnings)
    if (const std::string m = host_profile_mismatch(r.hardware); !m.empty()) warnings->push_back(m);
  core::require(r.memory_limit >= 0, "plan", "--memory-limit ", r.memory_limit, " must be >= 0");
  o.memory_limit_bytes = r.memory_limit * (1 << 30);
  o.mask = attention::MaskSpec::parse(r.mask, false, o.seq);
  o.balance = attention::parse_balance(r.balance);
  o.seq_selective_fraction = r.seq_selective_fraction;
  o.algos = split_list(r.algo);
  for (const auto& c : split_list(r.checkpoint))
    o.checkpoints.push_back(model::parse_checkpoint_policy(c));
  for (const auto& l : split_list(r.loss)) o.losses.push_back(model::parse_loss_mode(l));
  o.dps = degrees(r.dp, "--dp");
  o.cps = degrees(r.cp, "--cp");
  o.global_batch = parse_global_batch(r.global_batch, o.seq);
  o.top = r.top;
  o.prune_gap = r.prune_gap >= 0 ? r.prune_gap : r.gpus > kExactUpToGpus ? kAutoPruneGap : 0.0;
  o.exhaustive = r.exhaustive;
  o.validate();
  return o;
}

HostPlanRequest host_request(const PlanRequest& r) {
  HostPlanRequest h;
  h.preset = r.train;
  if (given(r, "seq")) h.seq = parse_count(r.seq, "--seq");
  if (given(r, "gpus")) h.world = r.gpus;
  if (given(r, "mask")) h.mask = r.mask;
  h.algo = r.algo;
  if (given(r, "balance")) h.balance = r.balance;
  h.loss = r.loss;
  h.checkpoints = split_list(r.checkpoint);
  h.ffn_chunk = r.ffn_chunk;
  h.data_tokens = r.data_tokens;
  h.memory_limit_gib = r.memory_limit;
  h.longest = r.longest;
  h.device = r.device;
  if (given(r, "hardware")) h.hardware = r.hardware;
  return h;
}

PlanReport run_plan(const PlanRequest& r) {
  PlanReport rep;
  rep.request = r;
  if (!r.train.empty()) {
    rep.host = host_plan(host_request(r));
    return rep;
  }
  // The cluster planner models GPUs already; --device names the trainer's device for --train.
  core::require(core::Device::parse(r.device, "plan").is_cpu(), "plan", "--device ", r.device,
                " applies to --train PRESET (the GPU memory of `longseq train --device cuda`)");
  rep.options = plan_options(r, &rep.warnings);
  rep.result = plan_search(*rep.options);
  return rep;
}

const Evaluation* PlanReport::winner() const {
  if (result.configs.empty() || !result.configs.front().feasible) return nullptr;
  return &result.configs.front();
}

nlohmann::json PlanReport::to_json() const {
  using nlohmann::json;
  if (host) {
    json j = host->to_json(request.train);
    j["warnings"] = warnings;
    return j;
  }
  const PlanOptions& o = *options;
  json j = configs_json(result.configs);
  json splits = json::array(), refused = json::array();
  for (const Split& s : result.splits)
    splits.push_back({{"dp", s.dp}, {"cp", s.cp}, {"grad_accum", s.grad_accum}});
  for (const SplitNote& s : result.refused)
    refused.push_back({{"dp", s.split.dp}, {"cp", s.split.cp}, {"reason", s.reason}});
  j["search"] = {{"gpus", o.gpus},
                 {"gpus_per_node", o.gpus_per_node},
                 {"seq", o.seq},
                 {"global_batch_sequences", o.global_batch > 0 ? json(o.global_batch) : json()},
                 {"splits", splits},
                 {"refused_splits", refused},
                 {"algorithms_replayed", result.replayed},
                 {"algorithms_pruned", result.pruned},
                 {"exact_top", o.exhaustive ? 0 : o.top},
                 {"prune_gap", o.prune_gap},
                 {"exhaustive", o.exhaustive}};
  json w = nullptr;
  if (const Evaluation* b = winner()) {
    auto terms = [](const std::vector<Term>& ts) {
      json a = json::array();
      for (const Term& t : ts)
        a.push_back({{"name", t.name}, {"seconds", t.seconds}, {"detail", t.detail}});
      return a;
    };
    json mem = json::array();
    for (const auto& [name, bytes] : b->memory.items())
      mem.push_back({{"name", name}, {"bytes", bytes}});
    w = {{"dp", b->config.split.dp},
         {"cp", b->config.split.cp},
         {"grad_accum", b->config.split.grad_accum},
         {"algo", b->config.algo.name()},
         {"checkpoint", std::string(model::checkpoint_policy_name(b->config.checkpoint))},
         {"loss", std::string(model::loss_mode_name(b->config.loss))},
         {"step_seconds", b->step_seconds},
         {"terms", terms(b->terms)},
         {"summary", terms(b->summary)},
         {"memory", mem}};
  }
  j["winner"] = w;
  j["warnings"] = warnings;
  return j;
}

nlohmann::json plan_request_json(const PlanRequest& r) {
  return run_plan(r).to_json();
}

}  // namespace longseq::plan
