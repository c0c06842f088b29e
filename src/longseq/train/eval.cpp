#include "longseq/train/eval.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include "longseq/attention/layout.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/plot.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/lm_head.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/data.hpp"
#include "longseq/train/trainer.hpp"
#include "longseq/train/zero.hpp"

namespace longseq::train {

namespace fs = std::filesystem;
using nlohmann::json;

std::string resolve_checkpoint(const std::string& dir) {
  core::require(!dir.empty(), "eval", "--checkpoint is required");
  if (fs::exists(dir + "/config.json")) return dir;
  if (fs::exists(dir + "/checkpoint/config.json")) return dir + "/checkpoint";
  core::fail(
      "eval", "--checkpoint ", dir,
      ": neither it nor its checkpoint/ holds a config.json (a training --out directory or a "
      "Hugging Face LLaMA directory is expected)");
}

model::ReplicaParams load_replica(const std::string& dir, const model::ParamLayout& layout,
                                  comm::Group& group) {
  ShardedState state(layout, group, 0);
  load_hf_weights(dir, state);
  std::vector<std::vector<float>> units;
  for (int u = 0; u < layout.num_units(); ++u) units.push_back(state.gather_full(u, 0));
  return model::ReplicaParams(layout, std::move(units));
}

void EvalConfig::validate() const {
  core::require(seq >= 2, "eval", "--seq ", seq, " must be >= 2 (a position and its next token)");
  core::require(world >= 1, "eval", "--world ", world, " must be >= 1");
  core::require(seq >= world, "eval", "--seq ", seq, " must be at least --world ", world);
  core::require(sequences >= 0, "eval", "--sequences ", sequences, " must be >= 0 (0: all)");
  core::require(buckets >= 1, "eval", "--buckets ", buckets, " must be >= 1");
  core::require(threads >= 0, "eval", "--threads ", threads, " must be >= 0");
  parse_precision(precision);
  attention::parse_balance(balance);
}

json EvalResult::to_json() const {
  json pos = json::array();
  for (const EvalBucket& b : positions)
    pos.push_back({{"start", b.start}, {"end", b.end}, {"loss", b.loss}, {"tokens", b.tokens}});
  return {{"loss", loss},           {"perplexity", perplexity}, {"tokens", tokens},
          {"sequences", sequences}, {"seconds", seconds},       {"positions", pos}};
}

std::string loss_by_position_svg(const EvalResult& r, const std::string& title) {
  core::plot::LinePlot p;
  p.title = title;
  p.xlabel = "position (bucket midpoint)";
  p.ylabel = "loss (nats/token)";
  core::plot::Series s{"eval loss", {}, {}, "#3b7dd8", false, true};
  for (const EvalBucket& b : r.positions) {
    s.x.push_back(0.5 * static_cast<double>(b.start + b.end - 1));
    s.y.push_back(b.loss);
  }
  core::plot::Series mean{"mean " + core::cat(r.loss), {}, {}, "#999999", false, false};
  if (!r.positions.empty()) {
    mean.x = {s.x.front(), s.x.back()};
    mean.y = {r.loss, r.loss};
  }
  p.series = {s, mean};
  return core::plot::line_svg(p);
}

EvalResult evaluate(const EvalConfig& cfg) {
  cfg.validate();
  const std::string dir = resolve_checkpoint(cfg.checkpoint);
  const model::LlamaConfig mc = read_hf_config(dir);
  const model::ParamLayout layout(mc);
  const TokenFile data = load_training_data(cfg.data);
  core::require(data.vocab <= mc.vocab, "eval", "--data ", cfg.data, " has vocabulary ", data.vocab,
                ", larger than the model's ", mc.vocab);
  const Loader loader(data, cfg.seq);
  const int64_t nseq =
      cfg.sequences > 0 ? std::min(cfg.sequences, loader.num_sequences()) : loader.num_sequences();
  const attention::Algorithm algo = attention::Algorithm::parse(cfg.algo);
  algo.validate(cfg.world, mc.heads, mc.kv_heads);
  const attention::Layout seq_layout(attention::parse_balance(cfg.balance), cfg.seq, cfg.world);
  const model::TrainMask mask = model::TrainMask::parse(cfg.mask, cfg.seq);
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  model::InferenceOptions io;
  io.threads = cfg.threads > 0 ? cfg.threads : std::max(1, hw / cfg.world);
  io.precision = parse_precision(cfg.precision);
  const int64_t n = cfg.seq;
  if (!cfg.out.empty()) {
    std::error_code ec;
    fs::create_directories(cfg.out, ec);
    core::require(!ec, "eval", "--out ", cfg.out, ": cannot create: ", ec.message());
  }

  // Per position: loss sum and labelled count over every sequence (fp64), reduced at the end.
  std::vector<double> sum(static_cast<size_t>(n), 0.0), cnt(static_cast<size_t>(n), 0.0);
  core::Timer timer;
  comm::Options opt;
  opt.world = cfg.world;
  comm::run(opt, [&](comm::Group& world) {
    model::ReplicaParams params = load_replica(dir, layout, world);
    std::vector<double> s(static_cast<size_t>(n), 0.0), c(static_cast<size_t>(n), 0.0);
    std::unique_ptr<model::AttentionOp> attn;
    for (int64_t q = 0; q < nseq; ++q) {
      const RankTokens rt = loader.rank_tokens(q, seq_layout, world.rank(), model::kIgnoreIndex);
      if (!attn || mask.document) {
        const auto m =
            mask.with_documents(mask.document ? loader.document_ids(q) : std::vector<int32_t>{});
        attn =
            model::make_distributed_attention(algo, m, seq_layout, world, io.threads, io.precision);
      }
      model::StepBatch b;
      b.tokens = rt.tokens.data();
      b.pos = rt.pos.data();
      b.len = static_cast<int64_t>(rt.pos.size());
      b.seq_len = n;
      const std::vector<float> h = model::forward_hidden(layout, params, *attn, b, io);
      const std::vector<double> loss =
          model::token_losses(layout, params, h.data(), rt.labels.data(), b.len, io);
      for (int64_t i = 0; i < b.len; ++i)
        if (rt.pos[i] >= 0 && rt.labels[i] != model::kIgnoreIndex) {
          s[rt.pos[i]] += loss[i];
          c[rt.pos[i]] += 1;
        }
    }
    world.all_reduce(s.data(), s.data(), s.size(), core::DType::f64);
    world.all_reduce(c.data(), c.data(), c.size(), core::DType::f64);
    if (world.rank() == 0) {
      sum = std::move(s);
      cnt = std::move(c);
    }
  });

  EvalResult r;
  r.sequences = nseq;
  r.seconds = timer.elapsed();
  double total = 0, count = 0;
  for (int64_t p = 0; p < n; ++p) total += sum[p], count += cnt[p];
  r.tokens = static_cast<int64_t>(count);
  r.loss = count > 0 ? total / count : 0.0;
  r.perplexity = std::exp(r.loss);
  const int64_t k = std::min(cfg.buckets, n - 1);
  for (int64_t b = 0; b < k; ++b) {
    EvalBucket e;
    e.start = b * n / k;
    e.end = (b + 1) * n / k;
    double bs = 0, bc = 0;
    for (int64_t p = e.start; p < e.end; ++p) bs += sum[p], bc += cnt[p];
    e.tokens = static_cast<int64_t>(bc);
    e.loss = bc > 0 ? bs / bc : 0.0;
    r.positions.push_back(e);
  }
  if (!cfg.out.empty()) {
    json j = r.to_json();
    j["config"] = {{"checkpoint", dir},
                   {"data", cfg.data},
                   {"seq", cfg.seq},
                   {"world", cfg.world},
                   {"algo", cfg.algo},
                   {"balance", cfg.balance},
                   {"mask", cfg.mask},
                   {"buckets", k},
                   {"precision", cfg.precision},
                   {"threads_per_rank", io.threads},
                   {"model", mc.describe()}};
    core::write_file_atomic(cfg.out + "/eval.json", j.dump(1) + "\n");
    core::write_file_atomic(
        cfg.out + "/loss_by_position.svg",
        loss_by_position_svg(
            r, core::cat("loss by position: ", fs::path(dir).lexically_normal().string(), ", ",
                         nseq, " x ", n, " tokens")));
  }
  return r;
}

}  // namespace longseq::train
