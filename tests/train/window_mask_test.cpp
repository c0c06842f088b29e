// Window and document masks in training (issue 17).
//
// 1. The trainer's --mask grammar (model::TrainMask): causal, window:W, document and their
//    combinations parse to the mask attention runs; full, unknown terms and document twice are
//    refused with the text named.
// 2. visible_pairs (the attention term of the MFU formula) equals a brute-force count of the
//    mask predicate (kernels::Mask semantics) for causal, window, document and block masks.
// 3. Hugging Face config.json: a windowed model is written as Mistral with sliding_window and
//    read back; a llama config's sliding_window is ignored, as transformers' LlamaAttention does.
// 4. The trainer's --mask: a distributed step under window:W (and window:W,document) equals the
//    world 1 step for every algorithm and every balance layout (loss 1e-5 relative, gradients
//    |g - g1| <= 1e-5 max|g1| + 1e-4 |g1|, the rule of trainer_test.cpp), differs from causal,
//    and the checkpoint's config.json carries the window (Mistral's sliding_window); a sequence
//    length no layout divides (N = 1003, world 4) trains under every layout.
// 5. Long-document data: scripts/kjv_books.sh makes the 66 books of the KJV one document each, and
//    the trainer's --mask document ids over its 2^20-token sequences change exactly after each
//    end-of-text (skipped without Debian's bible-kjv).
// 6. 64-bit: a window attention over N = 2^17 tokens (N^2 = 2^34 score elements, past 2^31;
//    one head of dimension 2 keeps it cheap) through model::make_distributed_attention on 2 ranks
//    equals a brute-force fp64 windowed attention (forward and backward), with set_mask switching
//    to document ids between calls.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/io.hpp"
#include "longseq/core/npy.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/data.hpp"
#include "longseq/train/trainer.hpp"
#include "train_test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace md = longseq::model;
namespace tr = longseq::train;
namespace at = longseq::attention;
namespace core = longseq::core;
using longseq::testing::error_of;
using longseq::testing::temp_path;

TEST(TrainMask, ParsesTheTermsAndStaysCausal) {
  const md::TrainMask c = md::TrainMask::parse("causal", 64);
  EXPECT_TRUE(c.base->causal);
  EXPECT_EQ(c.window(), 0);
  EXPECT_FALSE(c.document);

  const md::TrainMask w = md::TrainMask::parse("window:16", 64);
  EXPECT_TRUE(w.base->causal);
  EXPECT_EQ(w.window(), 16);
  EXPECT_FALSE(w.document);

  const md::TrainMask wd = md::TrainMask::parse("causal,window:8,document", 64);
  EXPECT_EQ(wd.window(), 8);
  EXPECT_TRUE(wd.document);
  EXPECT_TRUE(wd.base->doc_ids.empty());  // the ids come per step
  const auto step = wd.with_documents({0, 0, 1, 1});
  EXPECT_EQ(step->doc_ids.size(), 4u);
  EXPECT_EQ(step->window, 8);
  EXPECT_TRUE(step->causal);
  EXPECT_EQ(wd.with_documents({}).get(), wd.base.get());

  const md::TrainMask d = md::TrainMask::parse("document", 64);
  EXPECT_TRUE(d.document);
  EXPECT_EQ(d.window(), 0);
  EXPECT_TRUE(d.base->causal);
}

TEST(TrainMask, RefusesWhatIsNoLanguageModelMask) {
  auto msg = [](const std::string& t) { return error_of([&] { md::TrainMask::parse(t, 64); }); };
  EXPECT_NE(msg("full").find("--mask 'full': full is not a language model's mask"),
            std::string::npos)
      << msg("full");
  EXPECT_NE(msg("window:8,bogus").find("unknown --mask term 'bogus'"), std::string::npos)
      << msg("window:8,bogus");
  EXPECT_NE(msg("window:0").find("needs W >= 1"), std::string::npos) << msg("window:0");
  EXPECT_NE(msg("document,document").find("document given twice"), std::string::npos);
  EXPECT_NE(msg("causal,,window:4").find("empty term"), std::string::npos);
  EXPECT_NE(msg("document:/nonexistent.npy").find("/nonexistent.npy"), std::string::npos);
}

