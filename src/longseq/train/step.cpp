// One optimizer step (train/run.hpp): the step's tokens and mask, forward and backward, the loss
// and gradient-norm reductions, clipping and AdamW.
#include <algorithm>
#include <vector>

#include "longseq/core/checked.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/op_account.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/train/device.hpp"
#include "longseq/train/optimizer.hpp"
#include "longseq/train/run.hpp"

namespace longseq::train {

model::AttentionOp& step_attention(RankRun& run, const std::vector<int32_t>& docs) {
  // Causal, window and fixed masks are the same every step: the operator is built once. Document
  // ids from the data change with the sequence, so --mask document rebuilds it each step.
  if (run.attn && !run.s.parsed.mask.document) return *run.attn;
  std::shared_ptr<const attention::MaskSpec> mask = run.base_mask;
  if (!docs.empty()) {
    auto m = std::make_shared<attention::MaskSpec>(*run.base_mask);
    m->doc_ids = docs;
    mask = m;
  }
  run.attn = device_attention(run.s.parsed.device, run.s.parsed.algo, mask, run.s.seq_layout,
                              run.ctx, run.s.threads, run.s.parsed.precision);
  return *run.attn;
}

std::vector<float> gather_all(RankRun& run, bool grads) {
  const model::ParamLayout& layout = run.s.layout;
  ShardedState& state = run.state;
  std::vector<float> all;
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<float> f(static_cast<size_t>(state.shard_size(u) * run.world.size()));
    run.world.all_gather(grads ? state.grad_shard(u) : state.param_shard(u), f.data(),
                         static_cast<size_t>(state.shard_size(u)), core::DType::f32);
    f.resize(static_cast<size_t>(layout.units()[u].size));
    all.insert(all.end(), f.begin(), f.end());
  }
  return all;
}

namespace {

// The in-step progress line's hook (a terminal only: Progress enabled): the model asks its
// ParamSource for each layer's parameters in the forward pass and for each layer's gradient
// buffer in the backward pass, so forwarding those requests tells where the step is without a
// hook in the model. Every other rank, and every run off a terminal, calls the shards directly.
class ProgressSource final : public model::ParamSource {
 public:
  ProgressSource(model::ParamSource& inner, const model::ParamLayout& layout, Progress& progress,
                 int64_t step)
      : inner_(inner), layout_(layout), progress_(progress), step_(step) {}
  const float* acquire(int unit) override {
    if (!backward_) note(StepPass::forward, unit);
    return inner_.acquire(unit);
  }
  void prefetch(int unit) override { inner_.prefetch(unit); }
  void release(int unit) override { inner_.release(unit); }
  float* acquire_grad(int unit) override {
    backward_ = true;
    note(StepPass::backward, unit);
    return inner_.acquire_grad(unit);
  }
  void release_grad(int unit) override { inner_.release_grad(unit); }

