// `longseq train`: the training loop of src/longseq/train/trainer.hpp behind a preset plus
// overrides. Every flag's default is the preset's value; usage() shows the "main" preset's.
#include <cstdio>
#include <optional>
#include <string>

#include "commands.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/trainer.hpp"

namespace longseq::cli {

namespace {
struct TrainArgs {
  std::string preset = "main";
  std::optional<int64_t> steps, stop_after, seq, ffn_chunk, warmup, save_every, lm_tile, layers, hidden, heads,
      kv_heads, head_dim, intermediate, vocab;
  std::optional<int> world, dp, nodes, threads;
  std::optional<std::string> algo, balance, checkpoint, loss, data, out, resume, link, precision,
      init_from;
  std::optional<uint64_t> seed;
  std::optional<double> lr, min_lr, weight_decay, grad_clip, seq_selective_fraction;
  bool doc_mask = false, quiet = false;
};

template <class T>
std::string def(const T& v) {
  return " [main: " + core::cat(v) + "]";
}
}  // namespace

std::function<int()> add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  const train::TrainConfig m = train::preset("main");
  std::string names;
  for (const auto& n : train::preset_names()) names += (names.empty() ? "" : " | ") + n;
  app.add_option("--preset", a->preset, names + " | FILE.json (keys of metrics.json's config)");
  app.add_option("--steps", a->steps, "optimizer steps" + def(m.steps));
  app.add_option("--stop-after", a->stop_after,
                 "stop after K steps, schedule still over --steps (then --resume)" + def(m.stop_after));
  app.add_option("--seq", a->seq, "tokens per sequence (N)" + def(m.seq));
  app.add_option("--world", a->world, "ranks in all (dp x context ranks)" + def(m.world));
  app.add_option("--dp", a->dp, "data-parallel replicas (divides --world)" + def(m.dp));
  app.add_option("--nodes", a->nodes, "declared nodes (local backend)" + def(m.nodes));
  app.add_option("--algo", a->algo,
                 "ring | burst | double-ring[:ring] | startrail:C | ulysses | usp:U" + def(m.algo));
  app.add_option("--balance", a->balance, "contiguous | zigzag | striped" + def(m.balance));
  app.add_option("--checkpoint", a->checkpoint,
                 "none | full | selective++ | seq-selective" + def(m.checkpoint));
  app.add_option("--seq-selective-fraction", a->seq_selective_fraction,
                 "seq-selective: share of the sequence whose attention is recomputed, in (0, 1)" +
                     def(m.seq_selective_fraction));
  app.add_option("--loss", a->loss, "fused | unfused LM head + cross-entropy" + def(m.loss));
  app.add_option("--precision", a->precision,
                 "fp32 | bf16 (bf16 compute, fp32 master weights, grads and optimizer)" +
                     def(m.precision));
  app.add_option("--seed", a->seed, "initialisation seed" + def(m.seed));
  app.add_option("--data", a->data, "token file, or .txt tokenized byte-level" + def(m.data));
  app.add_option("--out", a->out, "directory for metrics.json and checkpoint/ (empty: none)");
  app.add_option("--resume", a->resume, "continue from DIR/checkpoint (a previous --out)");
  app.add_option("--init-from", a->init_from,
                 "start from a Hugging Face LLaMA directory (config.json + safetensors): its "
                 "model and weights");
  app.add_option("--ffn-chunk", a->ffn_chunk, "tokens per blockwise-FFN chunk (0: all)" + def(m.ffn_chunk));
  app.add_option("--lm-tile", a->lm_tile, "token tile of the fused LM head (0: auto)" + def(m.lm_tile));
  app.add_option("--lr", a->lr, "peak learning rate" + def(m.optim.lr));
  app.add_option("--min-lr", a->min_lr, "final learning rate of the cosine" + def(m.optim.min_lr));
  app.add_option("--warmup", a->warmup, "linear warm-up steps" + def(m.optim.warmup));
  app.add_option("--weight-decay", a->weight_decay, "AdamW decoupled weight decay" + def(m.optim.weight_decay));
  app.add_option("--grad-clip", a->grad_clip, "global gradient-norm clip (<= 0: off)" + def(m.optim.grad_clip));
  app.add_option("--save-every", a->save_every, "checkpoint every K steps (0: at the end, < 0: never)" + def(m.save_every));
  app.add_option("--threads", a->threads, "compute threads per rank (0: cores / world)" + def(m.threads));
  app.add_option("--link", a->link, "link model of the local backend, e.g. inter=10us,5GB/s" + def(m.link));
  app.add_option("--layers", a->layers, "model layers" + def(m.model.layers));
  app.add_option("--hidden", a->hidden, "hidden size" + def(m.model.hidden));
  app.add_option("--heads", a->heads, "query heads" + def(m.model.heads));
  app.add_option("--kv-heads", a->kv_heads, "key/value heads" + def(m.model.kv_heads));
  app.add_option("--head-dim", a->head_dim, "head dim" + def(m.model.head_dim));
  app.add_option("--intermediate", a->intermediate, "MLP size" + def(m.model.intermediate));
  app.add_option("--vocab", a->vocab, "vocabulary (>= the token file's, e.g. a BPE's)" + def(m.model.vocab));
  app.add_flag("--doc-mask", a->doc_mask, "restrict attention to documents (end-of-text marks)");
  app.add_flag("--quiet", a->quiet, "no per-step lines");
  return [a] {
    train::TrainConfig c = train::preset(a->preset);
    auto set = [](auto& dst, const auto& src) {
      if (src) dst = *src;
    };
    set(c.steps, a->steps);
    set(c.stop_after, a->stop_after);
    set(c.seq, a->seq);
    set(c.world, a->world);
    set(c.dp, a->dp);
    set(c.nodes, a->nodes);
    set(c.algo, a->algo);
    set(c.balance, a->balance);
    set(c.checkpoint, a->checkpoint);
    set(c.loss, a->loss);
    set(c.precision, a->precision);
    set(c.seq_selective_fraction, a->seq_selective_fraction);
    set(c.seed, a->seed);
    set(c.data, a->data);
    set(c.out, a->out);
    set(c.resume, a->resume);
    if (a->init_from) {
      // The model comes from the directory's config.json; explicit model flags still apply and
      // are then checked against it (TrainConfig::validate names a difference).
      c.init_from = *a->init_from;
      c.model = train::read_hf_config(c.init_from);
    }
    set(c.ffn_chunk, a->ffn_chunk);
    set(c.lm_tile, a->lm_tile);
    set(c.optim.lr, a->lr);
    set(c.optim.min_lr, a->min_lr);
    set(c.optim.warmup, a->warmup);
    set(c.optim.weight_decay, a->weight_decay);
    set(c.optim.grad_clip, a->grad_clip);
    set(c.save_every, a->save_every);
    set(c.threads, a->threads);
    set(c.link, a->link);
    set(c.model.layers, a->layers);
    set(c.model.hidden, a->hidden);
    set(c.model.heads, a->heads);
    set(c.model.kv_heads, a->kv_heads);
    set(c.model.head_dim, a->head_dim);
    set(c.model.intermediate, a->intermediate);
    set(c.model.vocab, a->vocab);
    if (a->doc_mask) c.doc_mask = true;
    c.quiet = a->quiet;
    const bool banner = !c.quiet && comm::launcher_rank() == 0;  // once under mpirun
    if (banner)
      std::printf("longseq train: preset %s, %s\n  %lld steps, seq %lld, world %d (dp %d x cp %d), "
                  "algo %s, balance %s, checkpoint %s, loss %s, %s, ZeRO-3 over %d ranks\n",
                  c.preset.c_str(), c.model.describe().c_str(), static_cast<long long>(c.steps),
                  static_cast<long long>(c.seq), c.world, c.dp, c.cp(), c.algo.c_str(),
                  c.balance.c_str(), c.checkpoint.c_str(), c.loss.c_str(), c.precision.c_str(),
                  c.world);
    c.abort_on_failure = true;
    const train::TrainSummary s = train::train(c);
    if (banner && !s.steps.empty())
      std::printf("loss %.4f -> %.4f over steps %lld..%lld; peak %.1f GFLOP/s measured%s\n",
                  s.steps.front().loss, s.steps.back().loss,
                  static_cast<long long>(s.steps.front().step),
                  static_cast<long long>(s.steps.back().step), s.peak_gflops,
                  c.out.empty() ? "" : ("; wrote " + c.out + "/metrics.json").c_str());
    return 0;
  };
}

}  // namespace longseq::cli
