#include "longseq/plan/model_config.hpp"

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "longseq/core/error.hpp"

namespace longseq::plan {

namespace {

model::LlamaConfig shapes(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads,
                          int64_t head_dim, int64_t intermediate, int64_t vocab) {
  model::LlamaConfig c;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.intermediate = intermediate;
  c.vocab = vocab;
  c.tied_embeddings = false;
  return c;
}

}  // namespace

NamedModel load_model(std::string_view name_or_file) {
  NamedModel m;
  if (name_or_file == "llama-7b") {
    // BurstEngine §4.1: 32 layers, 32 heads, 4096 dimensions, 32K vocabulary (LLaMA-2 7B shapes).
    m = {"llama-7b", shapes(32, 4096, 32, 32, 128, 11008, 32000)};
  } else if (name_or_file == "llama-14b") {
    // BurstEngine §4.1: 40 layers, 40 heads, 5120 dimensions, 120K vocabulary. The intermediate
    // size is not given; 13824 is LLaMA-2 13B's (the same 5120 x 40 block).
    m = {"llama-14b", shapes(40, 5120, 40, 40, 128, 13824, 120000)};
  } else {
    std::ifstream in{std::string(name_or_file)};
    core::require(static_cast<bool>(in), "plan", "--model '", name_or_file,
                  "': not a preset (llama-7b, llama-14b) and not a readable JSON file");
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
      core::fail("plan", "--model '", name_or_file, "' is not valid JSON: ", e.what());
    }
    auto get = [&](const char* key) -> int64_t {
      core::require(j.contains(key) && j[key].is_number_integer(), "plan", "--model '",
                    name_or_file, "': missing or non-integer field '", key, "'");
      return j[key].get<int64_t>();
    };
    m.name = j.contains("name") && j["name"].is_string() ? j["name"].get<std::string>()
                                                         : std::string(name_or_file);
    const int64_t heads = get("heads"), hidden = get("hidden");
    m.config =
        shapes(get("layers"), hidden, heads, j.contains("kv_heads") ? get("kv_heads") : heads,
               j.contains("head_dim") ? get("head_dim") : (heads > 0 ? hidden / heads : 0),
               get("intermediate"), get("vocab"));
    if (j.contains("tied_embeddings")) {
      core::require(j["tied_embeddings"].is_boolean(), "plan", "--model '", name_or_file,
                    "': field 'tied_embeddings' must be true or false");
      m.config.tied_embeddings = j["tied_embeddings"].get<bool>();
    }
  }
  m.config.validate();
  return m;
}

int64_t parse_count(std::string_view text, std::string_view flag) {
  std::string s(text);
  int64_t mult = 1;
  if (!s.empty()) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
    if (c == 'K' || c == 'M' || c == 'G') {
      mult = c == 'K' ? (1LL << 10) : c == 'M' ? (1LL << 20) : (1LL << 30);
      s.pop_back();
    }
  }
  bool ok = !s.empty();
  for (char c : s) ok = ok && std::isdigit(static_cast<unsigned char>(c));
  core::require(ok && s.size() < 12, "plan", flag, " '", text,
                "' is not a count (expected e.g. 65536, 32K, 1M)");
  const int64_t v = std::stoll(s) * mult;
  core::require(v > 0, "plan", flag, " '", text, "' must be > 0");
  return v;
}

}  // namespace longseq::plan
