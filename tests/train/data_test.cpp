// Token files, the byte tokenizer and the loader: global label shift across rank boundaries for
// every layout and world, padding, document ids, sequence order, malformed files refused.
#include "longseq/train/data.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "longseq/core/error.hpp"
#include "longseq/core/safetensors.hpp"
#include "train_test_util.hpp"

namespace {

namespace tr = longseq::train;
namespace at = longseq::attention;
using longseq::core::Error;

std::string tmp(const std::string& name) {
  return longseq::testing::temp_path("data", name);
}
using longseq::testing::error_of;

TEST(TokenFile, RoundTripsUint16AndUint32) {
  for (int64_t vocab : {257, 70000}) {
    std::vector<uint32_t> t = {1, 0, 256, 42, static_cast<uint32_t>(vocab - 1)};
    const std::string p = tmp("rt" + std::to_string(vocab));
    tr::write_token_file(p, t, vocab, 256);
    const tr::TokenFile f = tr::read_token_file(p);
    EXPECT_EQ(f.tokens, t);
    EXPECT_EQ(f.vocab, vocab);
    EXPECT_EQ(f.eot, 256);
    const std::string raw = longseq::core::read_file(p);
    EXPECT_EQ(raw.size(), 1024 + t.size() * (vocab <= 65536 ? 2 : 4));
    std::remove(p.c_str());
  }
}

TEST(TokenFile, RefusesMalformedFilesNamingTheProblem) {
  const std::string p = tmp("bad");
  tr::write_token_file(p, {1, 2, 3}, 257, 256);
  std::string raw = longseq::core::read_file(p);
  auto put = [&](const std::string& bytes) { longseq::core::write_file_atomic(p, bytes); };
  put(raw.substr(0, raw.size() - 1));
  EXPECT_NE(error_of([&] { tr::read_token_file(p); }).find("header says 3 tokens of 2 bytes"),
            std::string::npos);
  std::string m = raw;
  m[0] = 'X';
  put(m);
  EXPECT_NE(error_of([&] { tr::read_token_file(p); }).find("bad magic"), std::string::npos);
  put("short");
  EXPECT_NE(error_of([&] { tr::read_token_file(p); }).find("shorter than the 1024-byte header"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tr::write_token_file(p, {300}, 257, 256); }).find("token 300 at 0"),
            std::string::npos);
  std::remove(p.c_str());
}

TEST(ByteTokenizer, DocumentsEndWithEotAndDecodeBack) {
  const auto t = tr::byte_tokenize({"In the", "beginning"});
  ASSERT_EQ(t.size(), 6u + 1 + 9 + 1);
  EXPECT_EQ(t[6], static_cast<uint32_t>(tr::kByteEot));
  EXPECT_EQ(t.back(), static_cast<uint32_t>(tr::kByteEot));
  EXPECT_EQ(tr::byte_detokenize(t), "In the<|eot|>beginning<|eot|>");
}

TEST(Loader, LabelsShiftInGlobalOrderAcrossRanksForEveryLayout) {
  tr::TokenFile f;
  for (uint32_t i = 0; i < 500; ++i) f.tokens.push_back((i * 7 + 3) % 250);
  f.vocab = 257;
  f.path = "synthetic";
  for (int64_t n : {37, 64}) {
    const tr::Loader loader(f, n);
    EXPECT_EQ(loader.num_sequences(), 500 / n);
    for (auto bal : {at::Balance::contiguous, at::Balance::zigzag, at::Balance::striped})
      for (int world : {1, 2, 3, 4}) {
        const at::Layout lay(bal, n, world);
        const int64_t seq = 2;
        std::vector<int> seen(n, 0);
        for (int r = 0; r < world; ++r) {
          const tr::RankTokens rt = loader.rank_tokens(seq, lay, r, -100);
          ASSERT_EQ(static_cast<int64_t>(rt.pos.size()), lay.local_len());
          for (size_t i = 0; i < rt.pos.size(); ++i) {
            const int64_t p = rt.pos[i];
            if (p < 0) {
              EXPECT_EQ(rt.labels[i], -100);
              continue;
            }
            ++seen[p];
            EXPECT_EQ(rt.tokens[i], static_cast<int32_t>(f.tokens[seq * n + p]));
            EXPECT_EQ(rt.labels[i],
                      p + 1 < n ? static_cast<int32_t>(f.tokens[seq * n + p + 1]) : -100)
                << "position " << p << " rank " << r << " world " << world;
          }
        }
        for (int64_t p = 0; p < n; ++p) EXPECT_EQ(seen[p], 1) << "position " << p;
      }
  }
}

