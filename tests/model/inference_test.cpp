// The forward of inference and evaluation (model::forward_hidden, transformer.hpp: the training
// forward's own block code through model::Kernels) and model::token_losses, run on the CPU,
// against the host-only layer loop inference ran before issue 27 (host_forward.hpp): the hidden
// states, every layer's KV cache and every token's loss bit for bit (memcmp), under fp32 and bf16,
// tied and untied models, and worlds 1, 2 and 3 of the distributed attention (padding rows
// included: 45 tokens do not fill a zigzag layout of 2 or a striped one of 3). Bit-exactness holds
// because on the CPU both run the same kernel call on the same values at every step; anything
// else (a product accumulated in another order, a norm of another tensor) moves the last bits.
#include "longseq/model/inference.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "device_step.hpp"
#include "host_forward.hpp"
#include "longseq/attention/algorithm.hpp"
#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/model/kernels.hpp"

namespace {

namespace lm = longseq::model;
namespace ts = longseq::test;
using longseq::attention::Algorithm;
using longseq::attention::Layout;
using longseq::core::DType;

// The first index where a and b differ in their bits, or -1 (NaN == NaN when its bits are).
template <class T>
int64_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<int64_t>(i);
  return -1;
}

struct RankOut {
  std::vector<float> hidden, hidden_host;
  std::vector<double> loss, loss_host;
  lm::KvCache cache, cache_host;
};

TEST(InferenceForward, IsTheHostLayerLoopBitForBit) {
  const int64_t n = 45;
  for (int variant : {0, 1})
    for (DType precision : {DType::f32, DType::bf16})
      for (const auto& [world, balance, algo] :
           {std::tuple{1, "contiguous", "burst"}, std::tuple{2, "zigzag", "burst"},
            std::tuple{3, "striped", "ring"}}) {
        const lm::LlamaConfig cfg = ts::tiny_llama(variant);
        const lm::ParamLayout layout(cfg);
        const std::vector<std::vector<float>> units = ts::initial_units(layout, 5 + variant);
        std::vector<int32_t> tokens(static_cast<size_t>(n + 1));
        longseq::core::fill_randint(tokens.data(), tokens.size(), 9 + variant,
                                    static_cast<int32_t>(cfg.vocab));
        const Layout lay(longseq::attention::parse_balance(balance), n, world);
        auto mask = std::make_shared<longseq::attention::MaskSpec>();
        mask->causal = true;
        lm::InferenceOptions io;
        io.threads = 2;
        io.precision = precision;
        io.ffn_chunk = 16;  // 45 tokens: three chunks, the last short
        std::vector<RankOut> out(static_cast<size_t>(world));
        longseq::comm::Options o;
        o.world = world;
        longseq::comm::run(o, [&](longseq::comm::Group& g) {
          lm::ReplicaParams params(layout, units);
          auto attn = lm::make_distributed_attention(Algorithm::parse(algo), mask, lay, g,
                                                     io.threads, precision);
          const std::vector<int64_t> pos = lay.positions(g.rank());
          std::vector<int32_t> tok, lab;
          for (int64_t p : pos) {
            tok.push_back(p >= 0 ? tokens[p] : 0);
            lab.push_back(p >= 0 && p + 1 < n ? tokens[p + 1] : lm::kIgnoreIndex);
          }
          lm::StepBatch b;
          b.tokens = tok.data();
          b.pos = pos.data();
          b.len = static_cast<int64_t>(pos.size());
          b.seq_len = n;
          RankOut& r = out[static_cast<size_t>(g.rank())];
          r.hidden = lm::forward_hidden(layout, params, *attn, b, io, &r.cache);
          r.hidden_host = ts::host_forward_hidden(layout, params, *attn, b, io, &r.cache_host);
          r.loss = lm::token_losses(layout, params, r.hidden.data(), lab.data(), b.len, io,
                                    lm::CpuKernels(io.threads));
          r.loss_host =
              ts::host_token_losses(layout, params, r.hidden.data(), lab.data(), b.len, io);
        });
        const std::string what = std::string(balance) + " world " + std::to_string(world) +
                                 (precision == DType::bf16 ? " bf16" : " f32") + " variant " +
                                 std::to_string(variant);
        for (int rank = 0; rank < world; ++rank) {
          const RankOut& r = out[static_cast<size_t>(rank)];
          const std::string at = what + " rank " + std::to_string(rank);
          ASSERT_EQ(r.hidden.size(), static_cast<size_t>(lay.local_len() * cfg.hidden)) << at;
          EXPECT_EQ(first_difference(r.hidden, r.hidden_host), -1) << at;
          EXPECT_EQ(first_difference(r.loss, r.loss_host), -1) << at;
          EXPECT_EQ(r.cache.pos, r.cache_host.pos) << at;
          ASSERT_EQ(r.cache.k.size(), static_cast<size_t>(cfg.layers)) << at;
          for (int64_t l = 0; l < cfg.layers; ++l) {
            EXPECT_FALSE(r.cache.k[l].empty()) << at;
            EXPECT_EQ(first_difference(r.cache.k[l], r.cache_host.k[l]), -1)
                << at << " layer " << l;
            EXPECT_EQ(first_difference(r.cache.v[l], r.cache_host.v[l]), -1)
                << at << " layer " << l;
          }
          // Padding rows come out zero (their norm of zero is zero).
          const std::vector<int64_t> pos = lay.positions(rank);
          for (size_t i = 0; i < pos.size(); ++i) {
            if (pos[i] >= 0) continue;
            for (int64_t j = 0; j < cfg.hidden; ++j) {
              ASSERT_EQ(r.hidden[i * cfg.hidden + j], 0.0f) << at << " padding row " << i;
            }
          }
        }
      }
}

}  // namespace

