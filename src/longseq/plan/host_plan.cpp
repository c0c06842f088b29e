#include "longseq/plan/host_plan.hpp"

#include <algorithm>
#include <fstream>
#include <string>

#include "longseq/core/device.hpp"
#include "longseq/core/threads.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/plan/hardware.hpp"
#include "longseq/train/trainer.hpp"

namespace longseq::plan {

namespace {

// The predicted peak grows with N; bisect on multiples of longest_step(c) tokens (2 per context
// rank and a whole number of 1024-token blocks, so every layout divides it).
int64_t longest_step(const train::TrainConfig& c) {
  return 1024 * 2 * static_cast<int64_t>(c.world / std::max(c.dp, 1));
}

std::vector<Longest> longest_per_policy(train::TrainConfig c, const std::string& mask_flag,
                                        int64_t tokens, double limit,
                                        const std::vector<std::string>& policies) {
  const int64_t step = longest_step(c);
  std::vector<Longest> out;
  for (const std::string& p : policies) {
    c.checkpoint = p;
    auto predict = [&](int64_t n) {
      c.seq = n;
      const std::string mk = !mask_flag.empty() ? mask_flag : c.mask_text();
      return host_trainer_memory(host_inputs(c, mk, std::max(tokens, n))).total();
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

HostTrainerInputs host_inputs(const train::TrainConfig& c, const std::string& mask_text,
                              int64_t data_tokens) {
  HostTrainerInputs in;
  in.model = c.model;
  in.seq = c.seq;
  in.world = c.world;
  in.dp = c.dp;
  in.nodes = c.nodes;
  in.algo = c.algo;
  in.balance = c.balance;
  const model::TrainMask tm = model::TrainMask::parse(mask_text, c.seq);
  in.mask = tm.base;
  in.document_mask = tm.document;
  in.checkpoint = model::parse_checkpoint_policy(c.checkpoint);
  in.loss = model::parse_loss_mode(c.loss);
  in.seq_selective_fraction = c.seq_selective_fraction;
  in.ffn_chunk = c.ffn_chunk;
  in.lm_tile = c.lm_tile;
  in.threads = core::default_threads(c.threads, c.world);
  in.bf16 = train::parse_precision(c.precision) == core::DType::bf16;  // the trainer's vocabulary
  in.data_tokens = data_tokens;
  return in;
}

DeviceTrainerInputs device_inputs(const train::TrainConfig& c, const std::string& mask_text,
                                  bool cuda) {
  core::require(c.world == 1, "plan", "the device run is one rank's (train --device cuda runs at ",
                "world 1); --gpus ", c.world);
  DeviceTrainerInputs in;
  in.model = c.model;
  in.seq = c.seq;
  in.balance = c.balance;
  const model::TrainMask tm = model::TrainMask::parse(mask_text, c.seq);
  in.document_mask = tm.document;
  in.mask_block = tm.block();
  in.block_mask_bytes = tm.base ? static_cast<int64_t>(tm.base->block_mask.size()) : 0;
  in.checkpoint = model::parse_checkpoint_policy(c.checkpoint);
  in.loss = model::parse_loss_mode(c.loss);
  in.seq_selective_fraction = c.seq_selective_fraction;
  in.ffn_chunk = c.ffn_chunk;
  in.lm_tile = c.lm_tile;
  in.offload = c.offload;
  in.bf16 = train::parse_precision(c.precision) == core::DType::bf16;
  in.cuda = cuda;
  return in;
}

HostPlan host_plan(const HostPlanRequest& a) {
  HostPlan r;
  train::TrainConfig& c = r.config;
  c = train::preset(a.preset);
  if (a.seq > 0) c.seq = a.seq;
  if (a.world > 0) c.world = a.world;
  // A GPU run: --device cuda, or a single GPU's profile.
  std::optional<Hardware> gpu_profile;
  if (!a.hardware.empty()) {
    gpu_profile = load_hardware(a.hardware);
    core::require(gpu_profile->single_gpu(), "plan", "--train with --hardware ", a.hardware,
                  ": not a single GPU's profile (`longseq calibrate --device cuda` writes one); "
                  "without --hardware, --train predicts this host");
  }
  const core::Device device =
      core::Device::parse(!a.device.empty() ? a.device : (gpu_profile ? "cuda" : "cpu"), "plan");
  core::require(!(gpu_profile && device.is_cpu()), "plan", "--hardware ", a.hardware,
                " is a GPU's profile but --device is cpu");
  if (!device.is_cpu()) {
    // Ranks sharing a GPU (train --device cuda --world P) hold P whole replicas there; the GPU
    // model covers one rank holding the whole sequence only.
    core::require(a.world <= 1, "plan", "--device ", device.str(),
                  ": the GPU memory model is world 1's (ranks sharing a GPU are not modelled); "
                  "--gpus ",
                  a.world);
    c.world = 1;
    c.dp = 1;
  }
  if (!a.algo.empty()) c.algo = a.algo;
  if (!a.balance.empty()) c.balance = a.balance;
  if (!a.loss.empty()) c.loss = a.loss;
  if (a.ffn_chunk >= 0) c.ffn_chunk = a.ffn_chunk;
  r.mask = !a.mask.empty() ? a.mask : c.mask_text();
  r.data_tokens = a.data_tokens >= 0
                      ? a.data_tokens
                      : static_cast<int64_t>(train::load_training_data(c.data).tokens.size());
  r.limit_given = a.memory_limit_gib > 0;
  r.limit_bytes = r.limit_given ? a.memory_limit_gib * (1 << 30) : host_memory_bytes();
  r.policies = a.checkpoints;
  if (r.policies.empty()) r.policies = {"none", "full", "selective++", "seq-selective"};
  // The mask is read once (a blocks:FILE mask at N = 4M is a 256 MiB file); only the policy
  // differs between the predictions.
  HostTrainerInputs in = host_inputs(c, r.mask, r.data_tokens);
  for (const std::string& p : r.policies) {
    c.checkpoint = p;
    in.checkpoint = model::parse_checkpoint_policy(p);
    r.memory.push_back(host_trainer_memory(in));
  }
  if (!device.is_cpu()) {
    DevicePlan d;
    d.device = device.str();
    DeviceTrainerInputs din = device_inputs(c, r.mask, true);
    for (const std::string& p : r.policies) {
      din.checkpoint = model::parse_checkpoint_policy(p);
      d.memory.push_back(device_trainer_memory(din));
    }
    const model::TrainMask tm = model::TrainMask::parse(r.mask, c.seq);
    // The trainer's MFU numerator (train/metrics.cpp step_flops), without the per-step document
    // ids (a document mask's pairs depend on the data).
    d.step_flops = 6.0 * static_cast<double>(model::ParamLayout(c.model).matmul_parameters()) *
                       static_cast<double>(c.seq) +
                   12.0 * c.model.layers * c.model.heads * c.model.head_dim *
                       model::visible_pairs(*tm.base, c.seq);
    if (gpu_profile) {
      d.hardware = gpu_profile->name;
      d.gpu = gpu_profile->gpu.name;
      d.limit_bytes = gpu_profile->memory_bytes;
      d.gemm_flops = din.bf16 ? gpu_profile->gpu.gemm_bf16_flops : gpu_profile->gpu.gemm_f32_flops;
    }
    r.device = d;
  }
  r.longest_step = longest_step(c);
  if (a.longest)
    r.longest = longest_per_policy(c, a.mask, r.data_tokens, r.limit_bytes, r.policies);
  return r;
}

nlohmann::json HostPlan::to_json(const std::string& preset) const {
  const train::TrainConfig& c = config;
  nlohmann::json out = {{"preset", preset},
                        {"seq", c.seq},
                        {"world", c.world},
                        {"algo", c.algo},
                        {"balance", c.balance},
                        {"mask", mask},
                        {"loss", c.loss},
                        {"ffn_chunk", c.ffn_chunk},
                        {"data_tokens", data_tokens},
                        {"limit_bytes", limit_bytes},
                        {"policies", nlohmann::json::array()}};
  for (size_t i = 0; i < policies.size(); ++i) {
    const HostTrainerMemory& r = memory[i];
    nlohmann::json items = nlohmann::json::object();
    for (const auto& [name, bytes] : r.items) items[name] = bytes * r.ranks;
    nlohmann::json p = {{"checkpoint", policies[i]},
                        {"predicted_bytes", r.total()},
                        {"phase", r.phase},
                        {"baseline", r.baseline},
                        {"data", r.data},
                        {"state", r.state},
                        {"ranks_times_items", items}};
    if (device) {
      // Beside the host's figure: the GPU's (memory.hpp device_trainer_memory).
      const DeviceTrainerMemory& g = device->memory[i];
      nlohmann::json gi = nlohmann::json::object();
      for (const auto& [name, bytes] : g.items) gi[name] = bytes;
      p["device"] = {
          {"predicted_bytes", g.peak},
          {"phase", g.phase},
          {"state", g.state},
          {"items", gi},
          {"fits", device->limit_bytes > 0 ? nlohmann::json(g.peak <= device->limit_bytes)
                                           : nlohmann::json(nullptr)}};
    }
    out["policies"].push_back(p);
  }
  if (device)
    out["device"] = {{"device", device->device},
                     {"hardware", device->hardware},
                     {"gpu", device->gpu},
                     {"limit_bytes", device->limit_bytes},
                     {"gemm_flops", device->gemm_flops},
                     {"step_flops", device->step_flops},
                     {"step_seconds_lower_bound", device->step_seconds_bound()}};
  if (!longest.empty()) {
    out["longest_step_tokens"] = longest_step;
    out["longest"] = nlohmann::json::array();
    for (const Longest& l : longest)
      out["longest"].push_back(
          {{"checkpoint", l.checkpoint}, {"seq", l.seq}, {"predicted_bytes", l.predicted_bytes}});
  }
  return out;
}

}  // namespace longseq::plan
