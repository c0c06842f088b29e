// The planner's GPU memory model (plan/memory.hpp device_trainer_memory) against the bytes the
// device path holds, counted without a GPU.
//
// `train --device cuda` runs model/transformer.cpp's forward_backward with its tensors, the
// DeviceReplica and the DeviceOptimizer on the GPU. The same path runs with the CPU as its device
// (train/run.hpp attach_device_state with core::Device::cpu()), where every tensor it makes on the
// device is counted by core::cpu_device_memory_stats, as kernels::cuda::memory_stats counts them
// on a GPU. The model's kernels = cpu prediction leaves out what only the CUDA kernels put on the
// device (LocalAttention's tensors, the fused LM head's scratch, the batch's copies): those are
// compared on a GPU in tests/cuda/plan_memory_test.cpp.
//
// 1. A few steps at odd sizes (odd L, unusual head counts, blockwise FFN chunks that do not
//    divide L), every checkpoint policy: the predicted peak within 10% of the counted peak (the
//    issue's bound), the state exactly, and the step's part (peak less the state) within 1%, so
//    a missing activation term cannot hide behind the parameters and moments. (Dropping the
//    backward's MLP workspace from the model fails it: 0.84 of the step's part at L = 777.)
// 2. The prediction orders the policies as the memory does on a GPU: none > selective++ >
//    seq-selective > full for the same run of 6 layers, and the state is 17 bytes per (aligned)
//    parameter.
// 3. Single-GPU hardware profiles: read without links, refused by the cluster planner, and a
//    profile without links that is not a GPU's is refused naming the missing field; plan --train
//    with one predicts the GPU run with the profile's memory as its limit.
// 4. `calibrate --device cuda` refuses by name in a build without CUDA or where no GPU is seen.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "../train/train_test_util.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/plan/calibrate.hpp"
#include "longseq/plan/hardware.hpp"
#include "longseq/plan/host_plan.hpp"
#include "longseq/plan/memory.hpp"
#include "longseq/plan/planner.hpp"
#include "longseq/train/device.hpp"
#include "longseq/train/run.hpp"

