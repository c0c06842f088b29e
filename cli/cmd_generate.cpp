// `longseq generate`: a continuation of a prompt from a checkpoint, with the prompt's prefill on
// the distributed engine and the KV cache sharded across the ranks
// (src/longseq/train/generate.hpp).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/io.hpp"
#include "longseq/tokenizer/bpe.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/data.hpp"
#include "longseq/train/eval.hpp"
#include "longseq/train/generate.hpp"
#include "table_flags.hpp"

namespace longseq::cli {

namespace {
struct GenerateArgs {
  train::GenerateConfig cfg;
  std::string prompt, tokenizer, prompt_ids, stats;
  bool json = false, stop_at_eot = false;
};

// Encodes the prompt with the checkpoint's tokenizer (or --tokenizer, else bytes), generates, and
// decodes the new tokens. The tokenizer stays with the command: the library takes token ids.
struct Generated {
  train::GenerateResult result;
  std::string text;
};

Generated generate_text(const GenerateArgs& a, train::GenerateConfig& cfg) {
  core::require(!cfg.checkpoint.empty(), "generate", "--checkpoint-dir is required");
  core::require(a.prompt.empty() != a.prompt_ids.empty(), "generate",
                "give exactly one of --prompt TEXT and --prompt-ids FILE");
  const std::string dir = train::resolve_checkpoint(cfg.checkpoint);
  std::string tok_path = a.tokenizer;
  if (tok_path.empty() && std::filesystem::exists(dir + "/tokenizer.json"))
    tok_path = dir + "/tokenizer.json";
  std::optional<tokenizer::BpeTokenizer> bpe;
  if (!tok_path.empty()) bpe.emplace(tokenizer::BpeTokenizer::load(tok_path));
  if (!a.prompt.empty()) {
    std::vector<uint32_t> ids = bpe ? bpe->encode(a.prompt) : train::byte_tokenize({a.prompt});
    if (!bpe) ids.pop_back();  // byte_tokenize ends every document with end-of-text
    cfg.prompt.assign(ids.begin(), ids.end());
  } else {
    cfg.prompt = train::read_prompt_ids(a.prompt_ids);
  }
  if (a.stop_at_eot) cfg.stop_token = bpe ? static_cast<int32_t>(bpe->eos_id()) : train::kByteEot;
  Generated g{train::generate(cfg), ""};
  const std::vector<uint32_t> out(g.result.ids.begin(), g.result.ids.end());
  if (bpe) {
    g.text = bpe->decode(out);
  } else if (train::read_hf_config(dir).vocab == train::kByteVocab) {
    g.text = train::byte_detokenize(out);
  } else {
    // Neither a tokenizer nor the byte vocabulary (e.g. the copy task's ids): the ids themselves,
    // not bytes they are not.
    for (size_t i = 0; i < out.size(); ++i) g.text += (i ? " " : "") + std::to_string(out[i]);
  }
  return g;
}

int run_generate(const GenerateArgs& a) {
  train::GenerateConfig cfg = a.cfg;
  const Generated g = generate_text(a, cfg);
  if (comm::launcher_rank() != 0) return 0;
  const train::GenerateResult& r = g.result;
  const std::string& text = g.text;
  if (a.json) {
    // Exactly the Contract's keys (issue 16): timings go to --stats FILE.
    const nlohmann::json j = {{"prompt_tokens", r.prompt_tokens}, {"ids", r.ids}, {"text", text}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s\n", text.c_str());
  }
  if (!a.stats.empty()) {
    const nlohmann::json st = {{"prompt_tokens", r.prompt_tokens},
                               {"new_tokens", r.ids.size()},
                               {"world", cfg.world},
                               {"algo", cfg.algo},
                               {"balance", cfg.balance},
                               {"threads_per_rank", r.threads_per_rank},
                               {"precision", cfg.precision},
                               {"device", r.device},
                               {"prefill_s", r.prefill_s},
                               {"decode_s", r.decode_s},
                               {"prefill_tokens_per_s", r.prefill_tokens_per_s()},
                               {"decode_tokens_per_s", r.decode_tokens_per_s()}};
    core::write_file_atomic(a.stats, st.dump(1) + "\n");
  }
  return 0;
}

}  // namespace

std::function<int()> add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  add_checkpoint_dir(app, a->cfg.checkpoint, "generate");
  app.add_option("--prompt", a->prompt, "prompt text (the checkpoint's tokenizer)");
  app.add_option("--tokenizer", a->tokenizer,
                 "tokenizer.json (default: the checkpoint's tokenizer.json, else byte-level)");
  app.add_option(
      "--prompt-ids", a->prompt_ids,
      "file of prompt token ids: a token file, or integers (whitespace, commas, a JSON array)");
  app.add_option("--max-new-tokens", a->cfg.max_new_tokens, "tokens to generate");
  add_world_row(app, a->cfg.world);             // the prefill's ranks; the KV cache's shards
  add_row(app, core::rows::algo, a->cfg.algo);  // of the prefill
  add_row(app, core::rows::balance, a->cfg.balance);
  app.add_option("--temperature", a->cfg.temperature,
                 "0: greedy; > 0: sampling at this temperature");
  app.add_option("--top-p", a->cfg.top_p, "nucleus sampling mass (1: all tokens)");
  app.add_option("--seed", a->cfg.seed, "sampling seed");
  add_row(app, core::rows::threads, a->cfg.threads);
  add_row(app, core::rows::precision, a->cfg.precision);
  add_row(app, core::rows::device, a->cfg.device);
  app.add_flag("--stop-at-eot", a->stop_at_eot, "stop after the tokenizer's end-of-text token");
  app.add_flag("--json", a->json,
               "print {\"prompt_tokens\", \"ids\", \"text\"} (one line) instead of the text");
  app.add_option("--stats", a->stats,
                 "also write FILE: JSON with the run's settings and prefill / decode tokens/s");
  return [a] { return run_generate(*a); };
}

}  // namespace longseq::cli
