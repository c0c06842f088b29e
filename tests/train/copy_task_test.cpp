// The copy task (train/copy_task.hpp): examples repeat their first ceil(L/2) tokens at odd and
// even lengths, --distinct first halves have no repeats (a whole vocabulary's permutation too),
// ids and lengths are uniform, prefixes are the starts of whole examples, packed sequences hold
// whole examples only, the token file holds what the contract says, bad values are refused by
// name, and `longseq copy` writes it.
#include "longseq/train/copy_task.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "longseq/core/io.hpp"
#include "longseq/train/config.hpp"
#include "longseq/train/data.hpp"
#include "longseq/train/generate.hpp"
#include "longseq/train/trainer.hpp"
#include "train_test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace tr = longseq::train;
using longseq::testing::error_of;
using longseq::testing::temp_path;

tr::CopyTaskConfig task(int64_t length, int64_t vocab, bool distinct = false) {
  tr::CopyTaskConfig c;
  c.length = length;
  c.vocab = vocab;
  c.distinct = distinct;
  c.seed = 11;
  return c;
}

TEST(CopyTask, SecondHalfRepeatsTheFirstAtOddAndEvenLengths) {
  for (int64_t length : {2, 3, 7, 8, 33, 256}) {
    for (bool distinct : {false, true}) {
      const tr::CopyTaskConfig c = task(length, distinct ? 200 : 97, distinct);
      const int64_t h = (length + 1) / 2;
      const std::vector<uint32_t> e = tr::copy_example(c, 5, length);
      ASSERT_EQ(static_cast<int64_t>(e.size()), length);
      for (int64_t t = 0; t < length; ++t) EXPECT_LT(e[t], distinct ? 200u : 97u) << t;
      for (int64_t t = h; t < length; ++t) EXPECT_EQ(e[t], e[t - h]) << length << " " << t;
      EXPECT_EQ(e, tr::copy_example(c, 5, length));  // a function of (seed, index, length)
      if (length >= 33) {
        EXPECT_NE(e, tr::copy_example(c, 6, length));
      }
      // A shorter example of the same index starts with the same ids: a prompt cut from an
      // example is that example's start, whatever length it was made at.
      const int64_t shorter = length / 2 + 2;
      const std::vector<uint32_t> s = tr::copy_example(c, 5, shorter);
      for (int64_t t = 0; t < std::min(h, (shorter + 1) / 2); ++t) EXPECT_EQ(e[t], s[t]) << t;
    }
  }
}

TEST(CopyTask, DistinctFirstHalvesHaveNoRepeatsUpToTheWholeVocabulary) {
  for (int64_t vocab : {1, 5, 64, 1000}) {
    for (int64_t length : {2 * vocab, 2 * vocab - 1, vocab / 2 + 2}) {
      if (length < 2 || (length + 1) / 2 > vocab) continue;
      for (int64_t i = 0; i < 20; ++i) {
        const std::vector<uint32_t> e = tr::copy_example(task(length, vocab, true), i, length);
        const int64_t h = (length + 1) / 2;
        const std::set<uint32_t> seen(e.begin(), e.begin() + h);
        EXPECT_EQ(static_cast<int64_t>(seen.size()), h) << vocab << " " << length << " " << i;
        for (uint32_t id : seen) EXPECT_LT(id, static_cast<uint32_t>(vocab));
      }
    }
  }
}