// The kernels' predicate: k visible from q.
bool visible(const at::MaskSpec& m, int64_t q, int64_t k) {
  if ((m.causal || m.window > 0) && k > q) return false;
  if (m.window > 0 && q - k >= m.window) return false;
  if (!m.doc_ids.empty() && m.doc_ids[q] != m.doc_ids[k]) return false;
  if (!m.block_mask.empty() && !m.block_mask[(q / m.block_size) * m.num_blocks + k / m.block_size])
    return false;
  return true;
}

TEST(VisiblePairs, EqualsABruteForceCount) {
  const int64_t n = 77;
  std::vector<int32_t> docs(n);
  for (int64_t i = 0; i < n; ++i) docs[i] = i < 10 ? 0 : i < 11 ? 1 : i < 40 ? 2 : 3;
  std::vector<at::MaskSpec> masks;
  for (bool causal : {false, true})
    for (int64_t w : {0, 1, 5, 16, 200})
      for (int d = 0; d < 2; ++d)
        for (int b = 0; b < 2; ++b) {
          at::MaskSpec m;
          m.causal = causal;
          m.window = w;
          if (d) m.doc_ids = docs;
          if (b) {
            m.block_size = 8;
            m.num_blocks = (n + 7) / 8;
            m.block_mask.resize(static_cast<size_t>(m.num_blocks * m.num_blocks));
            for (size_t i = 0; i < m.block_mask.size(); ++i)
              m.block_mask[i] = (i * 7 + i / 3) % 3 != 0;
          }
          masks.push_back(m);
        }
  for (const auto& m : masks) {
    double brute = 0;
    for (int64_t q = 0; q < n; ++q)
      for (int64_t k = 0; k < n; ++k) brute += visible(m, q, k);
    EXPECT_EQ(md::visible_pairs(m, n), brute) << m.describe();
  }
  // Past int32: n = 2^20 causal has n (n + 1) / 2 = 549756338176 pairs, a window of W n - W (W - 1)
  // / 2.
  at::MaskSpec causal;
  causal.causal = true;
  const int64_t big = int64_t{1} << 20;
  EXPECT_EQ(md::visible_pairs(causal, big), 549756338176.0);
  at::MaskSpec window = causal;
  window.window = 4096;
  EXPECT_EQ(md::visible_pairs(window, big), 4096.0 * big - 4096.0 * 4095.0 / 2);
}

TEST(HfConfig, SlidingWindowIsWrittenAsMistralAndReadBack) {
  md::LlamaConfig m;
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 8;
  m.intermediate = 64;
  m.vocab = 257;
  const nlohmann::json plain = tr::hf_config(m);
  EXPECT_EQ(plain["model_type"], "llama");
  EXPECT_EQ(plain["architectures"][0], "LlamaForCausalLM");
  EXPECT_FALSE(plain.contains("sliding_window"));
  m.sliding_window = 16;
  const nlohmann::json win = tr::hf_config(m);
  EXPECT_EQ(win["model_type"], "mistral");
  EXPECT_EQ(win["architectures"][0], "MistralForCausalLM");
  EXPECT_EQ(win["sliding_window"], 16);

  const std::string dir = temp_path("window_mask", "hf");
  fs::create_directories(dir);
  core::write_file_atomic(dir + "/config.json", win.dump(2));
  const md::LlamaConfig back = tr::read_hf_config(dir);
  EXPECT_EQ(back.sliding_window, 16);
  EXPECT_EQ(tr::hf_config(back), win);
  // transformers' Llama ignores sliding_window: so do we.
  nlohmann::json llama = win;
  llama["model_type"] = "llama";
  core::write_file_atomic(dir + "/config.json", llama.dump(2));
  EXPECT_EQ(tr::read_hf_config(dir).sliding_window, 0);
  // Mistral's null window is none; a negative one is refused by name.
  nlohmann::json null_w = win;
  null_w["sliding_window"] = nullptr;
  core::write_file_atomic(dir + "/config.json", null_w.dump(2));
  EXPECT_EQ(tr::read_hf_config(dir).sliding_window, 0);
  nlohmann::json neg = win;
  neg["sliding_window"] = -3;
  core::write_file_atomic(dir + "/config.json", neg.dump(2));
  const std::string e = error_of([&] { tr::read_hf_config(dir); });
  EXPECT_NE(e.find("sliding_window must be >= 0"), std::string::npos) << e;
  fs::remove_all(dir);
}

// ---- the trainer under window masks ----------------------------------------------------------

