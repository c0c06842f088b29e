#include "longseq/train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/kernels/gemm.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/transformer.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/zero.hpp"

namespace longseq::train {

using nlohmann::json;

// ---- presets -----------------------------------------------------------------------------------

std::vector<std::string> preset_names() { return {"main", "small", "tiny"}; }

TrainConfig preset(const std::string& name) {
  TrainConfig c;
  if (name.size() > 5 && name.substr(name.size() - 5) == ".json") {
    json j;
    try {
      j = json::parse(core::read_file(name));
    } catch (const json::exception& e) {
      core::fail("train", "--preset ", name, ": malformed JSON: ", e.what());
    }
    const std::string base = j.value("base", std::string("main"));
    c = preset(base);
    j.erase("base");
    apply_json(c, j);
    c.preset = name;
    return c;
  }
  c.preset = name;
  c.model.vocab = kByteVocab;
  if (name == "main") {
    // The demo: 4 layers, hidden 256 on 32K-token sequences over 4 local ranks.
    c.model.layers = 4;
    c.model.hidden = 256;
    c.model.heads = 4;
    c.model.kv_heads = 4;
    c.model.head_dim = 64;
    c.model.intermediate = 688;
    c.steps = 6;
    c.seq = 32768;
    c.world = 4;
    c.optim.lr = 3e-3;
    c.optim.min_lr = 1e-3;
    c.optim.warmup = 2;
  } else if (name == "small") {
    c.model.layers = 2;
    c.model.hidden = 128;
    c.model.heads = 4;
    c.model.kv_heads = 2;
    c.model.head_dim = 32;
    c.model.intermediate = 352;
    c.steps = 30;
    c.seq = 4096;
    c.world = 4;
    c.optim.lr = 3e-3;
    c.optim.min_lr = 3e-4;
    c.optim.warmup = 5;
  } else if (name == "tiny") {
    c.model.layers = 2;
    c.model.hidden = 32;
    c.model.heads = 4;
    c.model.kv_heads = 2;
    c.model.head_dim = 8;
    c.model.intermediate = 64;
    c.steps = 2;
    c.seq = 96;
    c.world = 1;
    c.ffn_chunk = 16;
    c.lm_tile = 16;
    c.optim.warmup = 1;
  } else {
    std::string all;
    for (const auto& n : preset_names()) all += (all.empty() ? "" : " | ") + n;
    core::fail("train", "--preset '", name, "': expected ", all, " or a FILE.json");
  }
  return c;
}

json TrainConfig::to_json() const {
  const auto& m = model;
  return {{"preset", preset},
          {"layers", m.layers},
          {"hidden", m.hidden},
          {"heads", m.heads},
          {"kv_heads", m.kv_heads},
          {"head_dim", m.head_dim},
          {"intermediate", m.intermediate},
          {"vocab", m.vocab},
          {"rope_theta", m.rope_theta},
          {"norm_eps", m.norm_eps},
          {"tied_embeddings", m.tied_embeddings},
          {"steps", steps},
          {"stop_after", stop_after},
          {"seq", seq},
          {"world", world},
          {"dp", dp},
          {"cp", cp()},
          {"nodes", nodes},
          {"algo", algo},
          {"balance", balance},
          {"checkpoint", checkpoint},
          {"loss", loss},
          {"precision", precision},
          {"seq_selective_fraction", seq_selective_fraction},
          {"seed", seed},
          {"data", data},
          {"init_from", init_from},
          {"ffn_chunk", ffn_chunk},
          {"lm_tile", lm_tile},
          {"doc_mask", doc_mask},
          {"save_every", save_every},
          {"threads", threads},
          {"link", link},
          {"lr", optim.lr},
          {"min_lr", optim.min_lr},
          {"warmup", optim.warmup},
          {"beta1", optim.beta1},
          {"beta2", optim.beta2},
          {"adam_eps", optim.eps},
          {"weight_decay", optim.weight_decay},
          {"grad_clip", optim.grad_clip}};
}

void apply_json(TrainConfig& c, const json& j) {
  core::require(j.is_object(), "train", "preset JSON must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    try {
      auto& m = c.model;
      if (k == "layers") m.layers = v;
      else if (k == "hidden") m.hidden = v;
      else if (k == "heads") m.heads = v;
      else if (k == "kv_heads") m.kv_heads = v;
      else if (k == "head_dim") m.head_dim = v;
      else if (k == "intermediate") m.intermediate = v;
      else if (k == "vocab") m.vocab = v;
      else if (k == "rope_theta") m.rope_theta = v;
      else if (k == "norm_eps") m.norm_eps = v;
      else if (k == "tied_embeddings") m.tied_embeddings = v;
      else if (k == "steps") c.steps = v;
      else if (k == "seq") c.seq = v;
      else if (k == "world") c.world = v;
      else if (k == "dp") c.dp = v;
      else if (k == "nodes") c.nodes = v;
      else if (k == "algo") c.algo = v;
      else if (k == "balance") c.balance = v;
      else if (k == "checkpoint") c.checkpoint = v;
      else if (k == "loss") c.loss = v;
      else if (k == "precision") c.precision = v;
      else if (k == "seq_selective_fraction") c.seq_selective_fraction = v;
      else if (k == "seed") c.seed = v;
      else if (k == "data") c.data = v;
      else if (k == "init_from") c.init_from = v;
      else if (k == "ffn_chunk") c.ffn_chunk = v;
      else if (k == "lm_tile") c.lm_tile = v;
      else if (k == "doc_mask") c.doc_mask = v;
      else if (k == "save_every") c.save_every = v;
      else if (k == "threads") c.threads = v;
      else if (k == "link") c.link = v;
      else if (k == "lr") c.optim.lr = v;
      else if (k == "min_lr") c.optim.min_lr = v;
      else if (k == "warmup") c.optim.warmup = v;
      else if (k == "beta1") c.optim.beta1 = v;
      else if (k == "beta2") c.optim.beta2 = v;
      else if (k == "adam_eps") c.optim.eps = v;
      else if (k == "weight_decay") c.optim.weight_decay = v;
      else if (k == "grad_clip") c.optim.grad_clip = v;
      else if (k == "stop_after") c.stop_after = v;
      else if (k == "preset" || k == "cp") continue;
      else core::fail("train", "unknown preset key '", k, "'");
    } catch (const json::exception& e) {
      core::fail("train", "preset key '", k, "' has the wrong type (", v.dump(), "): ", e.what());
    }
  }
}

