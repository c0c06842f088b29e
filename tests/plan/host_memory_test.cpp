// plan::host_trainer_memory, the peak RSS model of `longseq train` on this host (plan/memory.hpp).
// Its agreement with measurement is a documented command (scripts/memory_check.sh, numbers in
// docs/results/memory_check.json), not a CTest (timings and RSS of a loaded machine); here the
// structure: policies in the order of what they keep, window masks skip empty chunk pairs (fewer
// schedule slots than causal on the same layout), activations linear in N, bad input refused.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "longseq/core/error.hpp"
#include "longseq/plan/memory.hpp"

namespace {

namespace plan = longseq::plan;
namespace at = longseq::attention;
using Policy = longseq::model::CheckpointPolicy;

plan::HostTrainerInputs main_job() {
  plan::HostTrainerInputs in;
  in.model.layers = 4;
  in.model.hidden = 256;
  in.model.heads = 4;
  in.model.kv_heads = 4;
  in.model.head_dim = 64;
  in.model.intermediate = 688;
  in.model.vocab = 257;
  in.seq = 32768;
  in.world = 4;
  in.data_tokens = 380227;
  return in;
}

double peak(plan::HostTrainerInputs in, Policy c) {
  in.checkpoint = c;
  return plan::host_trainer_memory(in).total();
}

TEST(HostTrainerMemory, PoliciesInTheOrderOfWhatTheyKeep) {
  const plan::HostTrainerInputs in = main_job();
  const double none = peak(in, Policy::none), full = peak(in, Policy::full),
               spp = peak(in, Policy::selective_pp), seq = peak(in, Policy::seq_selective);
  EXPECT_GT(none, spp);
  EXPECT_GT(spp, seq);
  EXPECT_GT(seq, full);
  // selective++ keeps o and lse of every layer: 4 layers x 4 ranks x [8192, 4, 64] + [8192, 4]
  // fp32.
  EXPECT_NEAR(spp - full, 4 * 4 * (8192.0 * 256 * 4 + 8192.0 * 4 * 4), 1e5);
  // seq-selective at f = 0.5 keeps half of it.
  EXPECT_NEAR(seq - full, (spp - full) / 2, 1e5);
}

TEST(HostTrainerMemory, WindowMasksSkipEmptyChunkPairs) {
  plan::HostTrainerInputs in = main_job();
  in.balance = "contiguous";
  in.seq = 65536;
  const double causal = peak(in, Policy::full);
  auto w = std::make_shared<at::MaskSpec>();
  w->causal = true;
  w->window = 512;  // rank r needs rank r - 1 only
  in.mask = w;
  const plan::HostTrainerMemory m = [&] {
    plan::HostTrainerInputs x = in;
    x.checkpoint = Policy::full;
    return plan::host_trainer_memory(x);
  }();
  EXPECT_LT(m.total(), causal);
  bool named = false;
  for (const auto& [name, bytes] : m.items) named |= name.find("slots") != std::string::npos;
  EXPECT_TRUE(named);
}

TEST(HostTrainerMemory, ActivationsGrowLinearlyInN) {
  plan::HostTrainerInputs in = main_job();
  in.checkpoint = Policy::full;
  auto at_n = [&](int64_t n) {
    in.seq = n;
    in.data_tokens = n;
    return plan::host_trainer_memory(in).total();
  };
  const double a = at_n(32768), b = at_n(65536), c = at_n(131072);
  EXPECT_GT(b, a);
  EXPECT_NEAR((c - b) / (b - a), 2.0, 0.05);
}

TEST(HostTrainerMemory, RefusesBadInputNamingIt) {
  plan::HostTrainerInputs in = main_job();
  in.dp = 3;
  try {
    plan::host_trainer_memory(in);
    FAIL() << "no error";
  } catch (const longseq::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dp 3 must divide --world 4"), std::string::npos)
        << e.what();
  }
  in = main_job();
  in.algo = "bogus";
  EXPECT_THROW(plan::host_trainer_memory(in), longseq::core::Error);
}

}  // namespace
