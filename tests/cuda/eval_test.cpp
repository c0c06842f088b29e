// `eval --device cuda` (issue 27 "GPU III"): the evaluation on one GPU (the weights there, the
// forward through the CUDA kernels and the whole-sequence GPU attention, the logits' product on
// the GPU and each token's fp64 log-sum-exp on the host) against the same evaluation on the CPU,
// whose device-generic path tests/train/eval_device_test.cpp ties bit for bit to eval's host-only
// path of before.
//
// Tolerances (tests/README.md): fp32 compute, the GPU's kernels differ from the CPU's in
// summation order only, so a forward's loss agrees to 1e-5 relative (tests/cuda/model_test.cpp's
// bound for a step's loss); a bucket is a mean of fewer tokens (about a fifth), whose rounding
// differences average less, so 1e-4. bf16 rounds operands to bf16 on both sides, and an fp32 ulp
// of difference before a rounding moves the rounded value by 2^-8 relative: model_test.cpp's
// bound for a step's loss is 1e-3, and a bucket's mean takes precision_test.cpp's 1e-2 between
// bf16 layouts. Causal, window and document masks; 97 tokens (no multiple of the GPU attention's
// 64-token tile; the default zigzag layout pads them to 98, so a padding row runs too); the token
// count and the buckets' bounds exactly.
#include "longseq/train/eval.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../train/train_test_util.hpp"
#include "cuda_test_util.hpp"
#include "longseq/train/data.hpp"

namespace {

namespace tr = longseq::train;
using longseq::testing::temp_path;

TEST(CudaEval, MatchesTheCpuEval) {
  LONGSEQ_NEED_GPU();
  tr::TrainConfig c = longseq::testing::tiny_config();
  c.steps = 2;
  const std::string ck = longseq::testing::train_into(c, temp_path("cudaeval", "ckpt"));
  const std::string docs = temp_path("cudaeval", "docs.tok");
  tr::write_token_file(
      docs,
      tr::byte_tokenize({"In the beginning God created the heaven and the earth.",
                         "And the earth was without form, and void; and darkness was upon the "
                         "face of the deep.",
                         "And the Spirit of God moved upon the face of the waters. And God said, "
                         "Let there be light: and there was light."}),
      tr::kByteVocab, tr::kByteEot);
  for (const char* precision : {"fp32", "bf16"})
    for (const char* mask : {"causal", "window:9", "document"}) {
      const bool bf16 = std::string(precision) == "bf16";
      tr::EvalConfig e;
      e.checkpoint = ck;
      e.data = std::string(mask) == "document"
                   ? docs
                   : std::string(LONGSEQ_SOURCE_DIR) + "/data/kjv-genesis-exodus.txt";
      e.seq = 97;
      e.sequences = 2;
      e.buckets = 5;
      e.threads = 1;
      e.precision = precision;
      e.mask = mask;
      const tr::EvalResult cpu = tr::evaluate(e);
      e.device = "cuda";
      const tr::EvalResult gpu = tr::evaluate(e);
      const std::string what = std::string(precision) + " " + mask;
      const double tol = bf16 ? 1e-3 : 1e-5, bucket_tol = bf16 ? 1e-2 : 1e-4;
      EXPECT_EQ(gpu.tokens, cpu.tokens) << what;
      EXPECT_NEAR(gpu.loss, cpu.loss, tol * cpu.loss) << what;
      ASSERT_EQ(gpu.positions.size(), cpu.positions.size()) << what;
      for (size_t i = 0; i < cpu.positions.size(); ++i) {
        EXPECT_EQ(gpu.positions[i].start, cpu.positions[i].start) << what;
        EXPECT_EQ(gpu.positions[i].end, cpu.positions[i].end) << what;
        EXPECT_EQ(gpu.positions[i].tokens, cpu.positions[i].tokens) << what;
        EXPECT_NEAR(gpu.positions[i].loss, cpu.positions[i].loss,
                    bucket_tol * cpu.positions[i].loss)
            << what << " bucket " << i;
      }
    }
  std::filesystem::remove(docs);
  std::filesystem::remove_all(ck);
}

// Ranks sharing the GPU (threads, each with the whole model, the attention executor on the GPU
// between them): eval at world 2 and 3 gives the CPU's world-1 numbers within the tolerance of
// MatchesTheCpuEval.
TEST(CudaEval, RanksSharingTheGpuMatchTheCpuEval) {
  LONGSEQ_NEED_GPU();
  tr::TrainConfig c = longseq::testing::tiny_config();
  c.steps = 2;
  const std::string ck = longseq::testing::train_into(c, temp_path("cudaeval_ranks", "ckpt"));
  for (const char* precision : {"fp32", "bf16"}) {
    tr::EvalConfig e;
    e.checkpoint = ck;
    e.data = std::string(LONGSEQ_SOURCE_DIR) + "/data/kjv-genesis-exodus.txt";
    e.seq = 97;
    e.sequences = 2;
    e.buckets = 5;
    e.threads = 1;
    e.precision = precision;
    e.mask = "causal";
    const tr::EvalResult cpu = tr::evaluate(e);
    const double tol = std::string(precision) == "bf16" ? 1e-3 : 1e-5;
    for (const auto& [world, algo] :
         std::vector<std::pair<int, const char*>>{{2, "ring"}, {3, "burst"}}) {
      tr::EvalConfig g = e;
      g.device = "cuda";
      g.world = world;
      g.algo = algo;
      const tr::EvalResult gpu = tr::evaluate(g);
      EXPECT_EQ(gpu.tokens, cpu.tokens) << precision << " world " << world;
      EXPECT_NEAR(gpu.loss, cpu.loss, tol * cpu.loss) << precision << " world " << world;
    }
  }
  std::filesystem::remove_all(ck);
}

}  // namespace
