// longseq generate (train/generate.hpp, model/inference.hpp):
// 1. KV-cache generation equals a generation without a cache (every step re-runs the whole
//    sequence through the model at world 1 and samples the last position), token for token,
//    greedy and sampled, with plain and yarn-scaled RoPE;
// 2. the distributed prefill and the sharded cache give the same tokens as one rank, for odd
//    prompt lengths, odd worlds, several algorithms and layouts;
// 3. sampling: greedy is the argmax, top-p keeps the nucleus, the seed fixes the draw;
// 4. the CLI prints the Contract's JSON, exactly {"prompt_tokens", "ids", "text"}, greedy by
//    default, timings only in --stats FILE;
// 5. a sliding-window model with unusual heads, every algorithm name: equal to one rank;
// 6. bad input is refused naming the flag and the value.
#include "longseq/train/generate.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "longseq/attention/layout.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/model/inference.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/eval.hpp"
#include "train_test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace tr = longseq::train;
namespace lm = longseq::model;
using longseq::testing::temp_path;
using longseq::testing::tiny_config;
using longseq::testing::train_into;
using longseq::testing::unusual_heads_config;

// A tiny model trained enough that sampled text depends on its probabilities (40 steps).
std::string trained(const std::string& name, const std::string& rope_scaling) {
  tr::TrainConfig c = tiny_config();
  c.steps = 40;
  c.optim.lr = 1e-2;
  c.model.max_position_embeddings = 32;
  c.rope_scaling = rope_scaling;
  return train_into(c, temp_path("generate", name));
}

const std::string& plain() {
  static const std::string d = trained("plain", "");
  return d;
}

std::vector<int32_t> prompt(int64_t n) {
  const std::string text =
      "And God said, Let there be light: and there was light. And God saw the light";
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i)
    p.push_back(static_cast<unsigned char>(text[static_cast<size_t>(i) % text.size()]));
  return p;
}

// Generation without a cache: each new token from a full forward over everything so far.
std::vector<int32_t> no_cache(const tr::GenerateConfig& g, int64_t window = 0) {
  const std::string dir = tr::resolve_checkpoint(g.checkpoint);
  const lm::LlamaConfig mc = tr::read_hf_config(dir);
  const lm::ParamLayout layout(mc);
  std::vector<int32_t> seq = g.prompt, out;
  longseq::comm::Options opt;
  opt.world = 1;
  longseq::comm::run(opt, [&](longseq::comm::Group& group) {
    lm::ReplicaParams params = tr::load_replica(dir, layout, group);
    lm::InferenceOptions io;
    for (int64_t i = 0; i < g.max_new_tokens; ++i) {
      const int64_t n = static_cast<int64_t>(seq.size());
      const longseq::attention::Layout l(longseq::attention::Balance::contiguous, n, 1);
      auto mask = std::make_shared<longseq::attention::MaskSpec>();
      mask->causal = true;
      mask->window = window;
      auto attn = lm::make_distributed_attention(longseq::attention::Algorithm::parse("ring"), mask,
                                                 l, group, 1);
      std::vector<int64_t> pos(static_cast<size_t>(n));
      for (int64_t p = 0; p < n; ++p) pos[p] = p;
      lm::StepBatch b;
      b.tokens = seq.data();
      b.pos = pos.data();
      b.len = n;
      const std::vector<float> h = lm::forward_hidden(layout, params, *attn, b, io);
      const int32_t t =
          tr::sample_token(lm::logits_of(layout, params, h.data() + (n - 1) * mc.hidden, io),
                           g.temperature, g.top_p, g.seed, i);
      out.push_back(t);
      seq.push_back(t);
    }
  });
  return out;
}

tr::GenerateConfig config(const std::string& ckpt, int64_t prompt_len, double temperature) {
  tr::GenerateConfig g;
  g.checkpoint = ckpt;
  g.prompt = prompt(prompt_len);
  g.max_new_tokens = 24;
  g.temperature = temperature;
  g.top_p = 0.9;
  g.seed = 11;
  g.threads = 1;
  return g;
}

TEST(Generate, KvCacheEqualsRecomputingEverything) {
  static const std::string yarn =
      trained("yarn", R"({"rope_type":"yarn","factor":4,"original_max_position_embeddings":16})");
  for (const std::string* ck : {&plain(), &yarn})
    for (double t : {0.0, 1.0}) {
      const tr::GenerateConfig g = config(*ck, 13, t);
      const std::vector<int32_t> want = no_cache(g);
      EXPECT_EQ(tr::generate(g).ids, want) << *ck << " temperature " << t;
    }
}

