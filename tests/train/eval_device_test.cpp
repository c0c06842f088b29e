// `longseq eval --device` (train/eval.hpp, issue 27 "GPU III"):
// 1. The evaluation's device-generic path (model::forward_hidden and model::token_losses through
//    model::Kernels, the weights in a model::ReplicaParams on the device), run with the CPU as
//    the device, gives the numbers of the host-only path eval ran before it bit for bit: the
//    oracle here is that path, composed of tests/model/host_forward.hpp's forward and losses and
//    eval's own sums (per position over the sequences in order, then over positions), compared
//    with == on eval.json's loss, perplexity and every bucket. fp32 and bf16, causal and window.
//    (The GPU against the CPU is tests/cuda/eval_test.cpp.)
// 2. The flag's words (cpu, cuda, cuda:N; anything else refused naming it), a GPU at --world > 1
//    refused naming both flags before anything is read, a GPU asked of a build or machine
//    without one refused naming the command, the flag and the device: never a crash or a silent
//    CPU evaluation. Through evaluate() and through the CLI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../model/host_forward.hpp"
#include "longseq/attention/layout.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/io.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/data.hpp"
#include "longseq/train/device.hpp"
#include "longseq/train/eval.hpp"
#include "train_test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace lm = longseq::model;
namespace tr = longseq::train;
using longseq::testing::error_of;
using longseq::testing::temp_path;

const std::string& checkpoint() {
  static const std::string dir = [] {
    tr::TrainConfig c = longseq::testing::tiny_config();
    c.steps = 2;
    return longseq::testing::train_into(c, temp_path("evaldev", "ckpt"));
  }();
  return dir;
}

tr::EvalConfig base(int64_t seq) {
  tr::EvalConfig e;
  e.checkpoint = checkpoint();
  e.data = std::string(LONGSEQ_SOURCE_DIR) + "/data/kjv-genesis-exodus.txt";
  e.seq = seq;
  e.sequences = 3;
  e.buckets = 5;
  e.threads = 1;
  return e;
}

// Eval's numbers at world 1 the way eval computed them before issue 27: the host-only forward
// and losses, summed per position over the sequences in order, then over the positions.
tr::EvalResult host_path(const tr::EvalConfig& e) {
  const tr::EvalConfig::Parsed parsed = e.parse();
  const std::string dir = tr::resolve_checkpoint(e.checkpoint);
  const lm::ParamLayout layout(tr::read_hf_config(dir));
  const tr::TokenFile data = tr::load_training_data(e.data);
  const tr::Loader loader(data, e.seq);
  const longseq::attention::Layout seq_layout(parsed.balance, e.seq, 1);
  lm::InferenceOptions io;
  io.threads = e.threads;
  io.precision = parsed.precision;
  std::vector<double> sum(static_cast<size_t>(e.seq), 0.0), cnt(sum);
  longseq::comm::Options o;
  o.world = 1;
  longseq::comm::run(o, [&](longseq::comm::Group& g) {
    lm::ReplicaParams params = tr::load_replica(dir, layout, g);
    auto attn = lm::make_distributed_attention(parsed.algo, parsed.mask.with_documents({}),
                                               seq_layout, g, io.threads, io.precision);
    for (int64_t q = 0; q < e.sequences; ++q) {
      const tr::RankTokens rt = loader.rank_tokens(q, seq_layout, 0, lm::kIgnoreIndex);
      lm::StepBatch b;
      b.tokens = rt.tokens.data();
      b.pos = rt.pos.data();
      b.len = static_cast<int64_t>(rt.pos.size());
      b.seq_len = e.seq;
      const std::vector<float> h = longseq::test::host_forward_hidden(layout, params, *attn, b, io);
      const std::vector<double> loss =
          longseq::test::host_token_losses(layout, params, h.data(), rt.labels.data(), b.len, io);
      for (int64_t i = 0; i < b.len; ++i)
        if (rt.pos[i] >= 0 && rt.labels[i] != lm::kIgnoreIndex) {
          sum[rt.pos[i]] += loss[i];
          cnt[rt.pos[i]] += 1;
        }
    }
  });
  tr::EvalResult r;
  double total = 0, count = 0;
  for (int64_t p = 0; p < e.seq; ++p) total += sum[p], count += cnt[p];
  r.tokens = static_cast<int64_t>(count);
  r.loss = total / count;
  r.perplexity = std::exp(r.loss);
  const int64_t k = std::min(e.buckets, e.seq - 1);
  for (int64_t i = 0; i < k; ++i) {
    tr::EvalBucket bk;
    bk.start = i * e.seq / k;
    bk.end = (i + 1) * e.seq / k;
    double bs = 0, bc = 0;
    for (int64_t p = bk.start; p < bk.end; ++p) bs += sum[p], bc += cnt[p];
    bk.tokens = static_cast<int64_t>(bc);
    bk.loss = bs / bc;
    r.positions.push_back(bk);
  }
  return r;
}