 private:
  void note(StepPass pass, int unit) {
    const int64_t layers = layout_.config().layers;
    const int64_t l = unit - layout_.layer_unit(0);
    if (l >= 0 && l < layers)
      progress_.within_step(step_, pass, static_cast<int>(l), static_cast<int>(layers),
                            timer_.elapsed());
  }
  model::ParamSource& inner_;
  const model::ParamLayout& layout_;
  Progress& progress_;
  int64_t step_;
  bool backward_ = false;
  core::Timer timer_;
};

// Forward and backward over this rank's tokens of the step's micro-batches (one sequence each,
// --grad-accum of them); the loss is scaled by the global count of non-ignored tokens over every
// micro-batch of every rank (all-reduced first), so the gradients the micro-batches add into the
// ZeRO-3 shards (release_grad adds each reduce-scatter's sum) are those of the mean over the
// step's tokens, as one batch of dp * grad_accum sequences would give.
model::StepResult forward_backward(RankRun& run, StepResult& r,
                                   const std::vector<RankTokens>& micro) {
  const RunSetup& s = run.s;
  int64_t count = 0;
  for (const RankTokens& rt : micro)
    count += model::count_targets(rt.labels.data(), static_cast<int64_t>(rt.labels.size()),
                                  s.cfg.model.vocab);
  {
    core::ScopedTimer t(&r.wait_s);
    core::OpScope op(core::Op::comm_wait);
    run.world.all_reduce(&count, &count, 1, core::DType::i64);
  }
  // The host's gradient shards are the step's only with the state on the host: a GPU run's live
  // on the device (zeroing 4 bytes per parameter on the host each step would cost ~0.5 s at 1B).
  if (!run.mirror) run.state.zero_grads();
  const double scale = 1.0 / static_cast<double>(std::max<int64_t>(count, 1));
  // With device state (--device cuda) the step computes on the device's replica.
  model::ParamSource& params = run.mirror ? static_cast<model::ParamSource&>(*run.mirror)
                                          : static_cast<model::ParamSource&>(run.state);
  if (run.mirror) run.mirror->zero_grads();
  model::StepResult res;
  double loss = 0;
  for (size_t k = 0; k < micro.size(); ++k) {
    const RankTokens& rt = micro[k];
    model::AttentionOp& attn =
        step_attention(run, r.docs.empty() ? std::vector<int32_t>{} : r.docs[k]);
    const model::AttentionTimes at0 = attn.times();
    model::StepBatch b;
    b.tokens = rt.tokens.data();
    b.labels = rt.labels.data();
    b.pos = rt.pos.data();
    b.len = static_cast<int64_t>(rt.pos.size());
    b.seq_len = s.cfg.seq;
    model::StepResult one;
    if (run.progress.enabled()) {
      ProgressSource source(params, s.layout, run.progress, r.step);
      one = model::forward_backward(s.layout, source, attn, b, scale, s.options, *run.kernels);
    } else {
      one = model::forward_backward(s.layout, params, attn, b, scale, s.options, *run.kernels);
    }
    r.wait_s += attn.times().wait_s - at0.wait_s;
    loss += one.loss_sum;
    one.saved_floats_peak = std::max(one.saved_floats_peak, res.saved_floats_peak);
    res = one;
  }
  if (run.mirror &&
      run.world.size() > 1) {  // every replica's gradient, summed (attach_device_state)
    core::ScopedTimer t(&r.wait_s);
    core::OpScope op(core::Op::comm_wait);
    device_all_reduce(run.mirror->grads(), run.mirror->total(), run.mirror->device(), run.world);
  }
  {
    core::ScopedTimer t(&r.wait_s);
    // The norm's local sum of squares (1/R of the parameters) is counted with its all-reduce.
    core::OpScope op(core::Op::comm_wait);
    run.world.all_reduce(&loss, &loss, 1, core::DType::f64);
    r.grad_norm = run.optimizer
                      ? run.optimizer->grad_norm()
                      : global_grad_norm(run.state.grads(), run.state.total_shard(), run.world);
  }
  r.loss = loss / static_cast<double>(std::max<int64_t>(count, 1));
  return res;
}

// Clipping and AdamW; keeps the unclipped gradient of the run's last step for keep_params.
void update(RankRun& run, StepResult& r) {
  const TrainConfig& cfg = run.s.cfg;
  ShardedState& st = run.state;
  core::OpScope op(core::Op::optimizer);
  if (cfg.keep_params && r.step + 1 == run.s.end) {
    if (run.mirror) {  // the unclipped gradient, from the device into the shards gather_all reads
      std::vector<float> full;
      for (int u = 0; u < run.s.layout.num_units(); ++u) {
        full.resize(static_cast<size_t>(run.s.layout.units()[u].size));
        run.mirror->unit_to_host(run.mirror->grads(), u, full.data());
        const int64_t b = st.shard_begin(u);
        const int64_t n =
            std::clamp<int64_t>(static_cast<int64_t>(full.size()) - b, 0, st.shard_size(u));
        float* shard = st.grad_shard(u);
        std::fill(shard, shard + st.shard_size(u), 0.0f);
        std::copy_n(full.begin() + b, n, shard);
      }
    }
    std::vector<float> g = gather_all(run, true);
    if (run.writer) run.final_grads = std::move(g);
  }
  r.lr = learning_rate(cfg.optim, r.step, cfg.steps);
  if (run.optimizer) {
    run.optimizer->step(r.grad_norm, cfg.optim, r.lr, r.step);
    return;
  }
  clip_gradients(st.grads(), st.total_shard(), r.grad_norm, cfg.optim.grad_clip);
  adamw_step(st.params(), st.grads(), st.exp_avg(), st.exp_avg_sq(), st.decay_mask().data(),
             st.total_shard(), cfg.optim, r.lr, r.step);
}

}  // namespace

StepResult run_step(RankRun& run, int64_t step) {
  const RunSetup& s = run.s;
  run.world.barrier();
  StepResult r;
  core::OpAccountInstall account(&r.ops);  // the step's per-op account (wall time)
  core::Timer timer;
  r.step = step;
  const double zero0 = run.state.comm_seconds();
  // Micro-batch k of step `step` is sequence number step * grad_accum + k of the replica's round
  // robin, so dp replicas x grad_accum micro-batches read the sequences dp * grad_accum replicas
  // of one micro-batch would.
  const int64_t micro_batches = s.cfg.grad_accum;
  int64_t first = 0;
  core::require(core::checked_mul(step, micro_batches, first), "train", "step ", step,
                " times --grad-accum ", micro_batches, " overflows");
  std::vector<RankTokens> micro;
  for (int64_t k = 0; k < micro_batches; ++k) {
    const int64_t index = s.loader.sequence_index(first + k, run.replica, s.cfg.dp);
    micro.push_back(s.loader.rank_tokens(index, s.seq_layout, run.ctx.rank(), model::kIgnoreIndex));
    if (s.parsed.mask.document) r.docs.push_back(s.loader.document_ids(index));
  }
  const model::StepResult res = forward_backward(run, r, micro);
  update(run, r);
  r.seconds = timer.elapsed();
  r.wait_s += run.state.comm_seconds() - zero0;
  r.saved_floats_peak = res.saved_floats_peak;
  return r;
}

}  // namespace longseq::train
