// The model's training step on a GPU (issue "GPU III"): model::forward_backward handed the CUDA
// kernels (model/cuda/kernels_cuda.hpp), a DeviceReplica on the GPU and the whole-sequence GPU
// attention, against the same step on the CPU (CpuKernels, a host replica, the distributed
// executor at world 1), which tests/train/device_replica_test.cpp ties to the trainer's own state.
//
// Tolerances (tests/README.md): fp32 compute, the GPU's kernels differ from the CPU's in
// summation order only (cuBLASLt vs OpenBLAS/oneDNN, tile orders in attention), so the loss
// agrees to 1e-5 relative and each unit's gradient to 1e-4 in relative L2. bf16 compute rounds
// operands to bf16 on both sides, but an fp32 ulp of difference before a rounding can move the
// rounded value by 2^-8 relative; over two layers the gradients then agree to about 1e-2 (the
// same bound precision_test.cpp uses between bf16 layouts on the CPU) and the loss to 1e-3.
// Every checkpoint policy, causal, window and document masks, GQA and tied / MHA-like and
// untied, L = 45 (no multiple of the 64-token tile).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "../model/device_step.hpp"
#include "../model/model_test_util.hpp"
#include "cuda_test_util.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/cuda/kernels_cuda.hpp"

namespace {

namespace lm = longseq::model;
namespace ts = longseq::test;
using longseq::attention::Algorithm;
using longseq::attention::Balance;
using longseq::attention::Layout;
using longseq::attention::MaskSpec;
using longseq::core::Device;
using longseq::core::DType;

std::shared_ptr<MaskSpec> mask_of(const std::string& kind, int64_t l) {
  auto m = std::make_shared<MaskSpec>();
  m->causal = true;
  if (kind == "window") m->window = 7;
  if (kind == "document")
    for (int64_t i = 0; i < l; ++i)
      m->doc_ids.push_back(static_cast<int32_t>(i < 13 ? 0 : 1 + i / 20));
  return m;
}

TEST(CudaModel, StepEqualsTheCpuStep) {
  LONGSEQ_NEED_GPU();
  const int64_t l = 45;
  for (int variant : {0, 1})
    for (DType precision : {DType::f32, DType::bf16})
      for (const char* mask : {"causal", "window", "document"})
        for (const char* policy : {"none", "full", "selective++", "seq-selective"}) {
          const lm::LlamaConfig cfg = ts::tiny_llama(variant);
          const lm::ParamLayout layout(cfg);
          const ts::StepInput in = ts::step_input(l, cfg.vocab, 21 + variant);
          lm::ModelOptions opt;
          opt.policy = lm::parse_checkpoint_policy(policy);
          opt.precision = precision;
          opt.ffn_chunk = 16;
          const std::string what = std::string(policy) + " " + mask + " " +
                                   (precision == DType::bf16 ? "bf16" : "f32") + " variant " +
                                   std::to_string(variant);
          const Layout lay(Balance::contiguous, l, 1);
          const auto m = mask_of(mask, l);
          ts::StepOutput cpu, gpu;
          longseq::comm::Options o;
          o.world = 1;
          longseq::comm::run(o, [&](longseq::comm::Group& g) {
            auto attn =
                lm::make_distributed_attention(Algorithm::parse("ring"), m, lay, g, 1, precision);
            lm::DeviceReplica rep(layout, Device::cpu(), 3);
            cpu = ts::device_step(rep, *attn, lm::CpuKernels(1), in, opt);
          });
          {
            auto kernels = lm::cuda::make_kernels(Device::cuda(0));
            auto attn = lm::cuda::make_local_attention(m, lay, precision, Device::cuda(0));
            lm::DeviceReplica rep(layout, Device::cuda(0), 3);
            gpu = ts::device_step(rep, *attn, *kernels, in, opt);
          }
          const bool bf16 = precision == DType::bf16;
          EXPECT_NEAR(gpu.loss, cpu.loss, (bf16 ? 1e-3 : 1e-5) * cpu.loss) << what;
          for (size_t u = 0; u < cpu.grads.size(); ++u) {
            const double e = ts::rel_l2(gpu.grads[u], cpu.grads[u]);
            EXPECT_LT(e, bf16 ? 1e-2 : 1e-4) << what << " unit " << u;
            ts::record_error(gpu.grads[u], cpu.grads[u],
                             "grad_unit" + std::to_string(u) + "_" + (bf16 ? "bf16" : "f32"));
          }
        }
}

// Two steps in a row on one replica and one attention (the trainer's use): the second step's
// results do not depend on what the first left in device memory.
TEST(CudaModel, RepeatedStepsAreBitIdentical) {
  LONGSEQ_NEED_GPU();
  const lm::LlamaConfig cfg = ts::tiny_llama(1);
  const lm::ParamLayout layout(cfg);
  const ts::StepInput in = ts::step_input(45, cfg.vocab, 4);
  lm::ModelOptions opt;
  opt.precision = DType::bf16;
  const Layout lay(Balance::contiguous, 45, 1);
  auto kernels = lm::cuda::make_kernels(Device::cuda(0));
  auto attn =
      lm::cuda::make_local_attention(mask_of("causal", 45), lay, DType::bf16, Device::cuda(0));
  lm::DeviceReplica rep(layout, Device::cuda(0), 3);
  const ts::StepOutput a = ts::device_step(rep, *attn, *kernels, in, opt);
  const ts::StepOutput b = ts::device_step(rep, *attn, *kernels, in, opt);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.grads, b.grads);
  EXPECT_GT(attn->times().compute_s, 0.0);
}