TEST(EvalDevice, TheCpuAsDeviceGivesTheHostPathsNumbersBitForBit) {
  for (const char* precision : {"fp32", "bf16"})
    for (const char* mask : {"causal", "window:9"}) {
      tr::EvalConfig e = base(61);
      e.precision = precision;
      e.mask = mask;
      e.device = "cpu";
      e.out = temp_path("evaldev", "bits");
      fs::remove_all(e.out);
      const tr::EvalResult got = tr::evaluate(e);
      const tr::EvalResult want = host_path(e);
      const std::string what = std::string(precision) + " " + mask;
      EXPECT_EQ(got.tokens, 3 * 60) << what;
      EXPECT_EQ(got.tokens, want.tokens) << what;
      EXPECT_EQ(got.loss, want.loss) << what;  // == on purpose: bit for bit
      EXPECT_EQ(got.perplexity, want.perplexity) << what;
      ASSERT_EQ(got.positions.size(), want.positions.size()) << what;
      for (size_t i = 0; i < want.positions.size(); ++i) {
        EXPECT_EQ(got.positions[i].start, want.positions[i].start) << what;
        EXPECT_EQ(got.positions[i].tokens, want.positions[i].tokens) << what;
        EXPECT_EQ(got.positions[i].loss, want.positions[i].loss) << what << " bucket " << i;
      }
      // eval.json holds those numbers (its doubles round-trip), and eval_run.json the device
      const nlohmann::json j =
          nlohmann::json::parse(longseq::core::read_file(e.out + "/eval.json"));
      EXPECT_EQ(j["loss"].get<double>(), want.loss) << what;
      EXPECT_EQ(j["positions"][2]["loss"].get<double>(), want.positions[2].loss) << what;
      const nlohmann::json run =
          nlohmann::json::parse(longseq::core::read_file(e.out + "/eval_run.json"));
      EXPECT_EQ(run["config"]["device"], "cpu");
      fs::remove_all(e.out);
    }
}

TEST(EvalDevice, ReadsTheWordsAndRefusesOthersByName) {
  tr::EvalConfig e = base(64);
  for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:3"}) {
    e.device = ok;
    EXPECT_EQ(error_of([&] { e.validate(); }), "no error") << ok;
  }
  EXPECT_EQ(e.parse().device, longseq::core::Device::cuda(3));
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "CPU", ""}) {
    e.device = bad;
    const std::string m = error_of([&] { e.validate(); });
    EXPECT_NE(m.find("[eval] device '" + std::string(bad) + "'"), std::string::npos)
        << bad << ": " << m;
  }
}

// Above world 1 on a GPU the ranks share it (threads, each with the whole model): the flags are
// taken (an mpirun job is refused: train.cli_device_mpirun_refused covers the shared check), and
// without a GPU the run stops naming the device, never on the CPU.
TEST(EvalDevice, AGpuEvaluatesWithRanksSharingIt) {
  tr::EvalConfig e = base(64);
  e.device = "cuda";
  e.world = 2;
  EXPECT_EQ(error_of([&] { e.validate(); }), "no error");
  const std::string m = error_of([&] { tr::evaluate(e); });
  if (m != "no error") {
    EXPECT_NE(m.find("[eval] --device cuda"), std::string::npos) << m;
  }
  e.device = "cpu";  // the CPU evaluates at any world
  EXPECT_EQ(error_of([&] { e.validate(); }), "no error");
}

// Without a GPU (no CUDA backend in this build, or none the runtime sees) --device cuda stops
// with an error naming the command, the flag and the device; with one it evaluates
// (tests/cuda/eval_test.cpp checks how well).
TEST(EvalDevice, AGpuAskedOfAMachineWithoutOneIsRefusedNamingIt) {
  tr::EvalConfig e = base(64);
  e.device = "cuda:0";
  try {
    const tr::EvalResult r = tr::evaluate(e);
    ASSERT_TRUE(tr::cuda_built());
    EXPECT_TRUE(std::isfinite(r.loss));
  } catch (const longseq::core::Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("[eval] --device cuda:0: "), std::string::npos) << m;
    if (!tr::cuda_built()) {
      EXPECT_NE(m.find("no CUDA backend"), std::string::npos) << m;
    } else {
      EXPECT_NE(m.find("[cuda] no GPU 0"), std::string::npos) << m;
    }
  }
}

TEST(EvalDevice, TheCliTakesTheFlagAndRefusesByName) {
  const std::string out = temp_path("evaldev", "cli");
  fs::remove_all(out);
  const std::string cmd = std::string(LONGSEQ_CLI) + " eval --checkpoint-dir " + checkpoint() +
                          " --data " + LONGSEQ_SOURCE_DIR +
                          "/data/kjv-genesis-exodus.txt --seq 45 --sequences 1 --buckets 3 "
                          "--threads 1 --out " +
                          out;
  std::string log;
  ASSERT_EQ(longseq::testing::run(cmd + " --device cpu", log), 0) << log;
  const nlohmann::json run =
      nlohmann::json::parse(longseq::core::read_file(out + "/eval_run.json"));
  EXPECT_EQ(run["config"]["device"], "cpu");
  EXPECT_EQ(longseq::testing::run(cmd + " --device gpu", log), 1) << log;
  EXPECT_NE(log.find("[eval] device 'gpu': expected cpu, cuda or cuda:N"), std::string::npos)
      << log;
  if (longseq::testing::run(cmd + " --device cuda:1 --world 3", log) != 0) {  // no GPU 1 here
    EXPECT_NE(log.find("[eval] --device cuda:1"), std::string::npos) << log;
  }
  const int rc = longseq::testing::run(cmd + " --device cuda", log);
  if (rc != 0) {  // no GPU here: refused by name, not evaluated on the CPU
    EXPECT_EQ(rc, 1) << log;
    EXPECT_NE(log.find("[eval] --device cuda:0: "), std::string::npos) << log;
  } else {
    EXPECT_TRUE(tr::cuda_built()) << log;
  }
  std::string help;
  ASSERT_EQ(longseq::testing::run(std::string(LONGSEQ_CLI) + " eval --help", help), 0) << help;
  EXPECT_NE(help.find("--device"), std::string::npos) << help;
  fs::remove_all(out);
}

}  // namespace