TEST(CopyTask, IdsAndLengthsAreUniform) {
  // 40,000 first-half draws over 8 ids: each count is 5,000 +- 66 (binomial sd); a bias such as
  // never drawing the last id, or drawing one id twice as often, is off by > 600.
  for (bool distinct : {false, true}) {
    std::vector<int64_t> n(8, 0);
    const int64_t length = distinct ? 7 : 200, h = (length + 1) / 2;
    const int64_t examples = 40000 / h;
    for (int64_t i = 0; i < examples; ++i) {
      const std::vector<uint32_t> e = tr::copy_example(task(length, 8, distinct), i, length);
      for (int64_t t = 0; t < h; ++t) ++n[e[t]];
    }
    const double expect = static_cast<double>(examples * h) / 8;
    for (int v = 0; v < 8; ++v) EXPECT_NEAR(n[v], expect, 5 * 66) << distinct << " id " << v;
  }
  // 8,000 lengths over [5, 12]: 1,000 +- 30 each, both ends included.
  tr::CopyTaskConfig c = task(5, 10);
  c.max_length = 12;
  c.count = 8000;
  std::vector<int64_t> n(13, 0);
  for (int64_t l : tr::copy_lengths(c)) ++n[l];
  for (int64_t l = 5; l <= 12; ++l) EXPECT_NEAR(n[l], 1000, 5 * 30) << l;
  // Log-uniform over [8, 8191]: 10,000 lengths, 1,000 +- 30 in each octave [2^k, 2^(k+1)), both
  // ends reached (a uniform draw puts half of them in the top octave).
  c = task(8, 10);
  c.max_length = 8191;
  c.log_lengths = true;
  c.count = 10000;
  std::vector<int64_t> octave(13, 0);
  int64_t lo = 1 << 30, hi = 0;
  for (int64_t l : tr::copy_lengths(c)) {
    ++octave[static_cast<size_t>(std::log2(static_cast<double>(l)))];
    lo = std::min(lo, l);
    hi = std::max(hi, l);
  }
  for (int k = 3; k <= 12; ++k) EXPECT_NEAR(octave[k], 1000, 5 * 30) << "octave " << k;
  EXPECT_EQ(lo, 8);
  EXPECT_GE(hi, 8100);
  c.log_lengths = false;
  c.length = 5;
  c.max_length = 12;
  // Example i's length does not depend on how many are written.
  c.count = 10;
  const std::vector<int64_t> few = tr::copy_lengths(c);
  c.count = 8000;
  const std::vector<int64_t> many = tr::copy_lengths(c);
  EXPECT_TRUE(std::equal(few.begin(), few.end(), many.begin()));
}

TEST(CopyTask, PackedSequencesHoldWholeExamplesOnly) {
  // Odd sizes: sequences of 101 tokens of examples 3..17 tokens long (+ end of text).
  tr::CopyTaskConfig c = task(3, 40, true);
  c.max_length = 17;
  c.pack = 101;
  c.count = 7;
  const std::string path = temp_path("copy", "packed.tok");
  tr::write_copy_data(path, c);
  const tr::TokenFile f = tr::read_token_file(path);
  ASSERT_EQ(f.tokens.size(), 7u * 101);
  EXPECT_EQ(c.file_tokens(), 7 * 101);
  const std::vector<int64_t> lengths = tr::copy_lengths(c);
  size_t at = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    // The last example of a sequence may take up to max_length + length tokens (the header).
    EXPECT_GE(lengths[i], 3);
    EXPECT_LE(lengths[i], 17 + 3);
    const std::vector<uint32_t> e = tr::copy_example(c, static_cast<int64_t>(i), lengths[i]);
    for (int64_t t = 0; t < lengths[i]; ++t) ASSERT_EQ(f.tokens[at + t], e[t]) << i << " " << t;
    at += lengths[i];
    ASSERT_EQ(f.tokens[at], 40u) << i;  // its end of text
    ++at;
  }
  EXPECT_EQ(at, f.tokens.size());
  // Every sequence of 101 tokens ends exactly with an example's end of text.
  for (size_t s = 1; s <= 7; ++s) EXPECT_EQ(f.tokens[s * 101 - 1], 40u) << s;
  fs::remove(path);
}