TEST(Generate, ShardedCacheEqualsOneRank) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{30}}) {
    const tr::GenerateConfig one = config(plain(), n, 1.0);
    const std::vector<int32_t> want = tr::generate(one).ids;
    ASSERT_EQ(want.size(), 24u);
    for (const auto& [world, algo, balance] :
         {std::tuple{2, "burst", "zigzag"}, std::tuple{3, "ring", "striped"},
          std::tuple{3, "burst", "contiguous"}, std::tuple{2, "ulysses", "zigzag"},
          std::tuple{4, "ring", "zigzag"}, std::tuple{5, "burst", "striped"},
          std::tuple{4, "double-ring:2", "zigzag"}, std::tuple{4, "double-ring:2:ring", "striped"},
          std::tuple{4, "startrail:2", "contiguous"}, std::tuple{4, "startrail:2:rings", "zigzag"},
          std::tuple{4, "usp:2", "striped"}, std::tuple{4, "usp:2:ring", "zigzag"}}) {
      if (n < world && std::string(algo).starts_with("u")) continue;
      tr::GenerateConfig g = one;
      g.world = world;
      g.algo = algo;
      g.balance = balance;
      EXPECT_EQ(tr::generate(g).ids, want)
          << "prompt " << n << " world " << world << " " << algo << " " << balance;
    }
  }
}

// A sliding-window model (the window applies to the prefill and to every decode step, over the
// shards) with unusual heads (6 query heads sharing 2 kv heads): greedy and sampled generation
// at odd worlds equals one rank, and the cache equals recomputing everything.
TEST(Generate, SlidingWindowAndUnusualHeadsEqualOneRank) {
  static const std::string ck = [] {
    tr::TrainConfig c = unusual_heads_config();
    c.steps = 20;
    c.optim.lr = 1e-2;
    const std::string root = train_into(c, temp_path("generate", "window"));
    // The trainer trains causal models; a Mistral config.json carries the window to inference.
    const std::string cfg = root + "/checkpoint/config.json";
    nlohmann::json j = nlohmann::json::parse(longseq::core::read_file(cfg));
    j["model_type"] = "mistral";
    j["architectures"] = {"MistralForCausalLM"};
    j["sliding_window"] = 5;
    longseq::core::write_file_atomic(cfg, j.dump(1));
    EXPECT_EQ(tr::read_hf_config(root + "/checkpoint").sliding_window, 5);
    return root;
  }();
  for (double t : {0.0, 1.0}) {
    const tr::GenerateConfig one = config(ck, 11, t);
    const std::vector<int32_t> want = tr::generate(one).ids;
    EXPECT_EQ(no_cache(one, 5), want) << "temperature " << t;
    for (const auto& [world, algo] : {std::pair{3, "burst"}, std::pair{5, "ring"},
                                      std::pair{2, "ulysses"}, std::pair{4, "usp:2"}}) {
      tr::GenerateConfig g = one;
      g.world = world;
      g.algo = algo;
      EXPECT_EQ(tr::generate(g).ids, want) << "world " << world << " " << algo << " t " << t;
    }
  }
}

TEST(Generate, SamplingRules) {
  const std::vector<float> z = {0.0f, 3.0f, 3.0f, 1.0f, -2.0f};
  EXPECT_EQ(tr::sample_token(z, 0.0, 1.0, 1, 0), 1);  // greedy: the first maximum
  // top-p 0.4: the nucleus is {1} (mass 0.46; the tie with 2 breaks to the lower id): always 1
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(tr::sample_token(z, 1.0, 0.4, 3, i), 1);
  // a hot temperature with every token: over many draws every id appears, the same per seed
  std::vector<int> seen(5, 0);
  for (int64_t i = 0; i < 400; ++i) {
    const int32_t t = tr::sample_token(z, 5.0, 1.0, 9, i);
    ++seen[t];
    EXPECT_EQ(t, tr::sample_token(z, 5.0, 1.0, 9, i));
  }
  for (int c : seen) EXPECT_GT(c, 0);
  EXPECT_THROW(tr::sample_token(z, -1.0, 1.0, 0, 0), longseq::core::Error);
  EXPECT_THROW(tr::sample_token(z, 1.0, 0.0, 0, 0), longseq::core::Error);
}

