// The planner's GPU memory model (plan/memory.hpp device_trainer_memory) on a real GPU, and
// `longseq calibrate --device cuda` (plan/calibrate.hpp calibrate_gpu).
//
// 1. The CUDA kernels' scratch sizes restated in plan/memory.cpp equal kernels/cuda's own
//    (lm_head_workspace_bytes, lm_head_token_tile, attention_workspace_bytes), over odd sizes, both
//    precisions and explicit tiles. Host functions: runs without a GPU in a CUDA build.
// 2. `train --device cuda` at odd sizes (odd L, unusual head counts, every checkpoint policy, fp32
//    and bf16): the predicted peak within 10% of what the trainer measured (device_peak_mib:
//    kernels::cuda::memory_stats, less what the process held before the run).
// 3. calibrate_gpu writes a single-GPU profile that parse_hardware reads back, with the GPU's
//    memory and GEMM rates, and plan --train takes it.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "../train/train_test_util.hpp"
#include "cuda_test_util.hpp"
#include "longseq/kernels/cuda/attention.hpp"
#include "longseq/kernels/cuda/device.hpp"
#include "longseq/kernels/cuda/lm_head.hpp"
#include "longseq/plan/calibrate.hpp"
#include "longseq/plan/hardware.hpp"
#include "longseq/plan/host_plan.hpp"
#include "longseq/plan/memory.hpp"
#include "longseq/train/trainer.hpp"

namespace {

namespace pl = longseq::plan;
namespace tr = longseq::train;
namespace kcu = longseq::kernels::cuda;

TEST(CudaPlanMemory, ScratchFormulasMatchTheKernels) {
  for (int64_t t : {1, 63, 64, 65, 1001, 32768})
    for (int64_t v : {257, 50000, 128256})
      for (int64_t tile : {0, 16, 100})
        for (bool bf16 : {false, true}) {
          kcu::LmHeadOptions o;
          o.token_tile = tile;
          o.compute = bf16 ? longseq::core::DType::bf16 : longseq::core::DType::f32;
          const kcu::LmHeadDims d{t, 48, v};
          EXPECT_EQ(pl::cuda_lm_head_token_tile(t, v, tile, bf16), kcu::lm_head_token_tile(d, o))
              << t << " " << v << " " << tile << " " << bf16;
          EXPECT_EQ(pl::cuda_lm_head_workspace_bytes(t, 48, v, tile, bf16),
                    static_cast<double>(kcu::lm_head_workspace_bytes(d, o)))
              << t << " " << v << " " << tile << " " << bf16;
        }
  for (int64_t tq : {0, 1, 64, 65, 1001})
    for (int64_t tk : {1, 127, 4096})
      EXPECT_EQ(pl::cuda_attention_workspace_bytes(tq, tk),
                static_cast<double>(kcu::attention_workspace_bytes({tq, tk, 4, 2, 64})))
          << tq << " " << tk;
}

TEST(CudaPlanMemory, PredictionHoldsTheMeasuredPeak) {
  LONGSEQ_NEED_GPU();
  kcu::activate(0);
  struct Case {
    const char* name;
    tr::TrainConfig c;
  };
  std::vector<Case> cases;
  tr::TrainConfig a = longseq::testing::tiny_config();
  a.world = 1;
  a.seq = 1001;
  a.ffn_chunk = 96;
  cases.push_back({"tiny gqa L=1001 fp32", a});
  a.precision = "bf16";
  cases.push_back({"tiny gqa L=1001 bf16", a});
  tr::TrainConfig b = longseq::testing::unusual_heads_config();
  b.world = 1;
  b.seq = 777;
  b.ffn_chunk = 0;
  b.model.tied_embeddings = false;
  b.precision = "bf16";
  cases.push_back({"6/2 heads untied L=777 bf16", b});
  for (Case& k : cases)
    for (const char* policy : {"none", "full", "selective++", "seq-selective"}) {
      tr::TrainConfig c = k.c;
      c.checkpoint = policy;
      c.steps = 2;
      c.device = "cuda";
      const double before = static_cast<double>(kcu::memory_stats(0).current);
      const tr::TrainSummary s = tr::train(c);
      ASSERT_FALSE(s.steps.empty());
      const double measured = s.steps.back().device_peak_mib * 1024 * 1024 - before;
      const pl::DeviceTrainerMemory p =
          pl::device_trainer_memory(pl::device_inputs(c, c.mask_text(), true));
      std::printf("[cuda plan memory] %-28s %-14s predicted %10.0f B measured %10.0f B (%.4f)\n",
                  k.name, policy, p.peak, measured, p.peak / measured);
      EXPECT_NEAR(p.peak / measured, 1.0, 0.10) << k.name << ", " << policy;
    }
}

TEST(CudaPlanMemory, CalibrateWritesAProfilePlanReads) {
  LONGSEQ_NEED_GPU();
  const longseq::core::Device gpu = longseq::core::Device::cuda(0);
  const pl::Hardware hw = pl::calibrate_gpu(gpu, "test-gpu");
  const std::string text = pl::gpu_calibration_json(hw, gpu);
  const pl::Hardware back = pl::parse_hardware(text, "test-gpu.json");
  EXPECT_TRUE(back.single_gpu());
  EXPECT_EQ(back.gpu.name, kcu::runtime_info().gpus.at(0).name);
  EXPECT_DOUBLE_EQ(back.memory_bytes,
                   static_cast<double>(kcu::runtime_info().gpus.at(0).total_bytes));
  EXPECT_GT(back.gpu.gemm_bf16_flops, 1e12);
  EXPECT_GT(back.gpu.gemm_f32_flops, 1e11);
  EXPECT_GT(back.gpu.memory_bandwidth_Bps, 1e11);
  EXPECT_DOUBLE_EQ(back.peak_flops, back.gpu.gemm_bf16_flops);

  const std::string path = testing::TempDir() + "test-gpu.json";
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  pl::HostPlanRequest r;
  r.preset = "tiny";
  r.data_tokens = 10000;
  r.hardware = path;
  const pl::HostPlan plan = pl::host_plan(r);
  ASSERT_TRUE(plan.device.has_value());
  EXPECT_DOUBLE_EQ(plan.device->limit_bytes, back.memory_bytes);
  EXPECT_GT(plan.device->step_seconds_bound(), 0);
  std::remove(path.c_str());
}

}  // namespace
