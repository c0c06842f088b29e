#include "longseq/train/generate.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/core/threads.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/model/inference.hpp"
#include "longseq/model/kernels.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/config.hpp"
#include "longseq/train/data.hpp"
#include "longseq/train/device.hpp"
#include "longseq/train/eval.hpp"

namespace longseq::train {

GenerateConfig::Parsed GenerateConfig::parse() const {
  core::require(!prompt.empty(), "generate", "the prompt is empty (give --prompt or --prompt-ids)");
  core::require(max_new_tokens >= 1, "generate", "--max-new-tokens ", max_new_tokens,
                " must be >= 1");
  core::require(world >= 1, "generate", "--world ", world, " must be >= 1");
  core::require(temperature >= 0 && std::isfinite(temperature), "generate", "--temperature ",
                temperature, " must be >= 0 (0: greedy)");
  core::require(top_p > 0 && top_p <= 1, "generate", "--top-p ", top_p, " must be in (0, 1]");
  core::require(threads >= 0, "generate", "--threads ", threads, " must be >= 0");
  Parsed p;
  p.algo = attention::Algorithm::parse(algo);
  p.balance = parse_balance_flag("generate", balance);
  core::require(p.balance != attention::Balance::block_striped, "generate", "--balance ", balance,
                " is for block masks; the prefill is causal: use contiguous | zigzag | striped");
  p.precision = parse_precision(precision);
  p.device = parse_shared_device("generate", device, world);
  return p;
}

int32_t sample_token(const std::vector<float>& logits, double temperature, double top_p,
                     uint64_t seed, int64_t i) {
  core::require(temperature >= 0, "generate", "--temperature ", temperature, " must be >= 0");
  core::require(top_p > 0 && top_p <= 1, "generate", "--top-p ", top_p, " must be in (0, 1]");
  core::require(!logits.empty(), "generate", "no logits to sample from");
  if (temperature == 0) {  // greedy: the first maximum
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const double m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double total = 0;
  for (size_t j = 0; j < p.size(); ++j) total += p[j] = std::exp((logits[j] - m) / temperature);
  std::vector<int32_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  // The nucleus: the most probable tokens until their mass reaches top_p (at least one).
  double mass = 0;
  size_t keep = 0;
  while (keep < order.size() && (keep == 0 || mass < top_p * total)) mass += p[order[keep++]];
  const double u =
      core::uniform01(core::derive_seed(seed, 0x67656e), static_cast<uint64_t>(i)) * mass;
  double acc = 0;
  for (size_t k = 0; k < keep; ++k) {
    acc += p[order[k]];
    if (u < acc) return order[k];
  }
  return order[keep - 1];
}

std::vector<int32_t> read_prompt_ids(const std::string& path) {
  std::error_code ec;
  core::require(std::filesystem::is_regular_file(path, ec), "generate", "--prompt-ids ", path,
                ": no such file");
  const std::string text = core::read_file(path);
  if (text.size() >= 4) {
    int32_t magic = 0;
    std::memcpy(&magic, text.data(), 4);
    if (magic == kTokenMagic) {
      const TokenFile f = read_token_file(path);
      return std::vector<int32_t>(f.tokens.begin(), f.tokens.end());
    }
  }
  std::vector<int32_t> ids;
  std::string num;
  auto flush = [&] {
    if (num.empty()) return;
    try {
      size_t used = 0;
      const long long v = std::stoll(num, &used);
      core::require(used == num.size() && v >= 0 && v <= INT32_MAX, "generate", path,
                    ": token id '", num, "' is not an id in [0, 2^31)");
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::logic_error&) {
      core::fail("generate", path, ": '", num, "' is not a token id");
    }
    num.clear();
  };
  for (char ch : text) {
    if (std::isspace(static_cast<unsigned char>(ch)) || ch == ',' || ch == '[' || ch == ']')
      flush();
    else
      num += ch;
  }
  flush();
  core::require(!ids.empty(), "generate", path, ": no token ids in it");
  return ids;
}

namespace {

// What every rank of one generation shares, decided before the ranks start.
struct GeneratePass {
  const GenerateConfig& cfg;
  const std::string& dir;
  core::Device device;
  const model::ParamLayout& layout;
  const attention::Algorithm& algo;
  const attention::Layout& seq_layout;
  std::shared_ptr<const attention::MaskSpec> mask;
  model::InferenceOptions io;
};

// One rank's part: the distributed prefill of the prompt (the first token sampled by the rank
// holding the last position, then broadcast), then KV-cache decoding. Collective; every rank
// returns the same ids, rank 0's timings are the result's. The model runs on --device through
// model::Kernels (the CPU's, or a GPU's: above world 1 the ranks share it), the cache on the host.
GenerateResult generate_on_rank(const GeneratePass& e, comm::Group& g) {
  const GenerateConfig& cfg = e.cfg;
  const int64_t n = static_cast<int64_t>(cfg.prompt.size());
  // Made on this thread: a GPU's kernels make it current on the thread that runs them.
  const std::unique_ptr<model::Kernels> kernels =
      device_kernels(e.device, e.io.threads, "generate");
  model::ReplicaParams params = load_replica(e.dir, e.layout, g, e.device);
  const int rank = g.rank(), world = g.size();
  std::vector<int64_t> pos = e.seq_layout.positions(rank);
  std::vector<int32_t> tokens(pos.size(), 0);
  for (size_t i = 0; i < pos.size(); ++i)
    if (pos[i] >= 0) tokens[i] = cfg.prompt[static_cast<size_t>(pos[i])];
  auto attn = device_attention(e.device, e.algo, e.mask, e.seq_layout, g, e.io.threads,
                               e.io.precision, "generate");
  model::StepBatch b;
  b.tokens = tokens.data();
  b.pos = pos.data();
  b.len = static_cast<int64_t>(pos.size());
  b.seq_len = n;
  g.barrier();
  core::Timer prefill;
  model::KvCache cache;
  const core::Tensor<float> h = model::prefill(e.layout, params, *attn, b, e.io, *kernels, cache);
  const auto [owner, local] = e.seq_layout.locate(n - 1);
  int32_t tok = 0;
  if (rank == owner)
    tok =
        sample_token(model::logits_of(e.layout, params, h.data() + local * e.layout.config().hidden,
                                      e.io, *kernels),
                     cfg.temperature, cfg.top_p, cfg.seed, 0);
  g.broadcast(&tok, 1, core::DType::i32, owner);
  GenerateResult r;
  r.prefill_s = prefill.elapsed();
  r.ids = {tok};
  core::Timer decode;
  for (int64_t i = 1; i < cfg.max_new_tokens && tok != cfg.stop_token; ++i) {
    const int64_t p = n + i - 1;
    const core::Tensor<float> hid =
        model::decode_step(e.layout, params, g, cache, tok, p, p % world == rank, e.io, *kernels);
    tok = sample_token(model::logits_of(e.layout, params, hid.data(), e.io, *kernels),
                       cfg.temperature, cfg.top_p, cfg.seed, i);
    r.ids.push_back(tok);
  }
  r.decode_s = decode.elapsed();
  return r;
}

}  // namespace

GenerateResult generate(const GenerateConfig& cfg) {
  const GenerateConfig::Parsed parsed = cfg.parse();
  // A GPU this build or machine lacks is refused here, naming it, before anything is read.
  if (!parsed.device.is_cpu()) (void)device_kernels(parsed.device, 1, "generate");
  const std::string dir = resolve_checkpoint(cfg.checkpoint);
  const model::LlamaConfig mc = read_hf_config(dir);
  const model::ParamLayout layout(mc);
  for (int32_t t : cfg.prompt)
    core::require(t >= 0 && t < mc.vocab, "generate", "prompt token ", t,
                  " is outside the model's vocabulary [0, ", mc.vocab, ")");
  const int64_t n = static_cast<int64_t>(cfg.prompt.size());
  parse_algo_flag("generate", cfg.algo, cfg.world, mc.heads, mc.kv_heads);
  const attention::Layout seq_layout(parsed.balance, n, cfg.world);
  auto mask = std::make_shared<attention::MaskSpec>();
  mask->causal = true;
  mask->window = mc.sliding_window;
  GeneratePass e{cfg, dir, parsed.device, layout, parsed.algo, seq_layout, mask, {}};
  e.io.threads = core::default_threads(cfg.threads, cfg.world);
  e.io.precision = parsed.precision;

  GenerateResult result;
  comm::Options opt;
  opt.world = cfg.world;
  comm::run(opt, [&](comm::Group& g) {
    GenerateResult r = generate_on_rank(e, g);
    if (g.rank() == 0) result = std::move(r);
  });
  result.prompt_tokens = n;
  result.threads_per_rank = e.io.threads;
  result.device = parsed.device.str();
  return result;
}

}  // namespace longseq::train