TEST(Loader, SequenceOrderDocumentIdsAndShortFiles) {
  tr::TokenFile f;
  f.tokens = {5, 6, 256, 7, 256, 8, 9, 10, 11, 256, 1, 2};
  f.vocab = 257;
  f.eot = 256;
  f.path = "synthetic";
  const tr::Loader loader(f, 6);
  EXPECT_EQ(loader.num_sequences(), 2);
  EXPECT_EQ(loader.sequence_index(0, 0, 1), 0);
  EXPECT_EQ(loader.sequence_index(1, 0, 1), 1);
  EXPECT_EQ(loader.sequence_index(2, 0, 1), 0);  // wraps: the next epoch
  EXPECT_EQ(loader.sequence_index(0, 1, 2), 1);
  EXPECT_EQ(loader.document_ids(0), (std::vector<int32_t>{0, 0, 0, 1, 1, 2}));
  EXPECT_EQ(loader.document_ids(1), (std::vector<int32_t>{0, 0, 0, 0, 1, 1}));
  f.eot = -1;
  EXPECT_TRUE(tr::Loader(f, 6).document_ids(0).empty());
  EXPECT_NE(error_of([&] {
              tr::Loader(f, 13);
            }).find("holds 12 tokens, fewer than one sequence of --seq 13"),
            std::string::npos);
}

// issue 20: `1024 + n * bytes` wrapped around for a count of 2^63 two-byte tokens, so a bare
// header passed the size check and the reader tried to allocate 2^63 tokens (a std::length_error
// naming no file).
TEST(TokenFile, RefusesATokenCountWhoseByteSizeOverflows) {
  const std::string p = tmp("ovf");
  tr::write_token_file(p, {}, 257, 256);
  std::string raw = longseq::core::read_file(p);
  ASSERT_EQ(raw.size(), 1024u);
  const uint32_t hi = 0x80000000u;
  std::memcpy(raw.data() + 12, &hi, 4);  // header[3]: high 32 bits of the count
  longseq::core::write_file_atomic(p, raw);
  const std::string m = error_of([&] { tr::read_token_file(p); });
  EXPECT_NE(
      m.find("[data] " + p +
             ": header says 9223372036854775808 tokens of 2 bytes, the file has 0 data bytes"),
      std::string::npos)
      << m;
  std::remove(p.c_str());
}

// issue 20: a step read from trainer_state.json reached the loader unchecked; a negative one
// made rank_tokens read before the tokens (heap-use-after-free under ASan).
TEST(Loader, RefusesNegativeStepsAndSequencesOutOfRange) {
  tr::TokenFile f;
  f.tokens.assign(12, 1);
  f.vocab = 257;
  f.path = "synthetic";
  const tr::Loader loader(f, 6);
  EXPECT_NE(error_of([&] {
              loader.sequence_index(-2147483648LL, 0, 1);
            }).find("[data] synthetic: step -2147483648 replica 0 of 1 out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { loader.sequence_index(INT64_MAX / 2, 1, 4); }).find("overflows"),
            std::string::npos);
  const at::Layout lay(at::Balance::contiguous, 6, 1);
  EXPECT_NE(
      error_of([&] { loader.rank_tokens(-1, lay, 0, -100); }).find("sequence -1 out of range"),
      std::string::npos);
  EXPECT_NE(error_of([&] { loader.rank_tokens(2, lay, 0, -100); }).find("sequence 2 out of range"),
            std::string::npos);
}

}  // namespace
