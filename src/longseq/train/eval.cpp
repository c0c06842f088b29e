#include "longseq/train/eval.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "longseq/attention/layout.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/plot.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/core/threads.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/kernels.hpp"
#include "longseq/model/lm_head.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/data.hpp"
#include "longseq/train/device.hpp"
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
                                  comm::Group& group, core::Device device) {
  ShardedState state(layout, group, 0);
  load_hf_weights(dir, state);
  std::vector<std::vector<float>> units;
  for (int u = 0; u < layout.num_units(); ++u) units.push_back(state.gather_full(u, 0));
  return model::ReplicaParams(layout, std::move(units), device);
}

attention::Balance parse_balance_flag(std::string_view component, const std::string& balance) {
  try {
    return attention::parse_balance(balance);
  } catch (const core::Error& e) {
    core::fail(component, "--balance ", balance, ": ", e.what());
  }
}

attention::Algorithm parse_algo_flag(std::string_view component, const std::string& algo, int world,
                                     int64_t hq, int64_t hkv) {
  const attention::Algorithm a = attention::Algorithm::parse(algo);  // names --algo itself
  try {
    a.validate(world, hq, hkv);
  } catch (const core::Error& e) {
    core::fail(component, "--algo ", algo, " at --world ", world, " (", hq, " query heads, ", hkv,
               " kv heads): ", e.what());
  }
  return a;
}

EvalConfig::Parsed EvalConfig::parse() const {
  core::require(seq >= 2, "eval", "--seq ", seq, " must be >= 2 (a position and its next token)");
  core::require(world >= 1, "eval", "--world ", world, " must be >= 1");
  core::require(seq >= world, "eval", "--seq ", seq, " must be at least --world ", world);
  core::require(sequences >= 0, "eval", "--sequences ", sequences, " must be >= 0 (0: all)");
  core::require(buckets >= 1, "eval", "--buckets ", buckets, " must be >= 1");
  core::require(threads >= 0, "eval", "--threads ", threads, " must be >= 0");
  Parsed p;
  p.algo = attention::Algorithm::parse(algo);
  p.balance = parse_balance_flag("eval", balance);
  p.mask = model::TrainMask::parse(mask, seq);
  core::require(p.balance != attention::Balance::block_striped || p.block() > 0, "eval",
                "--balance block-striped needs a block mask (--mask blocks:FILE:B), got --mask ",
                mask);
  p.precision = parse_precision(precision);
  // On a GPU every rank holds the whole model; ranks above one share the GPU, as for train.
  p.device = parse_shared_device("eval", device, world);
  return p;
}

json EvalResult::to_json() const {
  // Exactly the Contract's keys (issue 16); the run's settings and per-bucket token counts go to
  // run_json() (OUT/eval_run.json), so that readers of eval.json see nothing else.
  json pos = json::array();
  for (const EvalBucket& b : positions)
    pos.push_back({{"start", b.start}, {"end", b.end}, {"loss", b.loss}});
  return {{"loss", loss}, {"perplexity", perplexity}, {"tokens", tokens}, {"positions", pos}};
}

json EvalResult::run_json() const {
  json pos = json::array();
  for (const EvalBucket& b : positions)
    pos.push_back({{"start", b.start}, {"end", b.end}, {"loss", b.loss}, {"tokens", b.tokens}});
  return {{"loss", loss},           {"perplexity", perplexity}, {"tokens", tokens},
          {"sequences", sequences}, {"seconds", seconds},       {"positions", pos}};
}

std::string loss_by_position_svg(const EvalResult& r, const std::string& title, int64_t vocab) {
  core::plot::LinePlot p;
  p.title = title;
  p.y_from_zero = true;
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
  if (vocab > 0 && !r.positions.empty()) {
    const double c = std::log(static_cast<double>(vocab));
    char shown[32];
    std::snprintf(shown, sizeof shown, "%.2f", c);
    p.series.push_back({core::cat("chance: ln ", vocab, " = ", shown),
                        {mean.x.front(), mean.x.back()},
                        {c, c},
                        "#d95f02",
                        false,
                        false});
  }
  return core::plot::line_svg(p);
}