void TrainConfig::validate() const {
  model.validate();
  core::require(steps >= 1, "train", "--steps ", steps, " must be >= 1");
  core::require(world >= 1, "train", "--world ", world, " must be >= 1");
  core::require(dp >= 1 && world % dp == 0, "train", "--dp ", dp, " must divide --world ", world);
  core::require(nodes >= 1 && world % nodes == 0, "train", "--nodes ", nodes,
                " must divide --world ", world);
  core::require(seq >= 2 * cp(), "train", "--seq ", seq, " must be at least 2 tokens per rank (",
                cp(), " context ranks need >= ", 2 * cp(), ")");
  core::require(ffn_chunk >= 0, "train", "--ffn-chunk ", ffn_chunk, " must be >= 0 (0: all tokens)");
  core::require(loss == "fused" || loss == "unfused", "train", "--loss '", loss,
                "': expected fused | unfused");
  model::parse_checkpoint_policy(checkpoint);
  parse_precision(precision);
  model::seq_selective_split(seq, seq_selective_fraction);
  attention::parse_balance(balance);
  const auto a = model::AttentionAlgo::parse(algo);
  if (a.hybrid) a.hybrid->validate(cp(), model.heads, model.kv_heads);
  if (a.flat.route == attention::Route::double_ring && cp() > 1) {
    const int per_node = world / nodes;
    core::require(nodes > 1 && per_node > 1 && per_node <= cp() && cp() % per_node == 0, "train",
                  "--algo ", algo, " needs the ", cp(), " context ranks of a replica to span several "
                  "nodes with several ranks each; got --nodes ", nodes, " for --world ", world,
                  " --dp ", dp);
  }
  optim.validate();
  core::require(threads >= 0, "train", "--threads ", threads, " must be >= 0");
  core::require(stop_after >= 0, "train", "--stop-after ", stop_after, " must be >= 0");
  core::require(init_from.empty() || resume.empty(), "train", "--init-from ", init_from,
                " and --resume ", resume, " exclude each other (resume continues a run of ours)");
  if (!init_from.empty()) {
    // The model must be the one the weights are for: compare field by field, naming the first
    // that differs (the CLI copies the config, so this catches explicit overrides). The RoPE
    // fields may differ: extending a model's context means changing them (rope_scaling.hpp).
    nlohmann::json want = hf_config(read_hf_config(init_from)), have = hf_config(model);
    for (const char* k : {"rope_theta", "rope_scaling", "max_position_embeddings"}) want.erase(k);
    for (auto it = want.begin(); it != want.end(); ++it)
      core::require(have[it.key()] == it.value(), "train", "--init-from ", init_from, ": ",
                    it.key(), " is ", it.value().dump(), " there, ", have[it.key()].dump(),
                    " in this run");
  }
}