// Activation offload on the GPU (pinned host memory, a copy stream, events): the same bits as
// the step without it, two steps in a row (the second reuses the pinned blocks), every policy,
// three layers so that a fetch runs ahead of the block that takes it.
TEST(CudaModel, OffloadGivesTheSameBits) {
  LONGSEQ_NEED_GPU();
  lm::LlamaConfig cfg = ts::tiny_llama(1);
  cfg.layers = 3;
  const lm::ParamLayout layout(cfg);
  const ts::StepInput in = ts::step_input(45, cfg.vocab, 6);
  const Layout lay(Balance::contiguous, 45, 1);
  for (const char* policy : {"none", "full", "selective++", "seq-selective"}) {
    lm::ModelOptions opt;
    opt.precision = DType::bf16;
    opt.policy = lm::parse_checkpoint_policy(policy);
    auto kernels = lm::cuda::make_kernels(Device::cuda(0));
    auto attn =
        lm::cuda::make_local_attention(mask_of("causal", 45), lay, DType::bf16, Device::cuda(0));
    lm::DeviceReplica rep(layout, Device::cuda(0), 3);
    const ts::StepOutput kept = ts::device_step(rep, *attn, *kernels, in, opt);
    lm::ModelOptions off = opt;
    off.offload = true;
    for (int step = 0; step < 2; ++step) {
      const ts::StepOutput parked = ts::device_step(rep, *attn, *kernels, in, off);
      EXPECT_EQ(parked.loss, kept.loss) << policy << " step " << step;
      EXPECT_EQ(parked.grads, kept.grads) << policy << " step " << step;
      EXPECT_EQ(kept.saved_floats_peak - parked.saved_floats_peak,
                (cfg.layers - 1) * 45 * cfg.hidden)
          << policy;
    }
  }
}

TEST(CudaModel, RefusesWhatItCannotRun) {
  LONGSEQ_NEED_GPU();
  const Layout two(Balance::contiguous, 64, 2);
  try {
    lm::cuda::make_local_attention(mask_of("causal", 64), two, DType::f32, Device::cuda(0));
    ADD_FAILURE() << "a layout of 2 ranks was accepted";
  } catch (const longseq::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("world 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("2 ranks"), std::string::npos) << e.what();
  }
  auto kernels = lm::cuda::make_kernels(Device::cuda(0));
  try {
    kernels->lm_head(false, nullptr, nullptr, nullptr, {1, 1, 1}, 1.0, nullptr, nullptr, {});
    ADD_FAILURE() << "the unfused LM head was accepted";
  } catch (const longseq::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lm::cuda::make_kernels(Device::cpu()), longseq::core::Error);
}

}  // namespace