namespace {

namespace core = longseq::core;
namespace pl = longseq::plan;
namespace trn = longseq::train;

struct Counted {
  double state = 0;  // held after attach_device_state
  double peak = 0;   // the most held during the steps (state included)
};

// `steps` steps of `c` on the device path with the CPU as the device; the bytes it held there.
Counted count_device_path(const trn::TrainConfig& c, int steps, bool offload = false) {
  trn::RunSetup setup(c);
  // --offload is refused with the CPU as the device (nothing to gain there), so the test turns
  // the model's option on behind the flag's back: the path is the GPU's, the copies the CPU's.
  setup.options.offload = offload;
  const size_t before = core::cpu_device_memory_stats().current;
  core::reset_cpu_device_memory_peak();
  Counted out;
  longseq::comm::Options o;
  o.world = 1;
  longseq::comm::run(o, [&](longseq::comm::Group& g) {
    trn::RankRun run(setup, g);
    trn::attach_device_state(run, core::Device::cpu());
    out.state = static_cast<double>(core::cpu_device_memory_stats().current - before);
    trn::restore(run);
    for (int64_t step = 0; step < steps; ++step) trn::run_step(run, step);
  });
  out.peak = static_cast<double>(core::cpu_device_memory_stats().peak - before);
  return out;
}

struct Case {
  const char* name;
  trn::TrainConfig config;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  trn::TrainConfig a = longseq::testing::tiny_config();  // GQA 4/2, tied
  a.world = 1;
  a.seq = 1001;
  a.ffn_chunk = 96;  // does not divide L
  out.push_back({"tiny gqa tied L=1001", a});
  trn::TrainConfig b = longseq::testing::unusual_heads_config();  // 6 heads of 4 over 2 kv heads
  b.world = 1;
  b.seq = 777;
  b.ffn_chunk = 0;  // the MLP over all tokens at once
  b.model.tied_embeddings = false;
  out.push_back({"6/2 heads untied L=777", b});
  trn::TrainConfig d = longseq::testing::tiny_config();
  d.world = 1;
  d.seq = 513;
  d.model.heads = 5;
  d.model.kv_heads = 5;
  d.model.head_dim = 6;
  d.model.hidden = 30;
  d.model.layers = 3;
  d.seq_selective_fraction = 0.3;
  d.precision = "bf16";
  out.push_back({"5 heads MHA 3 layers bf16 f=0.3 L=513", d});
  return out;
}

TEST(DeviceMemory, PredictionHoldsTheCountedPeakOnTheCpu) {
  for (const Case& k : cases())
    for (const char* policy : {"none", "full", "selective++", "seq-selective"}) {
      trn::TrainConfig c = k.config;
      c.checkpoint = policy;
      const Counted counted = count_device_path(c, 2);
      const pl::DeviceTrainerMemory p =
          pl::device_trainer_memory(pl::device_inputs(c, c.mask_text(), false));
      const std::string what = std::string(k.name) + ", " + policy;
      std::printf(
          "[device memory] %-40s %-14s predicted %10.0f B counted %10.0f B (%.4f); "
          "step part %10.0f / %10.0f B; peak at %s\n",
          k.name, policy, p.peak, counted.peak, p.peak / counted.peak, p.peak - p.state,
          counted.peak - counted.state, p.phase.c_str());
      EXPECT_DOUBLE_EQ(p.state, counted.state) << what;
      EXPECT_NEAR(p.peak / counted.peak, 1.0, 0.10) << what;
      // The bound, and the replay's own: it follows the allocations one by one, so on the
      // CPU it is exact (the figures in docs/planner.md); 1% of the step's part leaves no room for
      // a missing tensor of the block.
      EXPECT_NEAR((p.peak - p.state) / (counted.peak - counted.state), 1.0, 0.01) << what;
      double sum = 0;
      for (const auto& [name, bytes] : p.items) sum += bytes;
      EXPECT_DOUBLE_EQ(sum, p.peak) << what << ": the breakdown sums to the peak";
    }
}

// The same with activation offload (DeviceTrainerInputs::offload): the block inputs but the
// last leave the device after their forward and come back for their backward, so the peak falls
// by up to (layers - 1) inputs; the replay follows the CPU's park / take exactly.
TEST(DeviceMemory, OffloadPredictionHoldsTheCountedPeakOnTheCpu) {
  for (const Case& k : cases())
    for (const char* policy : {"none", "full", "selective++", "seq-selective"}) {
      trn::TrainConfig c = k.config;
      c.checkpoint = policy;
      const Counted kept = count_device_path(c, 2);
      const Counted counted = count_device_path(c, 2, true);
      pl::DeviceTrainerInputs in = pl::device_inputs(c, c.mask_text(), false);
      in.offload = true;
      const pl::DeviceTrainerMemory p = pl::device_trainer_memory(in);
      const std::string what = std::string(k.name) + ", " + policy + ", offload";
      std::printf(
          "[device memory] %-40s %-14s offload: predicted %10.0f B counted %10.0f B "
          "(without: %10.0f B); peak at %s\n",
          k.name, policy, p.peak, counted.peak, kept.peak, p.phase.c_str());
      EXPECT_NEAR((p.peak - p.state) / (counted.peak - counted.state), 1.0, 0.01) << what;
      EXPECT_LE(counted.peak, kept.peak) << what;
    }
  // Enough layers that the parked inputs matter: the full policy at 6 layers keeps 1 input of 6.
  trn::TrainConfig c = longseq::testing::tiny_config();
  c.world = 1;
  c.seq = 999;
  c.model.layers = 6;
  c.checkpoint = "full";
  const Counted kept = count_device_path(c, 1), parked = count_device_path(c, 1, true);
  const double input = 4.0 * 999 * c.model.hidden;  // one block input, fp32
  EXPECT_LT(parked.peak, kept.peak - 3 * input) << "offload saved too little";
}

TEST(DeviceMemory, PoliciesOrderAndStateBytes) {
  trn::TrainConfig c = longseq::testing::tiny_config();
  c.world = 1;
  c.seq = 4096;
  c.model.layers = 6;  // with 2, seq-selective's recomputed o/lse equal selective++'s saved ones
  auto peak = [&](const char* policy, bool cuda) {
    c.checkpoint = policy;
    return pl::device_trainer_memory(pl::device_inputs(c, c.mask_text(), cuda));
  };
  EXPECT_GT(peak("none", true).peak, peak("selective++", true).peak);
  EXPECT_GT(peak("selective++", true).peak, peak("seq-selective", true).peak);
  EXPECT_GT(peak("seq-selective", true).peak, peak("full", true).peak);
  // The CUDA kernels add the attention's tensors, the LM head's scratch and the batch.
  EXPECT_GT(peak("full", true).peak, peak("full", false).peak);
  // On the CPU the attention's outputs are host memory, so selective++ keeps nothing more on the
  // device than full; seq-selective's copies of the late rows are the model's own tensors.
  EXPECT_EQ(peak("selective++", false).peak, peak("full", false).peak);
  EXPECT_GT(peak("seq-selective", false).peak, peak("full", false).peak);
  const longseq::model::ParamLayout layout(c.model);
  double aligned = 0;
  for (const auto& u : layout.units()) aligned += static_cast<double>((u.size + 15) / 16 * 16);
  EXPECT_DOUBLE_EQ(peak("full", true).state, 17 * aligned + 8 * 4096);  // + the positions table
  EXPECT_DOUBLE_EQ(peak("full", false).state, 17 * aligned);
  // The GPU has no unfused LM head: refused by name.
  c.loss = "unfused";
  try {
    peak("full", true);
    ADD_FAILURE() << "unfused accepted on CUDA";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--loss unfused"), std::string::npos) << e.what();
  }
  EXPECT_GT(peak("full", false).peak, 0);
  // The device run is one rank's.
  c.loss = "fused";
  c.world = 2;
  EXPECT_THROW(pl::device_inputs(c, c.mask_text(), true), core::Error);
}

// The CUDA formulas restated in plan/memory.cpp, at the sizes of the runs (tests/cuda
// holds them equal to kernels/cuda's own).
TEST(DeviceMemory, LmHeadScratchAtLlamaSizes) {
  // V = 128256: 2^26 / V = 523 -> 512 rows fp32; 2^28 / V = 2093 -> 2048 rows bf16.
  EXPECT_EQ(pl::cuda_lm_head_token_tile(32768, 128256, 0, false), 512);
  EXPECT_EQ(pl::cuda_lm_head_token_tile(32768, 128256, 0, true), 2048);
  EXPECT_EQ(pl::cuda_lm_head_token_tile(100, 128256, 0, true), 100);
  const double fp32 = pl::cuda_lm_head_workspace_bytes(32768, 2048, 128256, 0, false);
  EXPECT_DOUBLE_EQ(fp32, 8.0 * 32768 + 4.0 * 32768 + 256 + 4.0 * 512 * 128256);
  EXPECT_EQ(pl::cuda_attention_workspace_bytes(65, 64), 32.0 * 3);
}

std::string write_profile(const std::string& name, const nlohmann::json& j) {
  const std::string path = ::testing::TempDir() + name + ".json";
  std::ofstream(path) << j.dump();
  return path;
}

nlohmann::json gpu_profile() {
  return {{"gpus_per_node", 1},
          {"memory_bytes", 80.0 * (1 << 30)},
          {"peak_flops", 7e14},
          {"dtype_bytes", 2},
          {"gpu",
           {{"name", "Test GPU"},
            {"gemm_bf16_flops", 7e14},
            {"gemm_f32_flops", 5e13},
            {"memory_bandwidth_Bps", 3e12}}}};
}

TEST(DeviceMemory, SingleGpuProfiles) {
  const pl::Hardware hw = pl::parse_hardware(gpu_profile().dump(), "gpu.json");
  EXPECT_TRUE(hw.single_gpu());
  EXPECT_EQ(hw.gpu.name, "Test GPU");
  EXPECT_DOUBLE_EQ(hw.gpu.gemm_f32_flops, 5e13);
  // Written and read back.
  const pl::Hardware back = pl::parse_hardware(pl::hardware_to_json(hw), "back.json");
  EXPECT_EQ(back.gpu.name, hw.gpu.name);
  EXPECT_DOUBLE_EQ(back.gpu.memory_bandwidth_Bps, 3e12);
  // Without gpu.name the links are required, as before.
  nlohmann::json no_gpu = gpu_profile();
  no_gpu.erase("gpu");
  try {
    pl::parse_hardware(no_gpu.dump(), "x.json");
    ADD_FAILURE() << "a profile without links accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("x.json: missing field 'intra.latency_s'"),
              std::string::npos)
        << e.what();
  }
  // The cluster planner refuses it; plan --train takes it.
  const std::string path = write_profile("device_memory_gpu", gpu_profile());
  pl::PlanOptions o;
  o.model = pl::load_model("llama-7b");
  o.hw = pl::load_hardware(path);
  o.seq = 1 << 20;
  o.gpus = 8;
  o.gpus_per_node = 1;
  EXPECT_THROW(o.validate(), core::Error);

