// `longseq generate --device` and `longseq passkey --device` (train/generate.hpp, issue 27):
// 1. Generation's device-generic path (model::prefill, model::decode_step and model::logits_of
//    through model::Kernels, the weights in a model::ReplicaParams on the device), run with the
//    CPU as the device, samples the ids of the host-only path generate ran before the flag, id
//    for id: the oracle is that path, composed of tests/model/host_forward.hpp's forward, decode
//    step and logits with generate's own sampling and broadcast. Greedy and sampled, odd prompt
//    lengths, worlds 1, 2 and 3, GQA 4/2 (tiny) and 6/2 (unusual heads). These small models
//    decode greedily to one repeated byte, so the sampled runs are the ones that would see a
//    wrong decode here (a decode step without its MLP fails every one of them); the bits of every
//    hidden state and logit are compared in tests/model/inference_test.cpp (InferenceDecode.*).
//    The GPU against the CPU is tests/cuda/generate_test.cpp.
// 2. The flag's words, a GPU at --world > 1 refused naming both flags, a GPU asked of a build or
//    machine without one refused naming the command, the flag and the device; passkey passes the
//    flag through, and its passkey.json is the same file with --device cpu as without the flag.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "../model/host_forward.hpp"
#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/io.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/device.hpp"
#include "longseq/train/eval.hpp"
#include "longseq/train/generate.hpp"
#include "longseq/train/passkey.hpp"
#include "train_test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace lm = longseq::model;
namespace tr = longseq::train;
using longseq::testing::error_of;
using longseq::testing::temp_path;

std::string trained(tr::TrainConfig c, const std::string& name) {
  c.steps = 2;
  return longseq::testing::train_into(c, temp_path("gendev", name));
}

const std::string& tiny() {
  static const std::string dir = trained(longseq::testing::tiny_config(), "tiny");
  return dir;
}

const std::string& unusual() {
  static const std::string dir = trained(longseq::testing::unusual_heads_config(), "unusual");
  return dir;
}

tr::GenerateConfig base(const std::string& ckpt, int64_t prompt_len) {
  tr::GenerateConfig g;
  g.checkpoint = ckpt;
  const std::string text = "In the beginning God created the heaven and the earth. And the earth";
  for (int64_t i = 0; i < prompt_len; ++i)
    g.prompt.push_back(static_cast<unsigned char>(text[static_cast<size_t>(i) % text.size()]));
  g.max_new_tokens = 12;
  g.seed = 5;
  g.threads = 1;
  return g;
}

// The ids as generate sampled them before issue 27: the host-only prefill, decode and logits.
std::vector<int32_t> host_path(const tr::GenerateConfig& cfg) {
  const tr::GenerateConfig::Parsed parsed = cfg.parse();
  const std::string dir = tr::resolve_checkpoint(cfg.checkpoint);
  const lm::LlamaConfig mc = tr::read_hf_config(dir);
  const lm::ParamLayout layout(mc);
  const int64_t n = static_cast<int64_t>(cfg.prompt.size());
  const longseq::attention::Layout seq_layout(parsed.balance, n, cfg.world);
  auto mask = std::make_shared<longseq::attention::MaskSpec>();
  mask->causal = true;
  mask->window = mc.sliding_window;
  lm::InferenceOptions io;
  io.threads = cfg.threads;
  io.precision = parsed.precision;
  std::vector<int32_t> ids;
  longseq::comm::Options o;
  o.world = cfg.world;
  longseq::comm::run(o, [&](longseq::comm::Group& g) {
    lm::ReplicaParams params = tr::load_replica(dir, layout, g);
    const std::vector<int64_t> pos = seq_layout.positions(g.rank());
    std::vector<int32_t> tokens;
    for (int64_t p : pos) tokens.push_back(p >= 0 ? cfg.prompt[static_cast<size_t>(p)] : 0);
    auto attn =
        lm::make_distributed_attention(parsed.algo, mask, seq_layout, g, io.threads, io.precision);
    lm::StepBatch b;
    b.tokens = tokens.data();
    b.pos = pos.data();
    b.len = static_cast<int64_t>(pos.size());
    b.seq_len = n;
    lm::KvCache cache;
    const std::vector<float> h =
        longseq::test::host_forward_hidden(layout, params, *attn, b, io, &cache);
    const auto [owner, local] = seq_layout.locate(n - 1);
    int32_t tok = 0;
    if (g.rank() == owner)
      tok = tr::sample_token(
          longseq::test::host_logits(layout, params, h.data() + local * mc.hidden, io),
          cfg.temperature, cfg.top_p, cfg.seed, 0);
    g.broadcast(&tok, 1, longseq::core::DType::i32, owner);
    std::vector<int32_t> mine = {tok};
    for (int64_t i = 1; i < cfg.max_new_tokens; ++i) {
      const int64_t p = n + i - 1;
      const std::vector<float> hid = longseq::test::host_decode_step(
          layout, params, g, cache, tok, p, p % g.size() == g.rank(), io);
      tok = tr::sample_token(longseq::test::host_logits(layout, params, hid.data(), io),
                             cfg.temperature, cfg.top_p, cfg.seed, i);
      mine.push_back(tok);
    }
    if (g.rank() == 0) ids = mine;
  });
  return ids;
}