// Generation on a device (issue 27): the prefill with its KV cache (model::prefill) and each
// decode step (model::decode_step through model::Kernels) and the logits (model::logits_of), run
// with the CPU as the device, against the host-only decode generate ran before its --device
// (host_forward.hpp host_decode_step, host_logits): every step's hidden state, logits and the
// whole cache bit for bit, over worlds 1, 2 and 3 (the cache sharded round-robin, the partials
// merged), GQA 4/2 and 2/1, fp32 and bf16, with and without a sliding window shorter than the
// sequence. Each path feeds itself its own greedy tokens, so a difference anywhere shows.
TEST(InferenceDecode, IsTheHostDecodeBitForBit) {
  const int64_t n = 29, steps = 6;
  for (int variant : {0, 1})
    for (DType precision : {DType::f32, DType::bf16})
      for (int64_t window : {int64_t{0}, int64_t{11}})
        for (const auto& [world, balance] :
             {std::tuple{1, "contiguous"}, std::tuple{2, "zigzag"}, std::tuple{3, "striped"}}) {
          lm::LlamaConfig cfg = ts::tiny_llama(variant);
          cfg.sliding_window = window;
          const lm::ParamLayout layout(cfg);
          const std::vector<std::vector<float>> units = ts::initial_units(layout, 7 + variant);
          std::vector<int32_t> prompt(static_cast<size_t>(n));
          longseq::core::fill_randint(prompt.data(), prompt.size(), 3 + variant,
                                      static_cast<int32_t>(cfg.vocab));
          const Layout lay(longseq::attention::parse_balance(balance), n, world);
          auto mask = std::make_shared<longseq::attention::MaskSpec>();
          mask->causal = true;
          mask->window = window;
          lm::InferenceOptions io;
          io.threads = 2;
          io.precision = precision;
          io.ffn_chunk = 16;
          const std::string what = std::string(balance) + " world " + std::to_string(world) +
                                   (precision == DType::bf16 ? " bf16" : " f32") + " variant " +
                                   std::to_string(variant) + " window " + std::to_string(window);
          std::vector<std::string> failures(static_cast<size_t>(world));
          longseq::comm::Options o;
          o.world = world;
          longseq::comm::run(o, [&](longseq::comm::Group& g) {
            lm::ReplicaParams params(layout, units);
            const lm::CpuKernels kernels(io.threads);
            auto attn = lm::make_distributed_attention(Algorithm::parse("burst"), mask, lay, g,
                                                       io.threads, precision);
            const std::vector<int64_t> pos = lay.positions(g.rank());
            std::vector<int32_t> tok;
            for (int64_t p : pos) tok.push_back(p >= 0 ? prompt[p] : 0);
            lm::StepBatch b;
            b.tokens = tok.data();
            b.pos = pos.data();
            b.len = static_cast<int64_t>(pos.size());
            b.seq_len = n;
            lm::KvCache cache, cache_host;
            const longseq::core::Tensor<float> h =
                lm::prefill(layout, params, *attn, b, io, kernels, cache);
            const std::vector<float> h_host =
                ts::host_forward_hidden(layout, params, *attn, b, io, &cache_host);
            std::string& fail = failures[static_cast<size_t>(g.rank())];
            auto check = [&](const std::vector<float>& a, const std::vector<float>& e,
                             const std::string& at) {
              if (fail.empty() && first_difference(a, e) != -1)
                fail = at + ": differs at " + std::to_string(first_difference(a, e));
            };
            check(std::vector<float>(h.data(), h.data() + h.numel()), h_host, "prefill hidden");
            // The last prompt position's logits (on the rank holding it), broadcast as generate.
            const auto [owner, local] = lay.locate(n - 1);
            int32_t next = 0, next_host = 0;
            if (g.rank() == owner) {
              const std::vector<float> z =
                  lm::logits_of(layout, params, h.data() + local * cfg.hidden, io, kernels);
              const std::vector<float> z_host =
                  ts::host_logits(layout, params, h_host.data() + local * cfg.hidden, io);
              check(z, z_host, "prefill logits");
              next = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
              next_host = static_cast<int32_t>(std::max_element(z_host.begin(), z_host.end()) -
                                               z_host.begin());
            }
            g.broadcast(&next, 1, DType::i32, owner);
            g.broadcast(&next_host, 1, DType::i32, owner);
            for (int64_t i = 0; i < steps; ++i) {
              const int64_t p = n + i;
              const bool keep = p % world == g.rank();
              const longseq::core::Tensor<float> hd =
                  lm::decode_step(layout, params, g, cache, next, p, keep, io, kernels);
              const std::vector<float> hd_host =
                  ts::host_decode_step(layout, params, g, cache_host, next_host, p, keep, io);
              const std::string at = "step " + std::to_string(i);
              check(std::vector<float>(hd.data(), hd.data() + hd.numel()), hd_host, at + " hidden");
              const std::vector<float> z = lm::logits_of(layout, params, hd.data(), io, kernels);
              const std::vector<float> z_host = ts::host_logits(layout, params, hd_host.data(), io);
              check(z, z_host, at + " logits");
              next = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
              next_host = static_cast<int32_t>(std::max_element(z_host.begin(), z_host.end()) -
                                               z_host.begin());
            }
            if (cache.pos != cache_host.pos && fail.empty()) fail = "cache positions differ";
            for (int64_t l = 0; l < cfg.layers; ++l) {
              check(cache.k[l], cache_host.k[l], "cache k layer " + std::to_string(l));
              check(cache.v[l], cache_host.v[l], "cache v layer " + std::to_string(l));
            }
          });
          for (int rank = 0; rank < world; ++rank)
            EXPECT_EQ(failures[static_cast<size_t>(rank)], "") << what << " rank " << rank;
        }
}