TEST(Generate, CliPrintsTheContractJson) {
  const std::string ids = temp_path("generate", "ids.txt");
  longseq::core::write_file_atomic(ids, "[65, 110, 100, 32, 71, 111, 100]");
  std::string log;
  ASSERT_EQ(longseq::testing::run(std::string(LONGSEQ_CLI) + " generate --checkpoint-dir " +
                                      plain() + " --prompt-ids " + ids +
                                      " --max-new-tokens 5 --world 3 --algo ring " +
                                      "--temperature 1 --top-p 0.9 --seed 11 --threads 1 --json",
                                  log),
            0)
      << log;
  const nlohmann::json j = nlohmann::json::parse(log);
  std::vector<std::string> keys;  // exactly the Contract's keys
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"ids", "prompt_tokens", "text"}));
  EXPECT_TRUE(j.at("prompt_tokens").is_number_integer());
  EXPECT_EQ(j.at("prompt_tokens"), 7);
  ASSERT_EQ(j.at("ids").size(), 5u);
  EXPECT_TRUE(j.at("text").is_string());
  tr::GenerateConfig g = config(plain(), 1, 1.0);
  g.prompt = {65, 110, 100, 32, 71, 111, 100};
  g.max_new_tokens = 5;
  EXPECT_EQ(j.at("ids").get<std::vector<int32_t>>(), tr::generate(g).ids);
  // text prompts go through the byte tokenizer here (no tokenizer.json in the checkpoint)
  ASSERT_EQ(longseq::testing::run(
                std::string(LONGSEQ_CLI) + " generate --checkpoint-dir " + plain() +
                    " --prompt 'And God' --max-new-tokens 5 --temperature 1 --top-p 0.9 " +
                    "--seed 11 --threads 1 --json",
                log),
            0)
      << log;
  EXPECT_EQ(nlohmann::json::parse(log).at("ids"), j.at("ids"));
  // greedy by default; --stats FILE gets the timings; the text is printed without --json
  const std::string stats = temp_path("generate", "stats.json");
  ASSERT_EQ(longseq::testing::run(std::string(LONGSEQ_CLI) + " generate --checkpoint-dir " +
                                      plain() + " --prompt-ids " + ids +
                                      " --max-new-tokens 4 --world 2 --threads 1 --stats " + stats,
                                  log),
            0)
      << log;
  g.temperature = 0;
  g.max_new_tokens = 4;
  const std::vector<int32_t> greedy = tr::generate(g).ids;
  std::string want_text;
  for (int32_t t : greedy) want_text += static_cast<char>(t);  // byte-level, no end of text here
  EXPECT_EQ(log, want_text + "\n");
  const nlohmann::json st = nlohmann::json::parse(longseq::core::read_file(stats));
  EXPECT_EQ(st.at("prompt_tokens"), 7);
  EXPECT_EQ(st.at("new_tokens"), 4);
  EXPECT_GT(st.at("prefill_tokens_per_s").get<double>(), 0);
  EXPECT_GT(st.at("decode_tokens_per_s").get<double>(), 0);
  fs::remove(stats);
  fs::remove(ids);
}

TEST(Generate, RefusesBadInputNamingTheFlag) {
  auto refusal = [](tr::GenerateConfig g) {
    return longseq::testing::error_of([&] { tr::generate(g); });
  };
  tr::GenerateConfig g = config(plain(), 5, 0.0);
  g.balance = "block-striped";
  EXPECT_NE(refusal(g).find("--balance block-striped"), std::string::npos) << refusal(g);
  g = config(plain(), 5, 0.0);
  g.algo = "ulysses";
  g.world = 3;  // 4 query heads
  EXPECT_NE(refusal(g).find("--algo ulysses at --world 3"), std::string::npos) << refusal(g);
  g = config(plain(), 5, 0.0);
  g.top_p = 1.5;
  EXPECT_NE(refusal(g).find("--top-p 1.5"), std::string::npos);
  g = config(plain(), 5, 0.0);
  g.temperature = -0.5;
  EXPECT_NE(refusal(g).find("--temperature -0.5"), std::string::npos);
  g = config(plain(), 5, 0.0);
  g.max_new_tokens = 0;
  EXPECT_NE(refusal(g).find("--max-new-tokens 0"), std::string::npos);
  g = config(plain(), 5, 0.0);
  g.prompt = {65, 1000};
  EXPECT_NE(refusal(g).find("prompt token 1000"), std::string::npos);
  const std::string missing = temp_path("generate", "no-such-ids.txt");
  EXPECT_NE(longseq::testing::error_of([&] {
              tr::read_prompt_ids(missing);
            }).find("--prompt-ids " + missing + ": no such file"),
            std::string::npos);
  std::string log;
  EXPECT_NE(longseq::testing::run(std::string(LONGSEQ_CLI) + " generate --checkpoint-dir " +
                                      plain() + " --max-new-tokens 2",
                                  log),
            0);
  EXPECT_NE(log.find("give exactly one of --prompt TEXT and --prompt-ids FILE"), std::string::npos)
      << log;
}

}  // namespace