struct Step {
  tr::TrainSummary s;
  float gmax = 0;
};

Step train_step(const tr::TrainConfig& c) {
  Step x;
  x.s = tr::train(c);
  for (float g : x.s.grads) x.gmax = std::max(x.gmax, std::fabs(g));
  return x;
}

// Worst |g - g1| / max|g1| after checking the elementwise rule; a failure names `what`.
double expect_same(const Step& a, const Step& b, const std::string& what) {
  EXPECT_NEAR(a.s.steps[0].loss, b.s.steps[0].loss, 1e-5 * b.s.steps[0].loss) << what;
  EXPECT_EQ(a.s.grads.size(), b.s.grads.size()) << what;
  double worst = 0;
  int bad = 0;
  for (size_t i = 0; i < std::min(a.s.grads.size(), b.s.grads.size()); ++i) {
    const double err = std::fabs(a.s.grads[i] - b.s.grads[i]);
    worst = std::max(worst, err);
    if (err > 1e-5 * b.gmax + 1e-4 * std::fabs(b.s.grads[i]) && bad++ < 3)
      ADD_FAILURE() << what << ": grad[" << i << "] " << a.s.grads[i] << " vs world 1 "
                    << b.s.grads[i];
  }
  EXPECT_GT(b.gmax, 1e-3f) << what;
  return worst / b.gmax;
}

TEST(TrainWindowMask, DistributedStepEqualsWorldOneForEveryAlgorithmAndLayout) {
  // seq 64, window 12: every rank's chunk (8 or 16 tokens) has keys its window cannot reach, so
  // some chunk pairs are empty and the schedules skip them.
  tr::TrainConfig one = longseq::testing::tiny_config();
  one.mask = "window:12";
  const Step base = train_step(one);
  tr::TrainConfig causal = longseq::testing::tiny_config();
  EXPECT_GT(std::fabs(train_step(causal).s.steps[0].loss - base.s.steps[0].loss), 1e-5)
      << "the window changes the loss (the test can fail)";
  struct Case {
    int world, nodes;
    const char* algo;
  };
  for (const Case& k : {Case{2, 1, "ring"}, Case{4, 1, "ring"}, Case{4, 1, "burst"},
                        Case{4, 2, "double-ring"}, Case{4, 1, "double-ring:2:ring"},
                        Case{4, 1, "startrail:2"}, Case{2, 1, "ulysses"}, Case{4, 1, "usp:2"}})
    for (const char* balance : {"contiguous", "zigzag", "striped"}) {
      tr::TrainConfig c = one;
      c.world = k.world;
      c.nodes = k.nodes;
      c.algo = k.algo;
      c.balance = balance;
      const std::string what =
          std::string(k.algo) + " world " + std::to_string(k.world) + " " + balance;
      const double rel = expect_same(train_step(c), base, what);
      std::printf("  window:12 %-34s max|dg| = %.2e max|g|\n", what.c_str(), rel);
    }
}

// A block-sparse mask (local + global blocks of 8 tokens) trains under the block-striped layout it
// is made for: the trainer hands the mask's block size to the layout (it did not, and
// block-striped was refused for want of it), and the distributed step equals world 1.
TEST(TrainWindowMask, BlockMaskUnderBlockStripedEqualsWorldOne) {
  tr::TrainConfig one = longseq::testing::tiny_config();
  const int64_t b = 8, nb = (one.seq + b - 1) / b;
  std::vector<uint8_t> blocks(static_cast<size_t>(nb * nb), 0);
  for (int64_t q = 0; q < nb; ++q)
    for (int64_t k = 0; k <= q; ++k)
      blocks[static_cast<size_t>(q * nb + k)] = (q - k <= 1 || k == 0) ? 1 : 0;
  const std::string p = longseq::testing::temp_path("window_mask", "blocks.npy");
  longseq::core::write_npy(p, longseq::core::DType::u8, {nb, nb}, blocks.data());
  one.mask = "blocks:" + p + ":8";
  const Step base = train_step(one);
  EXPECT_GT(
      std::fabs(train_step(longseq::testing::tiny_config()).s.steps[0].loss - base.s.steps[0].loss),
      1e-5)
      << "the block mask changes the loss (the test can fail)";
  for (int world : {2, 4})
    for (const char* algo : {"ring", "burst"}) {
      tr::TrainConfig c = one;
      c.world = world;
      c.algo = algo;
      c.balance = "block-striped";
      expect_same(train_step(c), base,
                  std::string(algo) + " world " + std::to_string(world) + " block-striped");
    }
  std::remove(p.c_str());
}

