#pragma once
// Inference: the model's forward without a backward, per-token losses (evaluation), and
// generation with a KV cache sharded over the ranks of a context-parallel group.
//
// Legend: L local tokens (layout order, padding included), C hidden, V vocabulary, Hq/Hkv heads,
// D head dim, P ranks, n cached tokens of one rank.
//
// Prefill: forward_hidden() runs the whole model over a sequence split by a balance layout, with
// the distributed attention of the AttentionOp (any algorithm); with a KvCache each rank keeps the
// K (after RoPE) and V of its own tokens, per layer: the cache is sharded exactly as the prompt.
// It is the training forward's own block code (transformer.hpp model::forward_hidden, any
// model::Kernels device); evaluation calls that one on its --device directly, generation calls
// prefill() (the same with the KV cache kept on the host).
// Devices (generate --device): the parameters, the activations and every matrix product, norm,
// RoPE and SwiGLU of the prefill and of each decode step run on the Kernels' device. The KV cache
// and the decode attention over it (one query row against the cache, kernels/cpu/
// decode_attention.hpp; no GPU kernel of ours does that yet) stay on the host, with the merge of
// the ranks' partials: per layer and step the new q, k, v come to the host and the attention
// output goes back (a few KiB each way). On the CPU no copy is made.
// Decode: decode_step() runs one new token on every rank (the token-level work, embedding,
// projections and MLP, is replicated: it is O(C^2) per token, while attention over a long cache is
// O(n C)); each rank computes the attention partial of the new query over its cache shard
// (O_r, LSE_r), the partials are all-gathered and merged,
//   LSE = log sum_r exp(LSE_r),  O = sum_r exp(LSE_r - LSE) O_r     (design.md §2),
// in rank order on every rank (so every rank gets identical bits). The new token's K, V go to
// one rank's shard (the caller picks it, e.g. round-robin so that shards stay balanced).
// Masks: causal always, plus the model's sliding window (LlamaConfig::sliding_window) in decode.
// RoPE: the model's scaled RoPE at global positions; dynamic scaling uses the N of each forward
// (prefill: the prompt; a decode step: its position + 1), as transformers does.
#include <cstdint>
#include <vector>

#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/config.hpp"
#include "longseq/model/transformer.hpp"

namespace longseq::comm {
class Group;
}

namespace longseq::model {

class Kernels;

/// The full parameters on one rank, unit by unit (inference keeps a replica: no optimizer state,
/// no gathers per forward), on the host or on one device. Gradients are refused (LONGSEQ_CHECK):
/// inference has no backward.
class ReplicaParams final : public ParamSource {
 public:
  /// `units[u]` holds unit u's layout().units()[u].size floats (or more), given on the host and
  /// kept on `device`: the host keeps the vectors themselves; a GPU gets a copy of each unit
  /// (blocking; the host's are freed as they go, so that the host never holds the model twice).
  ReplicaParams(const ParamLayout& layout, std::vector<std::vector<float>> units,
                core::Device device = core::Device::cpu());
  const ParamLayout& layout() const { return layout_; }
  core::Device device() const { return device_; }
  /// A pointer on device().
  const float* acquire(int unit) override;
  void release(int) override {}
  float* acquire_grad(int unit) override;
  void release_grad(int unit) override;