  pl::HostPlanRequest r;
  r.preset = "tiny";
  r.seq = 2048;
  r.data_tokens = 10000;
  r.hardware = path;
  r.checkpoints = {"full", "none"};
  const pl::HostPlan plan = pl::host_plan(r);
  ASSERT_TRUE(plan.device.has_value());
  EXPECT_EQ(plan.device->device, "cuda:0");
  EXPECT_EQ(plan.device->gpu, "Test GPU");
  EXPECT_DOUBLE_EQ(plan.device->limit_bytes, 80.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(plan.device->gemm_flops, 5e13);  // the tiny preset trains in fp32
  ASSERT_EQ(plan.device->memory.size(), 2u);
  EXPECT_LT(plan.device->memory[0].peak, plan.device->memory[1].peak);
  EXPECT_GT(plan.device->step_seconds_bound(), 0);
  const nlohmann::json j = plan.to_json("tiny");
  EXPECT_DOUBLE_EQ(j["policies"][0]["device"]["predicted_bytes"].get<double>(),
                   plan.device->memory[0].peak);
  EXPECT_EQ(j["device"]["gpu"], "Test GPU");
  // A profile of a cluster is not a GPU run's.
  r.hardware = "a800";
  EXPECT_THROW(pl::host_plan(r), core::Error);
  std::filesystem::remove(path);
}

TEST(DeviceMemory, CalibrateGpuRefusesByName) {
  const core::Device gpu = core::Device::cuda(0);
  if (trn::cuda_built() && !trn::device_name(gpu).empty())
    GTEST_SKIP() << "a GPU is visible: tests/cuda/plan_memory_test.cpp calibrates it";
  try {
    pl::calibrate_gpu(gpu, "x");
    ADD_FAILURE() << "calibrate_gpu succeeded without a GPU";
  } catch (const core::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cuda"), std::string::npos) << msg;
    if (!trn::cuda_built()) {
      EXPECT_NE(msg.find("no CUDA backend"), std::string::npos) << msg;
    }
  }
}

}  // namespace