TEST(TrainWindowMask, WindowWithDocumentsAndCheckpointPoliciesEqualWorldOne) {
  std::vector<std::string> docs;
  for (int i = 0; i < 12; ++i)
    docs.push_back(std::string(5 + 3 * i, static_cast<char>('a' + i)) + " end.");
  const std::string p = longseq::testing::temp_path("window_mask", "docs.tok");
  tr::write_token_file(p, tr::byte_tokenize(docs), tr::kByteVocab, tr::kByteEot);
  tr::TrainConfig one = longseq::testing::tiny_config();
  one.data = p;
  one.mask = "window:12,document";
  const Step base = train_step(one);
  tr::TrainConfig window_only = one;
  window_only.mask = "window:12";
  EXPECT_GT(std::fabs(train_step(window_only).s.steps[0].loss - base.s.steps[0].loss), 1e-5)
      << "the documents change the loss (the test can fail)";
  for (const char* policy : {"none", "full", "selective++", "seq-selective"})
    for (const char* balance : {"zigzag", "striped"}) {
      tr::TrainConfig c = one;
      c.world = 4;
      c.checkpoint = policy;
      c.balance = balance;
      expect_same(train_step(c), base, std::string(policy) + " " + balance);
    }
  std::remove(p.c_str());
}

TEST(TrainWindowMask, CheckpointCarriesTheWindowAndOddLengthsTrain) {
  const std::string dir = temp_path("window_mask", "run");
  fs::remove_all(dir);
  tr::TrainConfig c = longseq::testing::tiny_config();
  c.mask = "window:12";
  c.world = 2;
  c.out = dir;
  c.save_every = 0;
  (void)tr::train(c);
  const md::LlamaConfig saved = tr::read_hf_config(dir + "/checkpoint");
  EXPECT_EQ(saved.sliding_window, 12);
  const nlohmann::json metrics = nlohmann::json::parse(core::read_file(dir + "/metrics.json"));
  EXPECT_EQ(metrics["config"]["mask"], "window:12");
  fs::remove_all(dir);
  // A model with a sliding_window trains under it without --mask; a different window is refused.
  tr::TrainConfig m = longseq::testing::tiny_config();
  m.model.sliding_window = 12;
  EXPECT_EQ(m.mask_text(), "causal,window:12");
  m.mask = "window:8";
  const std::string e = longseq::testing::refusal(m);
  EXPECT_NE(e.find("model's sliding_window is 12"), std::string::npos) << e;
  // N = 1003 is odd and prime: no layout divides it; every layout pads internally.
  for (const char* balance : {"contiguous", "zigzag", "striped"}) {
    tr::TrainConfig o = longseq::testing::tiny_config();
    o.seq = 1003;
    o.world = 4;
    o.mask = "window:64";
    o.balance = balance;
    const tr::TrainSummary s = tr::train(o);
    ASSERT_EQ(s.steps.size(), 1u) << balance;
    EXPECT_TRUE(std::isfinite(s.steps[0].loss)) << balance;
  }
}

// ---- long-document data: the KJV books (scripts/kjv_books.sh) -----------------------------------