namespace {

// What every rank of one evaluation shares, decided before the ranks start.
struct EvalPass {
  const EvalConfig& cfg;
  const EvalConfig::Parsed& parsed;
  const std::string& dir;
  const model::ParamLayout& layout;
  const Loader& loader;
  const attention::Layout& seq_layout;
  int64_t sequences;
  model::InferenceOptions io;
};

// One rank's part: the loss of each of its labelled positions over every sequence, summed (s)
// and counted (c) by global position, then reduced over the ranks. Collective.
// The model runs on --device through model::Kernels: the CPU's kernels at any world, or one GPU
// (world 1) holding the weights, the activations and the logits' tiles.
void position_losses(const EvalPass& e, comm::Group& world, std::vector<double>& s,
                     std::vector<double>& c) {
  const core::Device device = e.parsed.device;
  // Made on this thread: a GPU's kernels make it current on the thread that runs them.
  const std::unique_ptr<model::Kernels> kernels = device_kernels(device, e.io.threads, "eval");
  model::ReplicaParams params = load_replica(e.dir, e.layout, world, device);
  const model::ModelOptions mo = model::model_options(e.io);
  const model::TrainMask& mask = e.parsed.mask;
  std::unique_ptr<model::AttentionOp> attn;
  for (int64_t q = 0; q < e.sequences; ++q) {
    const RankTokens rt = e.loader.rank_tokens(q, e.seq_layout, world.rank(), model::kIgnoreIndex);
    if (!attn || mask.document) {
      const auto m =
          mask.with_documents(mask.document ? e.loader.document_ids(q) : std::vector<int32_t>{});
      attn = device_attention(device, e.parsed.algo, m, e.seq_layout, world, e.io.threads,
                              e.io.precision, "eval");
    }
    model::StepBatch b;
    b.tokens = rt.tokens.data();
    b.pos = rt.pos.data();
    b.len = static_cast<int64_t>(rt.pos.size());
    b.seq_len = e.cfg.seq;
    const core::Tensor<float> h = model::forward_hidden(e.layout, params, *attn, b, mo, *kernels);
    const std::vector<double> loss =
        model::token_losses(e.layout, params, h.data(), rt.labels.data(), b.len, e.io, *kernels);
    for (int64_t i = 0; i < b.len; ++i)
      if (rt.pos[i] >= 0 && rt.labels[i] != model::kIgnoreIndex) {
        s[rt.pos[i]] += loss[i];
        c[rt.pos[i]] += 1;
      }
  }
  world.all_reduce(s.data(), s.data(), s.size(), core::DType::f64);
  world.all_reduce(c.data(), c.data(), c.size(), core::DType::f64);
}

// The overall loss and the `buckets` position buckets from per-position sums and counts.
EvalResult summarize(const std::vector<double>& sum, const std::vector<double>& cnt,
                     int64_t buckets) {
  const int64_t n = static_cast<int64_t>(sum.size());
  EvalResult r;
  double total = 0, count = 0;
  for (int64_t p = 0; p < n; ++p) total += sum[p], count += cnt[p];
  r.tokens = static_cast<int64_t>(count);
  r.loss = count > 0 ? total / count : 0.0;
  r.perplexity = std::exp(r.loss);
  const int64_t k = std::min(buckets, n - 1);
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
  return r;
}

// OUT/eval.json (the Contract's keys), OUT/eval_run.json (the same with the run's settings) and
// OUT/loss_by_position.svg.
void write_eval(const EvalPass& e, const EvalResult& r, const model::LlamaConfig& mc) {
  const EvalConfig& cfg = e.cfg;
  json j = r.run_json();
  j["config"] = {{"checkpoint", e.dir},
                 {"data", cfg.data},
                 {"seq", cfg.seq},
                 {"world", cfg.world},
                 {"algo", cfg.algo},
                 {"balance", cfg.balance},
                 {"mask", cfg.mask},
                 {"buckets", static_cast<int64_t>(r.positions.size())},
                 {"precision", cfg.precision},
                 {"device", e.parsed.device.str()},
                 {"threads_per_rank", e.io.threads},
                 {"model", mc.describe()}};
  core::write_file_atomic(cfg.out + "/eval.json", r.to_json().dump(1) + "\n");
  core::write_file_atomic(cfg.out + "/eval_run.json", j.dump(1) + "\n");
  core::write_file_atomic(
      cfg.out + "/loss_by_position.svg",
      loss_by_position_svg(
          r,
          core::cat("loss by position: ", fs::path(e.dir).lexically_normal().string(), ", ",
                    e.sequences, " x ", cfg.seq, " tokens"),
          mc.vocab));
}

}  // namespace

EvalResult evaluate(const EvalConfig& cfg) {
  const EvalConfig::Parsed parsed = cfg.parse();
  // A GPU this build or machine lacks is refused here, naming it, before anything is read.
  if (!parsed.device.is_cpu()) (void)device_kernels(parsed.device, 1, "eval");
  const std::string dir = resolve_checkpoint(cfg.checkpoint);
  const model::LlamaConfig mc = read_hf_config(dir);
  const model::ParamLayout layout(mc);
  std::error_code ec;
  core::require(fs::is_regular_file(cfg.data, ec), "eval", "--data ", cfg.data, ": no such file");
  const TokenFile data = load_training_data(cfg.data);
  core::require(data.vocab <= mc.vocab, "eval", "--data ", cfg.data, " has vocabulary ", data.vocab,
                ", larger than the model's ", mc.vocab);
  const Loader loader(data, cfg.seq);
  parse_algo_flag("eval", cfg.algo, cfg.world, mc.heads, mc.kv_heads);
  const attention::Layout seq_layout(parsed.balance, cfg.seq, cfg.world, parsed.block());
  EvalPass e{cfg, parsed, dir, layout, loader, seq_layout, 0, {}};
  e.sequences =
      cfg.sequences > 0 ? std::min(cfg.sequences, loader.num_sequences()) : loader.num_sequences();
  e.io.threads = core::default_threads(cfg.threads, cfg.world);
  e.io.precision = parsed.precision;
  if (!cfg.out.empty()) {
    fs::create_directories(cfg.out, ec);
    core::require(!ec, "eval", "--out ", cfg.out, ": cannot create: ", ec.message());
  }
  // Per position: loss sum and labelled count over every sequence (fp64), reduced over ranks.
  std::vector<double> sum(static_cast<size_t>(cfg.seq), 0.0), cnt(sum);
  core::Timer timer;
  comm::Options opt;
  opt.world = cfg.world;
  comm::run(opt, [&](comm::Group& world) {
    std::vector<double> s(sum.size(), 0.0), c(sum.size(), 0.0);
    position_losses(e, world, s, c);
    if (world.rank() == 0) {
      sum = std::move(s);
      cnt = std::move(c);
    }
  });
  EvalResult r = summarize(sum, cnt, cfg.buckets);
  r.sequences = e.sequences;
  r.seconds = timer.elapsed();
  // Under mpirun only the process holding world rank 0 has the sums (one writer, as in train).
  if (!cfg.out.empty() && comm::launcher_rank() == 0) write_eval(e, r, mc);
  return r;
}

}  // namespace longseq::train