 private:
  ParamLayout layout_;
  core::Device device_;
  std::vector<std::vector<float>> units_;       // on the host
  std::vector<core::Buffer<float>> on_device_;  // on device_ when it is not the host
};

struct InferenceOptions {
  int threads = 1;
  core::DType precision = core::DType::f32;  ///< of the matrix products (transformer.hpp)
  int64_t ffn_chunk = 1024;
};

/// One rank's shard of the KV cache: per layer the keys (after RoPE, times the RoPE attention
/// factor as the forward computed them) and values of its tokens, in the order they were added.
struct KvCache {
  int64_t layers = 0, hkv = 0, d = 0;
  std::vector<std::vector<float>> k, v;  ///< [layer][n * Hkv * D]
  std::vector<int64_t> pos;              ///< [n] global positions
  void reset(int64_t layers, int64_t hkv, int64_t d);
  int64_t size() const { return static_cast<int64_t>(pos.size()); }
};

/// The model's options of an inference (precision, ffn_chunk, threads; the rest unused).
ModelOptions model_options(const InferenceOptions& opt);

/// The forward over this rank's tokens on the host (batch.labels unused; padding rows have
/// pos -1): the final-norm hidden states [L, C]. With `cache`, appends this rank's non-padding
/// tokens' K, V of every layer. Collective over the attention op's group. It is
/// model::forward_hidden (transformer.hpp: the training forward's blocks) with
/// CpuKernels(opt.threads) (with `cache`: prefill() with them); on another device call those
/// with its kernels.
std::vector<float> forward_hidden(const ParamLayout& layout, ParamSource& params, AttentionOp& attn,
                                  const StepBatch& batch, const InferenceOptions& opt,
                                  KvCache* cache = nullptr);

/// The prefill on `kernels`' device: transformer.hpp's forward_hidden (the parameters and the
/// attention op's tensors on that device, the batch on the host) whose K, V of this rank's
/// non-padding tokens are appended to `cache`, on the host, every layer (copied from the device
/// as each layer computes them). Returns the final-norm hidden states [L, C] on the device.
/// Collective over the attention op's group.
core::Tensor<float> prefill(const ParamLayout& layout, ParamSource& params, AttentionOp& attn,
                            const StepBatch& batch, const InferenceOptions& opt,
                            const Kernels& kernels, KvCache& cache);

/// loss[t] = logsumexp(h_t W^T) - (h_t W^T)[labels[t]] in fp64 for t in [0, l) (W: lm_head or
/// the tied embedding); NaN where labels[t] is kIgnoreIndex. Never holds [l, V]: tiles of rows.
/// `hidden` [l, C] and the parameters on `kernels`' device, `labels` and the result on the host:
/// the logits' product runs on the device, a tile at a time, and each tile's fp64 log-sum-exp on
/// the host. Throws core::Error("[model] ...") naming a label outside [0, V).
std::vector<double> token_losses(const ParamLayout& layout, ParamSource& params,
                                 const float* hidden, const int32_t* labels, int64_t l,
                                 const InferenceOptions& opt, const Kernels& kernels);
/// The same on the host: token_losses with CpuKernels(opt.threads).
std::vector<double> token_losses(const ParamLayout& layout, ParamSource& params,
                                 const float* hidden, const int32_t* labels, int64_t l,
                                 const InferenceOptions& opt);

/// The logits [V], on the host, of one final-norm hidden row on `kernels`' device (where the
/// parameters are): the product runs there.
std::vector<float> logits_of(const ParamLayout& layout, ParamSource& params, const float* hidden,
                             const InferenceOptions& opt, const Kernels& kernels);
/// The same on the host: logits_of with CpuKernels(opt.threads).
std::vector<float> logits_of(const ParamLayout& layout, ParamSource& params, const float* hidden,
                             const InferenceOptions& opt);

/// One decode step, on every rank of `group` with the same token and position, on `kernels`'
/// device (where the parameters are; the cache on the host, see top of file): the new token's
/// final-norm hidden state [1, C] on that device (identical on every rank). Its K, V are
/// appended to `cache` where `keep` is true (exactly one rank should keep it). Throws
/// core::Error("[model] ...") for a token outside the vocabulary or a negative position.
/// Collective over `group`.
core::Tensor<float> decode_step(const ParamLayout& layout, ParamSource& params, comm::Group& group,
                                KvCache& cache, int32_t token, int64_t pos, bool keep,
                                const InferenceOptions& opt, const Kernels& kernels);
/// The same on the host (parameters on the host): decode_step with CpuKernels(opt.threads), the
/// hidden state [C] as a vector.
std::vector<float> decode_step(const ParamLayout& layout, ParamSource& params, comm::Group& group,
                               KvCache& cache, int32_t token, int64_t pos, bool keep,
                               const InferenceOptions& opt);

}  // namespace longseq::model
