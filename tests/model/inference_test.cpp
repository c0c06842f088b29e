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
        std::vector<std::vector<float>> units;
        for (int u = 0; u < layout.num_units(); ++u) {
          units.emplace_back(static_cast<size_t>(layout.units()[u].size));
          lm::init_unit(layout, u, 5 + variant, units.back().data());
        }
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
