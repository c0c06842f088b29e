// Metrics of the training loop (train/run.hpp): a step's record with MFU (the formula of
// trainer.hpp), the per-step line, and metrics.json.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <limits>
#include <utility>

#include "longseq/core/error.hpp"
#include "longseq/core/io.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/train/device.hpp"
#include "longseq/train/run.hpp"

namespace longseq::train {

using nlohmann::json;

double step_flops(const RunSetup& s, const std::vector<std::vector<int32_t>>& docs) {
  const TrainConfig& cfg = s.cfg;
  const auto& m = cfg.model;
  const double micro = cfg.grad_accum;
  const double tokens = static_cast<double>(cfg.seq) * cfg.dp * micro;
  // Pairs of this replica's sequences (their documents), times the dp replicas.
  double pairs = 0;
  if (docs.empty())
    pairs = micro * model::visible_pairs(*s.parsed.mask.with_documents({}), cfg.seq);
  for (const std::vector<int32_t>& d : docs)
    pairs += model::visible_pairs(*s.parsed.mask.with_documents(d), cfg.seq);
  return 6.0 * static_cast<double>(s.layout.matmul_parameters()) * tokens +
         12.0 * m.layers * m.heads * m.head_dim * pairs * cfg.dp;
}

StepRecord measure(RankRun& run, const StepResult& res) {
  const TrainConfig& cfg = run.s.cfg;
  double per[2 + core::kNumOps] = {res.seconds - res.wait_s, res.wait_s};
  std::copy(res.ops.s.begin(), res.ops.s.end(), per + 2);
  run.world.all_reduce(per, per, 2 + core::kNumOps, core::DType::f64);
  double mx[2] = {res.seconds,
                  static_cast<double>(res.saved_floats_peak) * 4.0 / (1024.0 * 1024.0)};
  run.world.all_reduce(mx, mx, 2, core::DType::f64, comm::ReduceOp::max);
  const double slowest = mx[0];
  StepRecord r;
  r.step = res.step;
  r.loss = res.loss;
  r.lr = res.lr;
  r.grad_norm = res.grad_norm;
  r.seconds = slowest;
  r.tokens_per_sec = static_cast<double>(cfg.seq) * cfg.dp * cfg.grad_accum / slowest / cfg.world;
  r.mfu = step_flops(run.s, res.docs) / (slowest * run.s.peak_gflops * 1e9);
  r.peak_rss_mib = static_cast<double>(core::peak_rss_bytes()) / (1024.0 * 1024.0);
  r.device_peak_mib = device_peak_mib(run.s.parsed.device);
  r.compute_s = per[0] / cfg.world;
  r.comm_wait_s = per[1] / cfg.world;
  r.saved_activation_mib = mx[1];
  for (int i = 0; i < core::kNumOps; ++i) r.ops.s[static_cast<size_t>(i)] = per[2 + i] / cfg.world;
  // Each rank's categories add up to at most its own step, which is at most the slowest's.
  r.other_s = std::max(0.0, slowest - r.ops.total());
  return r;
}

void report(RankRun& run, const StepRecord& r) {
  if (!run.writer) return;
  const TrainConfig& cfg = run.s.cfg;
  if (!cfg.quiet) {
    run.progress.clear();  // the step line takes the progress line's place, which follows it
    std::printf(
        "step %4lld  loss %.4f  lr %.2e  |g| %.3f  %.2fs  %.0f tok/s/rank  mfu %.3f  "
        "rss %.0f MiB  saved %.0f MiB  compute %.2fs  wait %.2fs\n",
        static_cast<long long>(r.step), r.loss, r.lr, r.grad_norm, r.seconds, r.tokens_per_sec,
        r.mfu, r.peak_rss_mib, r.saved_activation_mib, r.compute_s, r.comm_wait_s);
    // The per-op account, seconds (mean over ranks; docs/performance.md).
    const core::OpTimes& o = r.ops;
    using core::Op;
    std::printf(
        "           attn f/b/r %.2f/%.2f/%.2f  gemm %.2f  norm+rope+swiglu %.2f  lm %.2f  "
        "opt %.2f  zero ag/rs %.2f/%.2f  wait %.2f  other %.2f\n",
        o[Op::attn_forward], o[Op::attn_backward], o[Op::attn_recompute], o[Op::gemm],
        o[Op::norm_rope_swiglu], o[Op::lm_head_loss], o[Op::optimizer], o[Op::zero_gather],
        o[Op::zero_reduce_scatter], o[Op::comm_wait], r.other_s);
    if (!run.s.parsed.device.is_cpu())
      std::printf("           %s: peak %.0f MiB of tensors\n", cfg.device.c_str(),
                  r.device_peak_mib);
    std::fflush(stdout);
    run.progress.update(r.step, r.seconds, r.tokens_per_sec * cfg.world);
  }
  if (!cfg.out.empty()) {
    write_metrics(cfg.out, run.s.config, run.records);
    std::vector<CurvePoint> curve;
    for (const StepRecord& x : run.records)
      curve.push_back({x.step, x.loss, x.tokens_per_sec * cfg.world});
    core::write_file_atomic(
        cfg.out + "/train.svg",
        train_curve_svg(curve, core::cat("longseq train: ", cfg.preset, ", seq ", cfg.seq,
                                         ", world ", cfg.world, " (tokens/s: all ranks)")));
  }
}

json record_json(const StepRecord& r) {
  json ops = json::object();
  for (int i = 0; i < core::kNumOps; ++i)
    ops[core::op_name(static_cast<core::Op>(i))] = r.ops.s[static_cast<size_t>(i)];
  ops["other"] = r.other_s;
  return {{"step", r.step},
          {"loss", r.loss},
          {"lr", r.lr},
          {"grad_norm", r.grad_norm},
          {"seconds", r.seconds},
          {"tokens_per_sec", r.tokens_per_sec},
          {"mfu", r.mfu},
          {"peak_rss_mib", r.peak_rss_mib},
          {"device_peak_mib", r.device_peak_mib},
          {"compute_s", r.compute_s},
          {"comm_wait_s", r.comm_wait_s},
          {"saved_activation_mib", r.saved_activation_mib},
          {"ops", ops}};
}

StepRecord record_from_json(const json& j, const std::string& where) {
  // Every key record_json writes must be back, a number (step an integer): a key added there and
  // not here fails the round trip of tests/train/checkpoint_reliability_test.cpp.
  core::require(j.is_object(), "train", where, ": expected an object, got ", j.type_name());
  StepRecord r;
  const std::pair<const char*, double*> fields[] = {
      {"loss", &r.loss},
      {"lr", &r.lr},
      {"grad_norm", &r.grad_norm},
      {"seconds", &r.seconds},
      {"tokens_per_sec", &r.tokens_per_sec},
      {"mfu", &r.mfu},
      {"peak_rss_mib", &r.peak_rss_mib},
      {"compute_s", &r.compute_s},
      {"comm_wait_s", &r.comm_wait_s},
      {"saved_activation_mib", &r.saved_activation_mib}};
  core::require(j.contains("step") && j["step"].is_number_integer(), "train", where,
                ": step missing or not an integer (", j.value("step", json()).dump(), ")");
  r.step = j["step"].get<int64_t>();
  for (const auto& [k, dst] : fields) {
    // null: a NaN (a diverged loss), which JSON cannot hold and record_json writes as null.
    core::require(j.contains(k) && (j[k].is_number() || j[k].is_null()), "train", where, ": ", k,
                  " missing or not a number (", j.value(k, json()).dump(), ")");
    *dst = j[k].is_null() ? std::numeric_limits<double>::quiet_NaN() : j[k].get<double>();
  }
  // Written since the GPU trainer (GPU III); a checkpoint from before has none: 0.
  if (j.contains("device_peak_mib")) {
    core::require(j["device_peak_mib"].is_number(), "train", where,
                  ": device_peak_mib not a number (", j["device_peak_mib"].dump(), ")");
    r.device_peak_mib = j["device_peak_mib"].get<double>();
  }
  // The per-op account: every category record_json writes, and "other".
  core::require(j.contains("ops") && j["ops"].is_object() &&
                    j["ops"].size() == static_cast<size_t>(core::kNumOps) + 1,
                "train", where, ": ops missing or not an object of ", core::kNumOps + 1,
                " numbers (", j.value("ops", json()).dump(), ")");
  const json& ops = j["ops"];
  auto number = [&](const char* k) {
    core::require(ops.contains(k) && (ops[k].is_number() || ops[k].is_null()), "train", where,
                  ": ops.", k, " missing or not a number");
    return ops[k].is_null() ? std::numeric_limits<double>::quiet_NaN() : ops[k].get<double>();
  };
  for (int i = 0; i < core::kNumOps; ++i)
    r.ops.s[static_cast<size_t>(i)] = number(core::op_name(static_cast<core::Op>(i)));
  r.other_s = number("other");
  // step, ops and the fields; device_peak_mib where written (not in older checkpoints).
  const size_t expected = std::size(fields) + 2 + (j.contains("device_peak_mib") ? 1 : 0);
  core::require(j.size() == expected, "train", where, ": ", j.size(), " fields, a step record has ",
                expected);
  return r;
}

void write_metrics(const std::string& out, const json& config,
                   const std::vector<StepRecord>& steps) {
  json s = json::array();
  for (const auto& r : steps) s.push_back(record_json(r));
  core::write_file_atomic(out + "/metrics.json",
                          json{{"config", config}, {"steps", s}}.dump(1) + "\n");
}

}  // namespace longseq::train
