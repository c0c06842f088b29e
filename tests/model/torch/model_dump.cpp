// model_dump DIR [tied|untied] [policy]: one forward + backward of a small LLaMA on 2 local ranks
// (burst attention, zigzag, ZeRO-3), written for tests/model/torch/model_vs_torch.py:
//   DIR/model.safetensors  initial parameters (Hugging Face names)
//   DIR/grads.safetensors  gradients of the mean next-token loss (same names)
//   DIR/batch.safetensors  tokens int32 [N], labels int32 [N] (global shift, -100 = ignored)
//   DIR/result.json        loss, config
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/attention/layout.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/transformer.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/zero.hpp"

using namespace longseq;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: model_dump DIR [tied|untied] [none|full|selective++|seq-selective]\n");
    return 2;
  }
  const std::string dir = argv[1];
  model::LlamaConfig cfg;
  cfg.layers = 2;
  cfg.hidden = 32;
  cfg.heads = 4;
  cfg.kv_heads = 2;
  cfg.head_dim = 8;
  cfg.intermediate = 48;
  cfg.vocab = 40;
  cfg.rope_theta = 10000.0;
  cfg.tied_embeddings = !(argc > 2 && std::string(argv[2]) == "untied");
  const std::string policy = argc > 3 ? argv[3] : "seq-selective";
  const int64_t n = 45;  // odd: the zigzag layout pads internally
  const model::ParamLayout layout(cfg);
  std::vector<int32_t> tokens(n), labels(n);
  core::fill_randint(tokens.data(), n, 7, static_cast<int32_t>(cfg.vocab));
  for (int64_t p = 0; p < n; ++p) labels[p] = p + 1 < n ? tokens[p + 1] : model::kIgnoreIndex;
  labels[5] = labels[17] = model::kIgnoreIndex;
  const attention::Layout lay(attention::Balance::zigzag, n, 2);
  double loss = 0;
  comm::Options opt;
  opt.world = 2;
  comm::run_local(opt, [&](comm::Group& g) {
    train::ShardedState st(layout, g, 99);
    std::vector<std::vector<float>> p0;
    for (int u = 0; u < layout.num_units(); ++u) p0.push_back(st.gather_full(u, 0));
    auto mask = std::make_shared<attention::MaskSpec>();
    mask->causal = true;
    auto attn =
        model::make_distributed_attention(attention::Algorithm::parse("burst"), mask, lay, g, 1);
    const std::vector<int64_t> pos = lay.positions(g.rank());
    std::vector<int32_t> lt(pos.size(), 0), ll(pos.size(), model::kIgnoreIndex);
    for (size_t i = 0; i < pos.size(); ++i)
      if (pos[i] >= 0) lt[i] = tokens[pos[i]], ll[i] = labels[pos[i]];
    int64_t count = model::count_targets(ll.data(), static_cast<int64_t>(ll.size()), cfg.vocab);
    g.all_reduce(&count, &count, 1, core::DType::i64);
    model::StepBatch b{lt.data(), ll.data(), pos.data(), static_cast<int64_t>(pos.size())};
    model::ModelOptions mo;
    mo.policy = model::parse_checkpoint_policy(policy);
    mo.ffn_chunk = 7;
    mo.lm.token_tile = 5;
    mo.lm.vocab_tile = 16;
    const auto res = model::forward_backward(layout, st, *attn, b, 1.0 / count, mo);
    double l = res.loss_sum;
    g.all_reduce(&l, &l, 1, core::DType::f64);
    std::vector<std::vector<float>> gr;
    for (int u = 0; u < layout.num_units(); ++u) {
      std::vector<float> f(static_cast<size_t>(st.shard_size(u) * g.size()));
      g.all_gather(st.grad_shard(u), f.data(), static_cast<size_t>(st.shard_size(u)),
                   core::DType::f32);
      gr.push_back(std::move(f));
    }
    if (g.rank() != 0) return;
    loss = l / count;
    std::vector<core::SafeTensorRef> pt, gt;
    for (int u = 0; u < layout.num_units(); ++u)
      for (const auto& t : layout.units()[u].tensors) {
        pt.push_back({t.name, core::DType::f32, t.shape, p0[u].data() + t.offset});
        gt.push_back({t.name, core::DType::f32, t.shape, gr[u].data() + t.offset});
      }
    core::write_safetensors(dir + "/model.safetensors", pt);
    core::write_safetensors(dir + "/grads.safetensors", gt);
    core::write_safetensors(dir + "/batch.safetensors",
                            {{"tokens", core::DType::i32, {n}, tokens.data()},
                             {"labels", core::DType::i32, {n}, labels.data()}});
  });
  nlohmann::json r = {{"loss", loss}, {"config", train::hf_config(cfg)}, {"policy", policy}};
  core::write_file_atomic(dir + "/result.json", r.dump(2));
  std::printf("model_dump: loss %.8f -> %s\n", loss, dir.c_str());
  return 0;
}
