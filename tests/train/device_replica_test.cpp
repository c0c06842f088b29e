// model::DeviceReplica and the device-generic step (model/kernels.hpp), on the CPU.
//
// The GPU runs the model through the same forward_backward as the CPU, handed CUDA kernels and a
// DeviceReplica on the GPU (tests/cuda/model_test.cpp). Here the same path with CpuKernels and a
// replica on the host must give what the trainer's own state gives (train/zero.hpp ShardedState
// at world 1): the same loss bit for bit, the same gradient bits for every unit but the tied
// embedding, whose two contributions (LM head, embedding) are summed in another order
// (device_replica.hpp), so within a few fp32 ulps there. Every checkpoint policy, two model
// shapes (GQA and tied; MHA-like and untied), odd L.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "../model/device_step.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/train/run.hpp"
#include "longseq/train/zero.hpp"
#include "train_test_util.hpp"

namespace {

namespace lm = longseq::model;
namespace ts = longseq::test;
using longseq::attention::Algorithm;
using longseq::attention::Balance;
using longseq::attention::Layout;
using longseq::attention::MaskSpec;

// A group of one rank and its ring attention over l tokens under a causal mask, handed to fn.
template <class Fn>
void with_causal_ring(int64_t l, Fn fn) {
  longseq::comm::Options o;
  o.world = 1;
  longseq::comm::run(o, [&](longseq::comm::Group& g) {
    const Layout lay(Balance::contiguous, l, 1);
    auto mask = std::make_shared<MaskSpec>();
    mask->causal = true;
    auto attn = lm::make_distributed_attention(Algorithm::parse("ring"), mask, lay, g, 1);
    fn(g, *attn);
  });
}

TEST(DeviceReplica, CpuStepEqualsTheTrainersState) {
  const int64_t l = 45;
  for (int variant : {0, 1})
    for (const char* policy : {"none", "full", "selective++", "seq-selective"}) {
      const lm::LlamaConfig cfg = ts::tiny_llama(variant);
      const lm::ParamLayout layout(cfg);
      const ts::StepInput in = ts::step_input(l, cfg.vocab, 11 + variant);
      lm::ModelOptions opt;
      opt.policy = lm::parse_checkpoint_policy(policy);
      opt.ffn_chunk = 16;  // several MLP chunks, the last one short
      with_causal_ring(l, [&](longseq::comm::Group& g, lm::AttentionOp& attn) {
        const std::string what = std::string(policy) + " variant " + std::to_string(variant);

        longseq::train::ShardedState st(layout, g, 5);
        st.zero_grads();
        lm::StepBatch b;
        b.tokens = in.tokens.data();
        b.labels = in.labels.data();
        b.pos = in.pos.data();
        b.len = l;
        b.seq_len = l;
        const lm::StepResult ref =
            lm::forward_backward(layout, st, attn, b, 1.0 / static_cast<double>(in.count), opt);

        lm::DeviceReplica rep(layout, longseq::core::Device::cpu(), 5);
        const ts::StepOutput got = ts::device_step(rep, attn, lm::CpuKernels(1), in, opt);

        EXPECT_EQ(got.loss, ref.loss_sum / static_cast<double>(in.count)) << what;
        for (int u = 0; u < layout.num_units(); ++u) {
          const auto n = static_cast<size_t>(layout.units()[u].size);
          const std::vector<float> want(st.grad_shard(u), st.grad_shard(u) + n);
          if (cfg.tied_embeddings && u == layout.embedding_unit()) {
            EXPECT_LT(ts::rel_l2(got.grads[u], want), 1e-6) << what << " unit " << u;
          } else {
            EXPECT_EQ(0, std::memcmp(got.grads[u].data(), want.data(), n * sizeof(float)))
                << what << " unit " << u << " (rel " << ts::rel_l2(got.grads[u], want) << ")";
          }
        }
      });
    }
}

// Activation offload (ModelOptions::offload) on the CPU: every block input but the last is
// parked off the device and taken back for the backward; the step gives the same bits as
// without, and the activations kept on the device shrink by exactly those inputs. Three layers,
// so that a fetch runs ahead of the block that takes it; every policy.
TEST(DeviceReplica, OffloadGivesTheSameBitsAndKeepsTheBlockInputsOff) {
  const int64_t l = 45;
  for (int variant : {0, 1})
    for (const char* policy : {"none", "full", "selective++", "seq-selective"}) {
      lm::LlamaConfig cfg = ts::tiny_llama(variant);
      cfg.layers = 3;
      const lm::ParamLayout layout(cfg);
      const ts::StepInput in = ts::step_input(l, cfg.vocab, 31 + variant);
      lm::ModelOptions opt;
      opt.policy = lm::parse_checkpoint_policy(policy);
      opt.ffn_chunk = 16;
      const std::string what = std::string(policy) + " variant " + std::to_string(variant);
      with_causal_ring(l, [&](longseq::comm::Group&, lm::AttentionOp& attn) {
        lm::DeviceReplica rep(layout, longseq::core::Device::cpu(), 5);
        const ts::StepOutput kept = ts::device_step(rep, attn, lm::CpuKernels(1), in, opt);
        lm::ModelOptions off = opt;
        off.offload = true;
        const ts::StepOutput parked = ts::device_step(rep, attn, lm::CpuKernels(1), in, off);
        EXPECT_EQ(parked.loss, kept.loss) << what;
        ASSERT_EQ(parked.grads.size(), kept.grads.size());
        for (size_t u = 0; u < kept.grads.size(); ++u)
          EXPECT_EQ(parked.grads[u], kept.grads[u]) << what << " unit " << u;
        EXPECT_EQ(kept.saved_floats_peak - parked.saved_floats_peak,
                  (cfg.layers - 1) * l * cfg.hidden)
            << what;
      });
    }
}

// The CPU's park / fetch / take: the same bits back, the shape kept.
TEST(DeviceReplica, AParkedTensorComesBackBitForBit) {
  const lm::CpuKernels k(1);
  longseq::core::Tensor<float> t(longseq::core::Shape{7, 3}, longseq::core::Device::cpu(),
                                 longseq::core::Uninit{}, "t");
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = std::ldexp(1.0f + i, -static_cast<int>(i));
  const std::vector<float> want(t.data(), t.data() + t.numel());
  auto p = k.park(std::move(t));
  k.fetch(*p);
  k.fetch(*p);  // a second prefetch does nothing
  const longseq::core::Tensor<float> back = k.take(*p);
  EXPECT_EQ(back.dim(0), 7);
  EXPECT_EQ(back.dim(1), 3);
  EXPECT_EQ(std::vector<float>(back.data(), back.data() + back.numel()), want);
}

// The replica starts where every state with its seed starts, and its host copies go both ways.
TEST(DeviceReplica, StartsFromTheSeedAndCopiesBothWays) {
  const lm::ParamLayout layout(ts::tiny_llama(0));
  lm::DeviceReplica rep(layout, longseq::core::Device::cpu(), 9);
  EXPECT_EQ(rep.total() % lm::kParamAlign, 0);
  for (int u = 0; u < layout.num_units(); ++u) {
    EXPECT_EQ(rep.offset(u) % lm::kParamAlign, 0);
    std::vector<float> want(static_cast<size_t>(layout.units()[u].size));
    lm::init_unit(layout, u, 9, want.data());
    EXPECT_EQ(rep.download(u, 0), want) << "unit " << u;
    EXPECT_EQ(rep.download(u, 1), std::vector<float>(want.size(), 0.0f)) << "unit " << u;
  }
  const int u = layout.layer_unit(1);
  std::vector<float> v(static_cast<size_t>(layout.units()[u].size));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  rep.upload(u, v.data());
  EXPECT_EQ(rep.download(u, 0), v);
  rep.acquire_grad(u)[3] = 2.0f;
  EXPECT_EQ(rep.download(u, 1)[3], 2.0f);
  rep.zero_grads();
  EXPECT_EQ(rep.download(u, 1)[3], 0.0f);
  // Units are disjoint: the next unit starts after this one's last element.
  EXPECT_GE(rep.offset(u + 1), rep.offset(u) + layout.units()[u].size);
}

}  // namespace