// ---- data --------------------------------------------------------------------------------------

TokenFile load_training_data(const std::string& path) {
  if (path.size() > 4 && path.substr(path.size() - 4) == ".txt") {
    TokenFile f;
    f.tokens = byte_tokenize({core::read_file(path)});
    f.vocab = kByteVocab;
    f.eot = kByteEot;
    f.path = path;
    return f;
  }
  return read_token_file(path);
}

// ---- measurements ------------------------------------------------------------------------------

core::DType parse_precision(const std::string& s) {
  if (s == "fp32") return core::DType::f32;
  if (s == "bf16") return core::DType::bf16;
  core::fail("train", "--precision '", s, "': expected fp32 | bf16");
}

double measure_peak_gflops(const std::string& precision) {
  const bool bf = parse_precision(precision) == core::DType::bf16;
  const int64_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  std::vector<core::bf16> ab(n * n, core::to_bf16(0.5f)), bb(n * n, core::to_bf16(0.25f));
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    core::Timer t;
    if (bf)
      kernels::gemm_bf16(false, false, n, n, n, 1.0f, ab.data(), n, bb.data(), n, 0.0f, c.data(), n);
    else
      kernels::gemm_f32(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::min(best, t.elapsed());
  }
  const double hw = std::max(1u, std::thread::hardware_concurrency());
  return 2.0 * n * n * n / best * 1e-9 * hw;
}

namespace {

// (query, key) pairs a causal (optionally document-restricted) mask allows.
double visible_pairs(int64_t n, const std::vector<int32_t>& docs) {
  if (docs.empty()) return 0.5 * static_cast<double>(n) * static_cast<double>(n + 1);
  double p = 0;
  int64_t run = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0 && docs[i] != docs[i - 1]) {
      p += 0.5 * run * (run + 1.0);
      run = 0;
    }
    ++run;
  }
  return p + 0.5 * run * (run + 1.0);
}

void write_metrics(const std::string& out, const json& config, const std::vector<StepRecord>& steps) {
  json s = json::array();
  for (const auto& r : steps)
    s.push_back({{"step", r.step},
                 {"loss", r.loss},
                 {"lr", r.lr},
                 {"grad_norm", r.grad_norm},
                 {"seconds", r.seconds},
                 {"tokens_per_sec", r.tokens_per_sec},
                 {"mfu", r.mfu},
                 {"peak_rss_mib", r.peak_rss_mib},
                 {"compute_s", r.compute_s},
                 {"comm_wait_s", r.comm_wait_s},
                 {"saved_activation_mib", r.saved_activation_mib}});
  core::write_file_atomic(out + "/metrics.json", json{{"config", config}, {"steps", s}}.dump(1) + "\n");
}

}  // namespace

// ---- the loop ----------------------------------------------------------------------------------