TEST(CopyTask, TokenFileHoldsTheExamplesPrefixesAndEndsOfText) {
  const std::string path = temp_path("copy", "data.tok");
  tr::CopyTaskConfig c = task(9, 300);
  c.count = 3;
  c.eot = true;
  tr::write_copy_data(path, c);
  tr::TokenFile f = tr::read_token_file(path);
  EXPECT_EQ(f.vocab, 301);
  EXPECT_EQ(f.eot, 300);
  ASSERT_EQ(f.tokens.size(), 3u * 10);
  for (int64_t i = 0; i < 3; ++i) {
    const std::vector<uint32_t> e = tr::copy_example(c, i, 9);
    for (int64_t t = 0; t < 9; ++t) EXPECT_EQ(f.tokens[i * 10 + t], e[t]);
    EXPECT_EQ(f.tokens[i * 10 + 9], 300u);
  }
  // Examples packed into one sequence are documents: the loader's ids split them at the ends of
  // text, as train --doc-mask needs.
  const tr::Loader loader(f, 30);
  const std::vector<int32_t> docs = loader.document_ids(0);
  EXPECT_EQ(docs[0], 0);
  EXPECT_EQ(docs[9], 0);
  EXPECT_EQ(docs[10], 1);
  EXPECT_EQ(docs[29], 2);

  c.eot = false;
  c.prefix = 6;  // a prompt: the first half (5) and the first token of the repeat
  c.count = 2;
  tr::write_copy_data(path, c);
  f = tr::read_token_file(path);
  EXPECT_EQ(f.vocab, 301);
  ASSERT_EQ(f.tokens.size(), 2u * 6);
  const std::vector<uint32_t> e1 = tr::copy_example(c, 1, 9);
  for (int64_t t = 0; t < 6; ++t) EXPECT_EQ(f.tokens[6 + t], e1[t]);
  EXPECT_EQ(f.tokens[11], f.tokens[6]);
  fs::remove(path);
}

TEST(CopyTask, RefusesBadValuesByName) {
  const std::string never = temp_path("copy", "never.tok");
  auto refusal = [&](tr::CopyTaskConfig c) {
    return error_of([&] { tr::write_copy_data(never, c); });
  };
  auto expect = [&](const tr::CopyTaskConfig& c, const std::string& want) {
    const std::string got = refusal(c);
    EXPECT_NE(got.find(want), std::string::npos) << "want '" << want << "' in: " << got;
  };
  expect(task(1, 10), "[copy] --length 1 must be >= 2");
  expect(task(10, 0), "[copy] --vocab 0 must be in [1, ");
  tr::CopyTaskConfig c = task(10, 10);
  c.count = 0;
  expect(c, "[copy] --count 0 must be >= 1");
  c = task(10, 10);
  c.max_length = 9;
  expect(c, "[copy] --max-length 9 must be 0 (one length) or >= --length 10");
  c = task(10, 10);
  c.log_lengths = true;
  expect(c, "[copy] --log-lengths draws lengths from [--length, --max-length]: give --max-length");
  c = task(10, 10);
  c.prefix = 11;
  expect(c, "[copy] --prefix 11 must be in [0, --length 10]");
  c = task(10, 10);
  c.prefix = 4;
  c.max_length = 12;
  expect(c, "[copy] --prefix 4 cuts examples of one length: not with --max-length 12");
  expect(task(21, 10, true),
         "[copy] --distinct: examples of up to 21 tokens have first halves "
         "of 11, more ids than --vocab 10 without repeats");
  c = task(4, 10, true);
  c.max_length = 17;
  c.pack = 30;  // a packed sequence's last example may be 4 + 17 tokens long
  expect(c,
         "--distinct: examples of up to 21 tokens have first halves of 11, more ids than "
         "--vocab 10 without repeats");
  c.pack = 20;  // ... and shorter than the sequence
  c.vocab = 9;
  expect(c,
         "--distinct: examples of up to 19 tokens have first halves of 10, more ids than "
         "--vocab 9");
  EXPECT_NE(error_of([] { tr::copy_example(task(21, 10, true), 0, 21); })
                .find("[copy] an example of 21 tokens with --distinct cannot be drawn from --vocab "
                      "10"),
            std::string::npos);
  c = task(10, 100);
  c.pack = 10;
  expect(c, "[copy] --pack 10 must hold one example of --length 10 and its end of text (>= 11)");
  c = task(1 << 20, 10);
  c.count = 1 << 12;
  expect(c, "[copy] --count 4096 x 1048576 tokens is more than");
  EXPECT_FALSE(fs::exists(never));
}