namespace {

namespace trn = longseq::train;

// Steps [from, to) of `c` with the training state on the CPU "device" (attach_device_state),
// saving as the trainer does; returns each step's loss and, at the end, the parameters.
// At c.world ranks (local threads), each with the whole model on the "device"; rank 0's losses
// and parameters come back, and each rank's replica in `replicas` when given.
std::vector<double> device_path(const trn::TrainConfig& c, int64_t expect_first,
                                std::vector<float>* params,
                                std::vector<std::vector<float>>* replicas = nullptr) {
  const trn::RunSetup setup(c);
  std::vector<double> losses;
  longseq::comm::Options o;
  o.world = c.world;
  if (replicas) replicas->assign(static_cast<size_t>(c.world), {});
  longseq::comm::run(o, [&](longseq::comm::Group& g) {
    trn::RankRun run(setup, g);
    trn::attach_device_state(run, longseq::core::Device::cpu());
    const int64_t first = trn::restore(run);
    EXPECT_EQ(first, expect_first);
    std::vector<double> mine;
    for (int64_t step = first; step < setup.end; ++step) {
      mine.push_back(trn::run_step(run, step).loss);
      trn::save_if_due(run, step);
    }
    trn::sync_from_device(run);
    std::vector<float> all = trn::gather_all(run, false);
    if (replicas) {
      const float* p = run.mirror->params();
      (*replicas)[static_cast<size_t>(g.rank())].assign(p, p + run.mirror->total());
    }
    if (g.rank() != 0) return;
    losses = std::move(mine);
    *params = std::move(all);
  });
  return losses;
}

// The trainer with its state on a device (what --device cuda runs), here on the CPU: the same
// losses and parameters as the sharded path bit for bit (an untied model; device_replica.hpp), a
// run interrupted after 2 steps and resumed included, so the state travels to and from the
// device at restore and save without a bit lost.
TEST(DeviceState, TheDevicePathOnTheCpuIsTheShardedPathBitForBit) {
  trn::TrainConfig c = longseq::testing::tiny_config();
  c.model.tied_embeddings = false;
  c.steps = 4;
  c.checkpoint = "seq-selective";
  const trn::TrainSummary want = trn::train(c);
  ASSERT_EQ(want.steps.size(), 4u);

  const std::string dir = ::testing::TempDir() + "device_state_resume";
  std::filesystem::remove_all(dir);
  trn::TrainConfig first = c;
  first.stop_after = 2;
  first.out = dir;
  first.save_every = 0;
  std::vector<float> p_first;
  const std::vector<double> l_first = device_path(first, 0, &p_first);
  trn::TrainConfig rest = c;
  rest.resume = dir;
  std::vector<float> p_rest;
  const std::vector<double> l_rest = device_path(rest, 2, &p_rest);
  std::filesystem::remove_all(dir);

  ASSERT_EQ(l_first.size() + l_rest.size(), 4u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(l_first[i], want.steps[i].loss) << "step " << i;
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(l_rest[i], want.steps[2 + i].loss) << "step " << 2 + i;
  ASSERT_EQ(p_rest.size(), want.params.size());
  EXPECT_EQ(0, std::memcmp(p_rest.data(), want.params.data(), p_rest.size() * sizeof(float)));
}

// Ranks sharing one device (what --device cuda --world P runs), here on the CPU: each rank holds
// the whole model and the gradients are summed on the device (train::device_all_reduce), so every
// replica stays bit-identical to the others, and the losses and parameters follow the sharded
// trainer's (ZeRO-3 on the host) within the rounding of the other summation order. A run
// interrupted and resumed at world 3 gives the uninterrupted one's bits.
TEST(DeviceState, RanksSharingADeviceEachHoldTheModelAndFollowTheShardedRun) {
  for (const int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    trn::TrainConfig c = longseq::testing::tiny_config();
    c.world = world;
    c.steps = 3;
    c.checkpoint = "seq-selective";
    const trn::TrainSummary want = trn::train(c);
    ASSERT_EQ(want.steps.size(), 3u);
    std::vector<float> params;
    std::vector<std::vector<float>> replicas;
    const std::vector<double> losses = device_path(c, 0, &params, &replicas);
    ASSERT_EQ(losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(losses[i], want.steps[i].loss, 1e-5 * std::fabs(want.steps[i].loss))
          << "step " << i;
    ASSERT_EQ(params.size(), want.params.size());
    double worst = 0;
    for (size_t i = 0; i < params.size(); ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(params[i]) - want.params[i]));
    EXPECT_LT(worst, 1e-5) << "parameters after 3 steps";
    for (int r = 1; r < world; ++r)
      EXPECT_EQ(0, std::memcmp(replicas[r].data(), replicas[0].data(),
                               replicas[0].size() * sizeof(float)))
          << "rank " << r << "'s replica differs from rank 0's";
    if (world != 3) continue;
    const std::string dir = ::testing::TempDir() + "device_state_world3";
    std::filesystem::remove_all(dir);
    trn::TrainConfig first = c;
    first.stop_after = 2;
    first.out = dir;
    first.save_every = 0;
    std::vector<float> p_first;
    (void)device_path(first, 0, &p_first);
    trn::TrainConfig rest = c;
    rest.resume = dir;
    std::vector<float> p_rest;
    const std::vector<double> l_rest = device_path(rest, 2, &p_rest);
    std::filesystem::remove_all(dir);
    ASSERT_EQ(l_rest.size(), 1u);
    EXPECT_EQ(l_rest[0], losses[2]) << "the resumed step";
    EXPECT_EQ(0, std::memcmp(p_rest.data(), params.data(), params.size() * sizeof(float)))
        << "the resumed run's parameters";
  }
}

}  // namespace
