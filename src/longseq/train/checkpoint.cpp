#include "longseq/train/checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/safetensors.hpp"

namespace longseq::train {

namespace fs = std::filesystem;

namespace {

// "[a, b]" for a shape read from a user's file (any rank).
std::string dims_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

nlohmann::json read_json(const std::string& path) {
  try {
    return nlohmann::json::parse(core::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    core::fail("train", path, ": malformed JSON: ", e.what());
  }
}

}  // namespace

nlohmann::json hf_config(const model::LlamaConfig& c) {
  // A sliding window is written as Mistral: the same weights, names and blocks as LLaMA, and the
  // architecture whose attention applies `sliding_window` in transformers (LlamaForCausalLM
  // ignores the key, so a windowed model saved as llama would load as full-causal there).
  const bool window = c.sliding_window > 0;
  nlohmann::json j = {{"architectures", {window ? "MistralForCausalLM" : "LlamaForCausalLM"}},
          {"model_type", window ? "mistral" : "llama"},
          {"hidden_size", c.hidden},
          {"intermediate_size", c.intermediate},
          {"num_hidden_layers", c.layers},
          {"num_attention_heads", c.heads},
          {"num_key_value_heads", c.kv_heads},
          {"head_dim", c.head_dim},
          {"vocab_size", c.vocab},
          {"rope_theta", c.rope_theta},
          {"rms_norm_eps", c.norm_eps},
          {"tie_word_embeddings", c.tied_embeddings},
          {"hidden_act", "silu"},
          {"torch_dtype", "float32"}};
  if (window) j["sliding_window"] = c.sliding_window;
  // Written only when set, so that checkpoints from before RoPE scaling still resume.
  if (c.max_position_embeddings > 0) j["max_position_embeddings"] = c.max_position_embeddings;
  if (c.rope_scaling.enabled()) j["rope_scaling"] = c.rope_scaling.to_json();
  return j;
}

void save_checkpoint(const std::string& dir, ShardedState& state, const nlohmann::json& trainer_state,
                     bool writer) {
  const model::ParamLayout& layout = state.layout();
  // Gather everything first (collective on every rank), then only the writer touches files.
  std::vector<std::vector<float>> full[3];
  for (int which = 0; which < 3; ++which)
    for (int u = 0; u < layout.num_units(); ++u) full[which].push_back(state.gather_full(u, which));
  if (!writer) return;
  const std::string tmp = dir + "/checkpoint.tmp", cur = dir + "/checkpoint",
                    old = dir + "/checkpoint.old";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  core::require(!ec, "train", "cannot create ", tmp, ": ", ec.message());
  std::vector<core::SafeTensorRef> model_t, opt_t;
  for (int u = 0; u < layout.num_units(); ++u)
    for (const auto& t : layout.units()[u].tensors) {
      model_t.push_back({t.name, core::DType::f32, t.shape, full[0][u].data() + t.offset});
      opt_t.push_back({"exp_avg." + t.name, core::DType::f32, t.shape, full[1][u].data() + t.offset});
      opt_t.push_back({"exp_avg_sq." + t.name, core::DType::f32, t.shape, full[2][u].data() + t.offset});
    }
  core::write_safetensors(tmp + "/model.safetensors", model_t, {{"format", "pt"}});
  core::write_safetensors(tmp + "/optimizer.safetensors", opt_t, {{"format", "pt"}});
  core::write_file_atomic(tmp + "/config.json", hf_config(layout.config()).dump(2) + "\n");
  core::write_file_atomic(tmp + "/trainer_state.json", trainer_state.dump(2) + "\n");
  fs::remove_all(old, ec);
  if (fs::exists(cur)) {
    fs::rename(cur, old, ec);
    core::require(!ec, "train", "cannot move ", cur, " to ", old, ": ", ec.message());
  }
  fs::rename(tmp, cur, ec);
  core::require(!ec, "train", "cannot move ", tmp, " to ", cur, ": ", ec.message());
  fs::remove_all(old, ec);
}

nlohmann::json load_checkpoint(const std::string& dir, ShardedState& state) {
  std::string ck = dir + "/checkpoint";
  if (!fs::exists(ck + "/trainer_state.json")) ck = dir + "/checkpoint.old";
  core::require(fs::exists(ck + "/trainer_state.json"), "train", "--resume ", dir,
                ": no checkpoint/trainer_state.json (nor checkpoint.old/) in it");
  const nlohmann::json ts = read_json(ck + "/trainer_state.json");
  const model::ParamLayout& layout = state.layout();
  const nlohmann::json want = hf_config(layout.config());
  const nlohmann::json have = read_json(ck + "/config.json");
  for (auto it = want.begin(); it != want.end(); ++it)
    core::require(have.contains(it.key()) && have[it.key()] == it.value(), "train", "--resume ", ck,
                  ": model ", it.key(), " is ", have.value(it.key(), nlohmann::json()).dump(),
                  " in the checkpoint, ", it.value().dump(), " in this run");
  const core::SafeTensorsFile mf = core::read_safetensors(ck + "/model.safetensors");
  const core::SafeTensorsFile of = core::read_safetensors(ck + "/optimizer.safetensors");
  for (int u = 0; u < layout.num_units(); ++u) {
    const auto& unit = layout.units()[u];
    for (int which = 0; which < 3; ++which) {
      std::vector<float> full(static_cast<size_t>(unit.size), 0.0f);
      for (const auto& t : unit.tensors) {
        const std::string name = which == 0 ? t.name : (which == 1 ? "exp_avg." : "exp_avg_sq.") + t.name;
        const core::SafeTensor& st = (which == 0 ? mf : of).get(name, core::DType::f32, t.shape);
        std::memcpy(full.data() + t.offset, st.bytes.data(), st.bytes.size());
      }
      state.load_full(u, which, full.data());
    }
  }
  return ts;
}

// ---- Hugging Face LLaMA weights -----------------------------------------------------------------


model::LlamaConfig read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  core::require(fs::exists(path), "train", "--init-from ", dir, ": no config.json in it");
  const nlohmann::json j = read_json(path);
  core::require(j.is_object(), "train", path, ": not a JSON object");
  const std::string type = j.value("model_type", std::string("(missing)"));
  core::require(type == "llama" || type == "mistral", "train", path, ": model_type '", type,
                "' is not supported (llama, or mistral: LLaMA with a sliding window)");
  const std::string act = j.value("hidden_act", std::string("silu"));
  core::require(act == "silu", "train", path, ": hidden_act '", act, "' (the model is SwiGLU: silu)");
  for (const char* k : {"attention_bias", "mlp_bias"})
    core::require(!j.value(k, false), "train", path, ": ", k, " true is not supported (LLaMA has none)");
  auto need = [&](const char* k) -> const nlohmann::json& {
    core::require(j.contains(k) && j[k].is_number(), "train", path, ": ", k, " missing or not a number");
    return j[k];
  };
  model::LlamaConfig c;
  try {
    c.hidden = need("hidden_size").get<int64_t>();
    c.intermediate = need("intermediate_size").get<int64_t>();
    c.layers = need("num_hidden_layers").get<int64_t>();
    c.heads = need("num_attention_heads").get<int64_t>();
    c.vocab = need("vocab_size").get<int64_t>();
    c.kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                     ? j["num_key_value_heads"].get<int64_t>()
                     : c.heads;
    c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? j["head_dim"].get<int64_t>()
                 : c.heads > 0                                        ? c.hidden / c.heads
                                                                      : 0;
    c.rope_theta = j.value("rope_theta", 10000.0);
    c.norm_eps = j.value("rms_norm_eps", 1e-6);
    c.tied_embeddings = j.value("tie_word_embeddings", false);
    // Only Mistral applies it (transformers' LlamaAttention ignores the key); null: no window.
    if (type == "mistral" && j.contains("sliding_window") && !j["sliding_window"].is_null())
      c.sliding_window = j["sliding_window"].get<int64_t>();
    // Absent: unset (0), as our own checkpoints write it only when set, so that a config.json
    // reads back to itself. (transformers would assume 2048; its own files always carry the key.)
    if (j.contains("max_position_embeddings") && !j["max_position_embeddings"].is_null())
      c.max_position_embeddings = j["max_position_embeddings"].get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    core::fail("train", path, ": a field has the wrong type: ", e.what());
  }
  try {
    c.rope_scaling = model::RopeScaling::from_json(j.value("rope_scaling", nlohmann::json()));
    c.validate();
  } catch (const core::Error& e) {
    core::fail("train", path, ": ", e.what());
  }
  return c;
}

void load_hf_weights(const std::string& dir, ShardedState& state) {
  // The files holding the weights: one model.safetensors, or the shards an index names.
  std::vector<std::string> files;
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(index)) {
    const nlohmann::json j = read_json(index);
    core::require(j.contains("weight_map") && j["weight_map"].is_object(), "train", index,
                  ": no weight_map object");
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      core::require(it.value().is_string(), "train", index, ": weight_map[", it.key(), "] is not a file name");
      const std::string f = dir + "/" + it.value().get<std::string>();
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    }
  } else {
    core::require(fs::exists(dir + "/model.safetensors"), "train", "--init-from ", dir,
                  ": neither model.safetensors nor model.safetensors.index.json in it");
    files.push_back(dir + "/model.safetensors");
  }
  std::map<std::string, std::pair<std::string, core::SafeTensor>> found;  // name -> (file, tensor)
  for (const std::string& f : files) {
    core::SafeTensorsFile sf = core::read_safetensors(f);
    for (auto& [name, t] : sf.tensors) {
      if (auto it = found.find(name); it != found.end())
        core::fail("train", f, ": tensor ", name, " also in ", it->second.first);
      found[name] = {f, std::move(t)};
    }
  }
  const model::ParamLayout& layout = state.layout();
  std::set<std::string> used;
  for (int u = 0; u < layout.num_units(); ++u) {
    const auto& unit = layout.units()[u];
    std::vector<float> full(static_cast<size_t>(unit.size), 0.0f);
    for (const auto& t : unit.tensors) {
      auto it = found.find(t.name);
      core::require(it != found.end(), "train", "--init-from ", dir, ": tensor ", t.name,
                    " is missing");
      const auto& [file, st] = it->second;
      core::require(st.shape == t.shape, "train", file, ": tensor ", t.name, " has shape ",
                    dims_str(st.shape), ", the model needs ", dims_str(t.shape));
      float* dst = full.data() + t.offset;
      if (st.dtype == core::DType::f32)
        std::memcpy(dst, st.bytes.data(), st.bytes.size());
      else if (st.dtype == core::DType::bf16)
        core::bf16_to_f32(reinterpret_cast<const core::bf16*>(st.bytes.data()), dst,
                          static_cast<size_t>(t.numel));
      else
        core::fail("train", file, ": tensor ", t.name, " is ", core::dtype_name(st.dtype),
                   " (F32 or BF16 expected)");
      used.insert(t.name);
    }
    state.load_full(u, 0, full.data());
  }
  for (const auto& [name, ft] : found) {
    if (used.count(name)) continue;
    const bool harmless = name.find("rotary_emb.inv_freq") != std::string::npos ||
                          (name == "lm_head.weight" && layout.config().tied_embeddings);
    core::require(harmless, "train", ft.first, ": tensor ", name,
                  " is not part of this model (", layout.config().describe(), ")");
  }
}

}  // namespace longseq::train