TEST(KjvBooks, DocumentIdsAreTheBooksOfTheFile) {
#ifndef LONGSEQ_CLI
  GTEST_SKIP() << "needs the longseq binary";
#else
  std::string out;
  if (longseq::testing::run("command -v bible", out) != 0)
    GTEST_SKIP() << "Debian's bible-kjv is not installed (scripts/setup.sh installs it)";
  const std::string tok = temp_path("window_mask", "kjv-books.tok");
  ASSERT_EQ(longseq::testing::run(std::string("LONGSEQ=") + LONGSEQ_CLI + " bash " +
                                      LONGSEQ_SOURCE_DIR + "/scripts/kjv_books.sh " + tok,
                                  out),
            0)
      << out;
  const tr::TokenFile f = tr::read_token_file(tok);
  ASSERT_EQ(f.eot, tr::kByteEot);
  std::vector<int64_t> starts = {0};  // where each book starts
  for (size_t i = 0; i < f.tokens.size(); ++i)
    if (f.tokens[i] == static_cast<uint32_t>(f.eot)) starts.push_back(static_cast<int64_t>(i) + 1);
  ASSERT_EQ(starts.size(), 67u);  // 66 books, each closed by an end-of-text
  EXPECT_EQ(starts.back(), static_cast<int64_t>(f.tokens.size()));
  auto text_at = [&](int64_t p, size_t len) {
    std::string t;
    for (size_t i = 0; i < len; ++i) t.push_back(static_cast<char>(f.tokens[p + i]));
    return t;
  };
  EXPECT_EQ(text_at(starts[0], 9), "Genesis 1");
  EXPECT_EQ(text_at(starts[1], 8), "Exodus 1");
  EXPECT_EQ(text_at(starts[65], 12), "Revelation 1");
  // The trainer's --mask document ids over 2^20-token sequences (the million preset's): a new id
  // exactly after each end-of-text, so every id is one book (or the part of it in the sequence).
  const int64_t n = int64_t{1} << 20;
  const tr::Loader loader(f, n);
  ASSERT_EQ(loader.num_sequences(), 4);
  int64_t boundaries = 0;
  for (int64_t s = 0; s < loader.num_sequences(); ++s) {
    const std::vector<int32_t> ids = loader.document_ids(s);
    ASSERT_EQ(static_cast<int64_t>(ids.size()), n);
    EXPECT_EQ(ids[0], 0);
    for (int64_t p = 1; p < n; ++p) {
      const bool after_eot = f.tokens[s * n + p - 1] == static_cast<uint32_t>(f.eot);
      ASSERT_EQ(ids[p] - ids[p - 1], after_eot ? 1 : 0) << "sequence " << s << " position " << p;
      boundaries += after_eot;
    }
  }
  // Every book start inside the four sequences (not at a sequence's first token) is a boundary.
  int64_t want = 0;
  for (size_t b = 1; b + 1 < starts.size(); ++b)
    if (starts[b] < 4 * n && starts[b] % n != 0) ++want;
  EXPECT_EQ(boundaries, want);
  EXPECT_GT(boundaries, 40);
  std::remove(tok.c_str());
#endif
}

// Brute-force windowed (and document) attention, one head: o [n, d], lse [n], and the gradients
// of sum(o * dout).
struct Brute {
  std::vector<double> o, lse, dq, dk, dv;
};
Brute brute(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
            const std::vector<float>& dout, int64_t n, int64_t d, int64_t w,
            const std::vector<int32_t>& docs) {
  Brute b;
  b.o.assign(n * d, 0);
  b.lse.assign(n, 0);
  b.dq.assign(n * d, 0);
  b.dk.assign(n * d, 0);
  b.dv.assign(n * d, 0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> s(w), p(w);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t lo = std::max<int64_t>(0, i - w + 1);
    int64_t cnt = 0;
    double mx = -1e300;
    for (int64_t j = lo; j <= i; ++j) {
      if (!docs.empty() && docs[j] != docs[i]) continue;
      double dot = 0;
      for (int64_t x = 0; x < d; ++x) dot += static_cast<double>(q[i * d + x]) * k[j * d + x];
      s[j - lo] = dot * scale;
      mx = std::max(mx, s[j - lo]);
      ++cnt;
    }
    double z = 0;
    for (int64_t j = lo; j <= i; ++j)
      if (docs.empty() || docs[j] == docs[i]) z += std::exp(s[j - lo] - mx);
    b.lse[i] = mx + std::log(z);
    double dsum = 0;  // D = sum_j p_j (dout . v_j)
    for (int64_t j = lo; j <= i; ++j) {
      if (!docs.empty() && docs[j] != docs[i]) continue;
      p[j - lo] = std::exp(s[j - lo] - b.lse[i]);
      double dv_dot = 0;
      for (int64_t x = 0; x < d; ++x) {
        b.o[i * d + x] += p[j - lo] * v[j * d + x];
        dv_dot += static_cast<double>(dout[i * d + x]) * v[j * d + x];
      }
      dsum += p[j - lo] * dv_dot;
      s[j - lo] = dv_dot;  // reuse: dP_ij
    }
    (void)cnt;
    for (int64_t j = lo; j <= i; ++j) {
      if (!docs.empty() && docs[j] != docs[i]) continue;
      const double ds = p[j - lo] * (s[j - lo] - dsum) * scale;
      for (int64_t x = 0; x < d; ++x) {
        b.dq[i * d + x] += ds * k[j * d + x];
        b.dk[j * d + x] += ds * q[i * d + x];
        b.dv[j * d + x] += p[j - lo] * dout[i * d + x];
      }
    }
  }
  return b;
}

