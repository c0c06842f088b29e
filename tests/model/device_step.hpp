#pragma once
// One training step of a tiny LLaMA on a model::DeviceReplica, through any model::Kernels and
// AttentionOp (model/kernels.hpp): what tests/train/device_replica_test.cpp runs on the CPU and
// tests/cuda/model_test.cpp runs on a GPU beside the CPU.
//
// The batch: L tokens at positions 0..L-1 of one sequence (world 1), seeded ids, the next token
// as the label and the last label ignored; the loss is the mean over the non-ignored labels.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/model/config.hpp"
#include "longseq/model/device_replica.hpp"
#include "longseq/model/kernels.hpp"
#include "longseq/model/lm_head.hpp"
#include "longseq/model/transformer.hpp"

namespace longseq::test {

/// Small LLaMAs with every shape the model code branches on: grouped KV heads, tied and untied
/// embeddings, a head dim the GPU's tensor-core attention takes (64) and one it does not (16).
inline model::LlamaConfig tiny_llama(int variant) {
  model::LlamaConfig c;
  c.layers = 2;
  c.vocab = 101;
  if (variant == 0) {  // GQA 4/2, D 16, tied
    c.hidden = 64;
    c.heads = 4;
    c.kv_heads = 2;
    c.head_dim = 16;
    c.intermediate = 96;
    c.tied_embeddings = true;
  } else {  // 2/1, D 64, untied
    c.hidden = 128;
    c.heads = 2;
    c.kv_heads = 1;
    c.head_dim = 64;
    c.intermediate = 160;
    c.tied_embeddings = false;
  }
  c.validate();
  return c;
}

/// Every unit of `layout` at its initialisation (model::init_unit with `seed`), on the host.
inline std::vector<std::vector<float>> initial_units(const model::ParamLayout& layout,
                                                     uint64_t seed) {
  std::vector<std::vector<float>> units;
  for (int u = 0; u < layout.num_units(); ++u) {
    units.emplace_back(static_cast<size_t>(layout.units()[u].size));
    model::init_unit(layout, u, seed, units.back().data());
  }
  return units;
}

/// ||a - b||_2 / ||b||_2 (the absolute L2 distance where b is all zeros).
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double se = 0, sr = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    se += d * d;
    sr += static_cast<double>(b[i]) * b[i];
  }
  return sr > 0 ? std::sqrt(se / sr) : std::sqrt(se);
}

struct StepOutput {
  double loss = 0;                        ///< mean over the non-ignored labels
  std::vector<std::vector<float>> grads;  ///< per unit, on the host
  int64_t saved_floats_peak = 0;          ///< model::StepResult's
};

struct StepInput {
  std::vector<int32_t> tokens, labels;
  std::vector<int64_t> pos;
  int64_t count = 0;  ///< non-ignored labels
};

inline StepInput step_input(int64_t l, int64_t vocab, uint64_t seed) {
  StepInput in;
  in.tokens.resize(static_cast<size_t>(l + 1));
  core::fill_randint(in.tokens.data(), in.tokens.size(), seed, static_cast<int32_t>(vocab));
  in.labels.assign(in.tokens.begin() + 1, in.tokens.end());
  in.tokens.pop_back();
  in.labels.back() = model::kIgnoreIndex;
  for (int64_t i = 0; i < l; ++i) in.pos.push_back(i);
  in.count = model::count_targets(in.labels.data(), l, vocab);
  return in;
}

/// One forward + backward of `replica`'s model over `in` (gradients zeroed first).
inline StepOutput device_step(model::DeviceReplica& replica, model::AttentionOp& attn,
                              const model::Kernels& kernels, const StepInput& in,
                              const model::ModelOptions& opt) {
  replica.zero_grads();
  model::StepBatch b;
  b.tokens = in.tokens.data();
  b.labels = in.labels.data();
  b.pos = in.pos.data();
  b.len = static_cast<int64_t>(in.pos.size());
  b.seq_len = b.len;
  const double scale = 1.0 / static_cast<double>(in.count);
  const model::StepResult r =
      model::forward_backward(replica.layout(), replica, attn, b, scale, opt, kernels);
  StepOutput out;
  out.loss = r.loss_sum / static_cast<double>(in.count);
  out.saved_floats_peak = r.saved_floats_peak;
  for (int u = 0; u < replica.layout().num_units(); ++u)
    out.grads.push_back(replica.download(u, 1));
  return out;
}

}  // namespace longseq::test