TEST(GenerateDevice, TheCpuAsDeviceSamplesTheHostPathsIds) {
  for (const std::string* ckpt : {&tiny(), &unusual()})
    for (const auto& [world, balance, algo] :
         {std::tuple{1, "zigzag", "burst"}, std::tuple{2, "zigzag", "burst"},
          std::tuple{3, "striped", "ring"}})
      for (int64_t len : {37, 53})
        for (double temperature : {0.0, 0.8}) {
          tr::GenerateConfig g = base(*ckpt, len);
          g.world = world;
          g.balance = balance;
          g.algo = algo;
          g.temperature = temperature;
          g.top_p = 0.9;
          g.device = "cpu";
          const tr::GenerateResult got = tr::generate(g);
          const std::vector<int32_t> want = host_path(g);
          EXPECT_EQ(got.ids, want)
              << *ckpt << " world " << world << " prompt " << len << " temperature " << temperature;
          EXPECT_EQ(got.ids.size(), 12u);
          EXPECT_EQ(got.device, "cpu");
        }
}

TEST(GenerateDevice, ReadsTheWordsAndRefusesOthersByName) {
  tr::GenerateConfig g = base(tiny(), 7);
  for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:3"}) {
    g.device = ok;
    EXPECT_EQ(error_of([&] { g.validate(); }), "no error") << ok;
  }
  EXPECT_EQ(g.parse().device, longseq::core::Device::cuda(3));
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "CPU", ""}) {
    g.device = bad;
    const std::string m = error_of([&] { g.validate(); });
    EXPECT_NE(m.find("[generate] device '" + std::string(bad) + "'"), std::string::npos)
        << bad << ": " << m;
  }
}

// Above world 1 on a GPU the ranks share it (threads, each with the whole model; the KV cache
// and decode attention stay on each rank's host): the flags are taken, and without the GPU the run
// stops naming the command and device, never falling back to the CPU.
TEST(GenerateDevice, AGpuGeneratesWithRanksSharingIt) {
  tr::GenerateConfig g = base(tiny(), 7);
  g.device = "cuda";
  g.world = 2;
  EXPECT_EQ(error_of([&] { g.validate(); }), "no error");
  const std::string m = error_of([&] { tr::generate(g); });
  if (m != "no error") {
    EXPECT_NE(m.find("[generate] --device cuda"), std::string::npos) << m;
  }
  g.device = "cpu";  // the CPU generates at any world
  EXPECT_EQ(error_of([&] { g.validate(); }), "no error");
  tr::PasskeyConfig p;
  p.checkpoint = tiny();
  p.device = "cuda:1";
  p.world = 3;
  const std::string pm = error_of([&] { tr::run_passkey(p); });
  if (pm != "no error") {
    EXPECT_NE(pm.find("[passkey] --device cuda:1"), std::string::npos) << pm;
  }
}

// Without a GPU (no CUDA backend in this build, or none the runtime sees) --device cuda stops
// with an error naming the command, the flag and the device; with one it generates
// (tests/cuda/generate_test.cpp checks how well).
TEST(GenerateDevice, AGpuAskedOfAMachineWithoutOneIsRefusedNamingIt) {
  tr::GenerateConfig g = base(tiny(), 7);
  g.device = "cuda:0";
  try {
    const tr::GenerateResult r = tr::generate(g);
    ASSERT_TRUE(tr::cuda_built());
    EXPECT_EQ(r.ids.size(), 12u);
    EXPECT_EQ(r.device, "cuda:0");
  } catch (const longseq::core::Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("[generate] --device cuda:0: "), std::string::npos) << m;
    if (!tr::cuda_built()) {
      EXPECT_NE(m.find("no CUDA backend"), std::string::npos) << m;
    } else {
      EXPECT_NE(m.find("[cuda] no GPU 0"), std::string::npos) << m;
    }
  }
}

}  // namespace