TEST(WindowAttention64, PastTwoToThe31ScoreElementsEqualsBruteForce) {
  const int64_t n = int64_t{1} << 17, d = 2, w = 48;
  const int world = 2;
  ASSERT_GT(static_cast<double>(n) * n, 2147483648.0);
  std::vector<float> q(n * d), k(n * d), v(n * d), dout(n * d);
  longseq::core::fill_normal(q.data(), q.size(), 11);
  longseq::core::fill_normal(k.data(), k.size(), 12);
  longseq::core::fill_normal(v.data(), v.size(), 13);
  longseq::core::fill_normal(dout.data(), dout.size(), 14);
  // Documents of uneven lengths for the second call (set_mask).
  std::vector<int32_t> docs(n);
  for (int64_t i = 0, doc = 0; i < n; ++i) {
    if (i > 0 && i % 40000 == 7) ++doc;
    docs[i] = static_cast<int32_t>(doc);
  }
  const md::TrainMask tm = md::TrainMask::parse("window:" + std::to_string(w), n);
  for (const char* balance : {"contiguous", "zigzag"}) {
    const at::Layout layout(at::parse_balance(balance), n, world);
    const int64_t l = layout.local_len();
    std::vector<float> o(n * d), lse(n), dq(n * d), dk(n * d), dv(n * d);
    std::vector<float> o2(n * d), dq2(n * d);
    longseq::comm::Options opt;
    opt.backend = "local";
    opt.world = world;
    longseq::comm::run(opt, [&](longseq::comm::Group& g) {
      const int r = g.rank();
      auto local = [&](const std::vector<float>& x) {
        longseq::core::Tensor<float> t(longseq::core::Shape{l, 1, d});
        layout.shard(x.data(), d, r, t.data());
        return t;
      };
      const auto lq = local(q), lk = local(k), lv = local(v), ldo = local(dout);
      auto op = md::make_distributed_attention(longseq::attention::Algorithm::parse("burst"),
                                               tm.base, layout, g, 1);
      const at::AttentionSaved s = op->forward(lq.view(), lk.view(), lv.view());
      const at::AttentionGrads gr = op->backward(ldo.view(), s);
      layout.unshard(s.o.data(), d, r, o.data());
      layout.unshard(s.lse.data(), 1, r, lse.data());
      layout.unshard(gr.dq.data(), d, r, dq.data());
      layout.unshard(gr.dk.data(), d, r, dk.data());
      layout.unshard(gr.dv.data(), d, r, dv.data());
      op->set_mask(tm.with_documents(docs));
      const at::AttentionSaved s2 = op->forward(lq.view(), lk.view(), lv.view());
      const at::AttentionGrads g2 = op->backward(ldo.view(), s2);
      layout.unshard(s2.o.data(), d, r, o2.data());
      layout.unshard(g2.dq.data(), d, r, dq2.data());
    });
    const Brute b = brute(q, k, v, dout, n, d, w, {});
    const Brute b2 = brute(q, k, v, dout, n, d, w, docs);
    auto worst = [](const std::vector<float>& got, const std::vector<double>& want) {
      double e = 0;
      for (size_t i = 0; i < got.size(); ++i)
        e = std::max(e, std::fabs(got[i] - want[i]) / (1 + std::fabs(want[i])));
      return e;
    };
    EXPECT_LT(worst(o, b.o), 1e-4) << balance;
    EXPECT_LT(worst(lse, b.lse), 1e-4) << balance;
    EXPECT_LT(worst(dq, b.dq), 1e-4) << balance;
    EXPECT_LT(worst(dk, b.dk), 1e-4) << balance;
    EXPECT_LT(worst(dv, b.dv), 1e-4) << balance;
    EXPECT_LT(worst(o2, b2.o), 1e-4) << balance << " with documents";
    EXPECT_LT(worst(dq2, b2.dq), 1e-4) << balance << " with documents";
    // The documents change the answer where a window crosses a boundary (the test can fail).
    EXPECT_GT(worst(o2, b.o), 1e-3) << balance;
  }
}

}  // namespace