TEST(CopyTask, CommandWritesTheFileAndRefusesByName) {
  const std::string path = temp_path("copy", "cli.tok");
  std::string log;
  ASSERT_EQ(longseq::testing::run(std::string(LONGSEQ_CLI) + " copy --out " + path +
                                      " --length 11 --count 4 --vocab 6 --distinct --eot --seed 3",
                                  log),
            0)
      << log;
  EXPECT_NE(log.find("4 copy examples of 11 to 11 tokens, 48 tokens in all, vocabulary 6"),
            std::string::npos)
      << log;
  const tr::TokenFile f = tr::read_token_file(path);
  tr::CopyTaskConfig c = task(11, 6, true);
  c.seed = 3;
  const std::vector<uint32_t> e3 = tr::copy_example(c, 3, 11);
  ASSERT_EQ(f.tokens.size(), 48u);
  for (int64_t t = 0; t < 11; ++t) EXPECT_EQ(f.tokens[36 + t], e3[t]);
  EXPECT_EQ(longseq::testing::run(std::string(LONGSEQ_CLI) + " copy --out " + path +
                                      " --length 13 --vocab 6 --distinct",
                                  log),
            1);
  EXPECT_NE(
      log.find("error: [copy] --distinct: examples of up to 13 tokens have first halves of 7"),
      std::string::npos)
      << log;
  fs::remove(path);
}

}  // namespace

namespace {

// The shipped curriculum (docs/long-context.md §7): every stage trains with the main job's engine
// on whole examples packed into its sequences, and the long stage extends RoPE with yarn.
TEST(CopyTask, PresetsAreTheDocumentedCurriculum) {
  const std::vector<std::pair<std::string, int64_t>> stages = {
      {"copy", 4096}, {"copy-256", 4096}, {"copy-2k", 8192}, {"copy-32k", 40960}};
  for (const auto& [name, seq] : stages) {
    const tr::TrainConfig c = tr::preset(name);
    EXPECT_EQ(c.world, 4) << name;
    EXPECT_EQ(c.algo, "burst") << name;
    EXPECT_EQ(c.balance, "zigzag") << name;
    EXPECT_TRUE(c.doc_mask) << name;
    EXPECT_EQ(c.seq, seq) << name;
    EXPECT_EQ(c.model.vocab, 20481) << name;
    EXPECT_EQ(c.rope_scaling.empty(), name != "copy-32k") << name;
    c.validate();
  }
  EXPECT_EQ(tr::preset("copy-32k").model_config().rope_scaling.type,
            longseq::model::RopeType::yarn);
}

// A few steps of the `copy` preset as shipped (4 ranks, burst, zigzag, packed examples apart under
// --doc-mask) on data of the command, then `generate` from it: a model with neither a tokenizer
// nor the byte vocabulary prints its ids, not bytes.
TEST(CopyTask, PresetTrainsAndGeneratePrintsIds) {
  const std::string root = temp_path("copy", "preset");
  fs::remove_all(root);
  fs::create_directories(root);
  tr::CopyTaskConfig d = task(8, 20480, true);
  d.max_length = 32;
  d.pack = 4096;
  d.count = 2;
  tr::write_copy_data(root + "/train.tok", d);
  tr::TrainConfig c = tr::preset("copy");
  c.data = root + "/train.tok";
  c.steps = 2;
  c.quiet = true;
  c.out = root + "/model";
  const tr::TrainSummary s = tr::train(c);
  ASSERT_EQ(s.steps.size(), 2u);
  // At initialisation every id is about equally likely: the loss is about ln(20481) = 9.93.
  EXPECT_NEAR(s.steps[0].loss, std::log(20481.0), 0.05);
  const std::string prompt = root + "/prompt.txt";
  longseq::core::write_file_atomic(prompt, "[300, 16000, 7, 300]");
  std::string log;
  ASSERT_EQ(longseq::testing::run(std::string(LONGSEQ_CLI) + " generate --checkpoint-dir " + c.out +
                                      " --prompt-ids " + prompt +
                                      " --max-new-tokens 3 --world 2 --threads 1",
                                  log),
            0)
      << log;
  tr::GenerateConfig g;
  g.checkpoint = c.out;
  g.prompt = {300, 16000, 7, 300};
  g.max_new_tokens = 3;
  g.threads = 1;
  const std::vector<int32_t> ids = tr::generate(g).ids;
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(log, std::to_string(ids[0]) + " " + std::to_string(ids[1]) + " " +
                     std::to_string(ids[2]) + "\n");
  fs::remove_all(root);
}

}  // namespace