TrainSummary train(const TrainConfig& cfg) {
  cfg.validate();
  const TokenFile data = load_training_data(cfg.data);
  core::require(data.vocab <= cfg.model.vocab, "train", "--data ", cfg.data, " has vocabulary ",
                data.vocab, ", larger than the model's ", cfg.model.vocab, " (set --vocab)");
  const Loader loader(data, cfg.seq);
  const model::ParamLayout layout(cfg.model);
  const model::CheckpointPolicy policy = model::parse_checkpoint_policy(cfg.checkpoint);
  const model::AttentionAlgo algo = model::AttentionAlgo::parse(cfg.algo);
  const attention::Layout seq_layout(attention::parse_balance(cfg.balance), cfg.seq, cfg.cp());
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = cfg.threads > 0 ? cfg.threads : std::max(1, hw / cfg.world);

  TrainSummary summary;
  const core::DType precision = parse_precision(cfg.precision);
  summary.peak_gflops = measure_peak_gflops(cfg.precision);
  json config = cfg.to_json();
  config["parameters"] = layout.num_parameters();
  config["matmul_parameters"] = layout.matmul_parameters();
  config["threads_per_rank"] = threads;
  config["gemm_library"] = kernels::gemm_library();
  config["peak_gflops_measured"] = summary.peak_gflops;
  config["mfu_formula"] =
      "(6 * matmul_parameters * dp * seq + 12 * layers * heads * head_dim * visible_pairs * dp) / "
      "(step_seconds * peak); peak = single-thread GEMM 1024^3 at the run's precision (best of 3) * "
      "hardware threads; recomputation not counted";
  if (!cfg.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cfg.out, ec);
    core::require(!ec, "train", "--out ", cfg.out, ": cannot create: ", ec.message());
  }

  comm::Options opt;
  opt.backend = "any";
  opt.world = cfg.world;
  opt.nodes = cfg.nodes;
  opt.link = comm::LinkModel::parse(cfg.link);
  opt.abort_on_failure = cfg.abort_on_failure;
  std::vector<float> final_params, final_grads;
  comm::run(opt, [&](comm::Group& world) {
    const int wr = world.rank();
    const int cp = cfg.cp();
    const int replica = wr / cp;
    comm::Group ctx = world.split(replica, wr);
    ShardedState state(layout, world, cfg.seed);
    state.set_gather_dtype(precision);
    if (!cfg.init_from.empty()) load_hf_weights(cfg.init_from, state);
    int64_t start = 0;
    if (!cfg.resume.empty()) {
      const json ts = load_checkpoint(cfg.resume, state);
      start = ts.at("step").get<int64_t>();
      core::require(ts.at("seed").get<uint64_t>() == cfg.seed, "train", "--resume ", cfg.resume,
                    ": checkpoint seed ", ts.at("seed").get<uint64_t>(), " differs from --seed ",
                    cfg.seed);
    }
    model::ModelOptions mo;
    mo.policy = policy;
    mo.fused_loss = cfg.loss == "fused";
    mo.ffn_chunk = cfg.ffn_chunk;
    mo.lm.token_tile = cfg.lm_tile;
    mo.threads = threads;
    mo.precision = precision;
    mo.seq_selective_fraction = cfg.seq_selective_fraction;
    auto base_mask = std::make_shared<attention::MaskSpec>();
    base_mask->causal = true;
    std::unique_ptr<model::AttentionOp> attn;
    const bool writer = wr == 0;
    std::vector<StepRecord> records;
    const int64_t end = cfg.stop_after > 0 ? std::min(cfg.steps, cfg.stop_after) : cfg.steps;
    auto gather_all = [&](bool grads) {
      std::vector<float> all;
      for (int u = 0; u < layout.num_units(); ++u) {
        std::vector<float> f(static_cast<size_t>(state.shard_size(u) * world.size()));
        world.all_gather(grads ? state.grad_shard(u) : state.param_shard(u), f.data(),
                         static_cast<size_t>(state.shard_size(u)), core::DType::f32);
        f.resize(static_cast<size_t>(layout.units()[u].size));
        all.insert(all.end(), f.begin(), f.end());
      }
      return all;
    };
    for (int64_t step = start; step < end; ++step) {
      world.barrier();
      core::Timer step_timer;
      double wait_s = 0;
      const double zero0 = state.comm_seconds();
      const int64_t seq = loader.sequence_index(step, replica, cfg.dp);
      const RankTokens rt = loader.rank_tokens(seq, seq_layout, ctx.rank(), model::kIgnoreIndex);
      std::vector<int32_t> docs;
      if (cfg.doc_mask) docs = loader.document_ids(seq);
      if (!attn || cfg.doc_mask) {
        std::shared_ptr<const attention::MaskSpec> mask = base_mask;
        if (!docs.empty()) {
          auto m = std::make_shared<attention::MaskSpec>(*base_mask);
          m->doc_ids = docs;
          mask = m;
        }
        attn = model::make_distributed_attention(algo, mask, seq_layout, ctx, threads, precision);
      }
      const model::AttentionTimes at0 = attn->times();
      int64_t count = model::count_targets(rt.labels.data(), static_cast<int64_t>(rt.labels.size()),
                                           cfg.model.vocab);
      {
        core::ScopedTimer t(&wait_s);
        world.all_reduce(&count, &count, 1, core::DType::i64);
      }
      state.zero_grads();
      model::StepBatch b;
      b.tokens = rt.tokens.data();
      b.labels = rt.labels.data();
      b.pos = rt.pos.data();
      b.len = static_cast<int64_t>(rt.pos.size());
      b.seq_len = cfg.seq;
      const model::StepResult res =
          model::forward_backward(layout, state, *attn, b, 1.0 / static_cast<double>(std::max<int64_t>(count, 1)), mo);
      double loss = res.loss_sum;
      double norm = 0;
      {
        core::ScopedTimer t(&wait_s);
        world.all_reduce(&loss, &loss, 1, core::DType::f64);
        norm = global_grad_norm(state.grads(), state.total_shard(), world);
      }
      loss /= static_cast<double>(std::max<int64_t>(count, 1));
      if (cfg.keep_params && step + 1 == end) {
        std::vector<float> g = gather_all(true);
        if (writer) final_grads = std::move(g);
      }
      clip_gradients(state.grads(), state.total_shard(), norm, cfg.optim.grad_clip);
      const double lr = learning_rate(cfg.optim, step, cfg.steps);
      adamw_step(state.params(), state.grads(), state.exp_avg(), state.exp_avg_sq(),
                 state.decay_mask().data(), state.total_shard(), cfg.optim, lr, step);
      const double secs = step_timer.elapsed();
      wait_s += (state.comm_seconds() - zero0) + (attn->times().wait_s - at0.wait_s);
      double per[2] = {secs - wait_s, wait_s};
      world.all_reduce(per, per, 2, core::DType::f64);
      double mx[2] = {secs, static_cast<double>(res.saved_floats_peak) * 4.0 / (1024.0 * 1024.0)};
      world.all_reduce(mx, mx, 2, core::DType::f64, comm::ReduceOp::max);
      const double slowest = mx[0];

      StepRecord r;
      r.step = step;
      r.loss = loss;
      r.lr = lr;
      r.grad_norm = norm;
      r.seconds = slowest;
      const double tokens = static_cast<double>(cfg.seq) * cfg.dp;
      r.tokens_per_sec = tokens / slowest / cfg.world;
      const auto& m = cfg.model;
      const double flops = 6.0 * static_cast<double>(layout.matmul_parameters()) * tokens +
                           12.0 * m.layers * m.heads * m.head_dim * visible_pairs(cfg.seq, docs) * cfg.dp;
      r.mfu = flops / (slowest * summary.peak_gflops * 1e9);
      r.peak_rss_mib = static_cast<double>(core::peak_rss_bytes()) / (1024.0 * 1024.0);
      r.compute_s = per[0] / cfg.world;
      r.comm_wait_s = per[1] / cfg.world;
      r.saved_activation_mib = mx[1];
      records.push_back(r);
      if (writer && !cfg.quiet)
        std::printf("step %4lld  loss %.4f  lr %.2e  |g| %.3f  %.2fs  %.0f tok/s/rank  mfu %.3f  "
                    "rss %.0f MiB  saved %.0f MiB  compute %.2fs  wait %.2fs\n",
                    static_cast<long long>(step), r.loss, lr, norm, slowest, r.tokens_per_sec, r.mfu,
                    r.peak_rss_mib, r.saved_activation_mib, r.compute_s, r.comm_wait_s),
            std::fflush(stdout);
      if (writer && !cfg.out.empty()) write_metrics(cfg.out, config, records);
      const bool last = step + 1 == end;
      const bool save = !cfg.out.empty() && cfg.save_every >= 0 &&
                        (last || (cfg.save_every > 0 && (step + 1) % cfg.save_every == 0));
      if (save) {
        json ts = {{"step", step + 1},
                   {"seed", cfg.seed},
                   {"data", {{"file", cfg.data}, {"next_step", step + 1}, {"sequences", loader.num_sequences()},
                             {"order", "sequence (step * dp + replica) mod sequences"}}},
                   {"rng", {{"kind", "counter-based (core/rng.hpp); initialisation stream derive_seed(seed, unit)"},
                            {"seed", cfg.seed}}},
                   {"config", config}};
        save_checkpoint(cfg.out, state, ts, writer);
      }
    }
    if (cfg.keep_params) {
      std::vector<float> p = gather_all(false);
      if (writer) final_params = std::move(p);
    }
    if (writer) {
      summary.steps = std::move(records);
      summary.first_step = start;
    }
  });
  summary.params = std::move(final_params);
  summary.grads = std::move(final_grads);
  return summary;
}

}  // namespace longseq::train
