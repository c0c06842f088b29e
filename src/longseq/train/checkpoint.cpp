#include "longseq/train/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "longseq/core/checksum.hpp"
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

// The JSON files of a checkpoint and their CRC-32C, recorded in checksums.json (the tensors carry
// their own inside the safetensors files).
constexpr const char* kJsonFiles[] = {"config.json", "trainer_state.json"};

void verify_json_checksums(const std::string& ck) {
  const std::string path = ck + "/checksums.json";
  if (!fs::exists(path)) return;  // a checkpoint written before checksums were recorded
  const nlohmann::json j = read_json(path);
  core::require(j.is_object() && j.contains("crc32c") && j["crc32c"].is_object(), "train", path,
                ": expected {\"crc32c\": {file: checksum}}");
  for (auto it = j["crc32c"].begin(); it != j["crc32c"].end(); ++it) {
    uint32_t want = 0;
    core::require(it->is_string() && core::parse_crc32c_hex(it->get<std::string>(), want), "train",
                  path, ": checksum of ", it.key(), " is ", it->dump(), ", expected 8 hex digits");
    core::require(
        std::find(std::begin(kJsonFiles), std::end(kJsonFiles), it.key()) != std::end(kJsonFiles),
        "train", path, ": names unknown file '", it.key(), "'");
    const std::string text = core::read_file(ck + "/" + it.key());
    const uint32_t have = core::crc32c(text.data(), text.size());
    core::require(have == want, "train", ck, "/", it.key(), ": fails its CRC-32C check (",
                  core::crc32c_hex(have), " read, ", core::crc32c_hex(want),
                  " written in checksums.json): the file was changed or corrupted after saving");
  }
}

// The files of one checkpoint into `tmp` (each written atomically and fsync'ed).
void write_checkpoint_files(const std::string& tmp, const model::ParamLayout& layout,
                            const std::vector<std::vector<float>> (&full)[3],
                            const nlohmann::json& trainer_state) {
  std::vector<core::SafeTensorRef> model_t, opt_t;
  for (int u = 0; u < layout.num_units(); ++u)
    for (const auto& t : layout.units()[u].tensors) {
      model_t.push_back({t.name, core::DType::f32, t.shape, full[0][u].data() + t.offset});
      opt_t.push_back(
          {"exp_avg." + t.name, core::DType::f32, t.shape, full[1][u].data() + t.offset});
      opt_t.push_back(
          {"exp_avg_sq." + t.name, core::DType::f32, t.shape, full[2][u].data() + t.offset});
    }
  core::write_safetensors(tmp + "/model.safetensors", model_t, {{"format", "pt"}});
  core::write_safetensors(tmp + "/optimizer.safetensors", opt_t, {{"format", "pt"}});
  const std::string texts[] = {hf_config(layout.config()).dump(2) + "\n",
                               trainer_state.dump(2) + "\n"};
  nlohmann::json sums = nlohmann::json::object();
  for (int i = 0; i < 2; ++i) {
    core::write_file_atomic(tmp + "/" + kJsonFiles[i], texts[i]);
    sums[kJsonFiles[i]] = core::crc32c_hex(core::crc32c(texts[i].data(), texts[i].size()));
  }
  core::write_file_atomic(tmp + "/checksums.json", nlohmann::json{{"crc32c", sums}}.dump(2) + "\n");
}

}  // namespace

void verify_checkpoint_checksums(const std::string& ck) {
  verify_json_checksums(ck);
}

int64_t validate_trainer_state(const nlohmann::json& ts, const std::string& path) {
  core::require(ts.is_object(), "train", path, ": expected a JSON object, got ", ts.type_name());
  core::require(ts.contains("step") && ts["step"].is_number_integer(), "train", path,
                ": step missing or not an integer (", ts.value("step", nlohmann::json()).dump(),
                ")");
  const nlohmann::json& st = ts["step"];
  const bool in_range = st.is_number_unsigned()
                            ? st.get<uint64_t>() <= uint64_t{kMaxStep}
                            : st.get<int64_t>() >= 0 && st.get<int64_t>() <= kMaxStep;
  core::require(in_range, "train", path, ": step ", st.dump(), " out of range [0, ", kMaxStep, "]");
  core::require(ts.contains("seed") && ts["seed"].is_number_integer() &&
                    (ts["seed"].is_number_unsigned() || ts["seed"].get<int64_t>() >= 0),
                "train", path, ": seed missing or not a non-negative integer (",
                ts.value("seed", nlohmann::json()).dump(), ")");
  return st.get<int64_t>();
}

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

void save_checkpoint(const std::string& dir, ShardedState& state,
                     const nlohmann::json& trainer_state, bool writer) {
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
  // A failed write (disk full, quota, I/O error) removes the partial set, so that its space is
  // free again and nothing half-written is left beside checkpoint/, which is untouched until the
  // new set is complete: the previous checkpoint stays the one --resume reads.
  try {
    write_checkpoint_files(tmp, layout, full, trainer_state);
  } catch (const core::Error& e) {
    fs::remove_all(tmp, ec);
    core::fail("train", "saving a checkpoint in ", dir, " failed (", e.what(), "); ",
               fs::exists(cur) ? cur + " is unchanged" : std::string("no earlier checkpoint"));
  }
  // Every rename is followed by an fsync of DIR, so that after a crash the directory entries are
  // as durable as the files (which write_file_atomic already fsync'ed): checkpoint/ is either the
  // old set or the new one, and checkpoint.old/ is only removed once the new one is in place.
  fs::remove_all(old, ec);
  if (fs::exists(cur)) {
    fs::rename(cur, old, ec);
    core::require(!ec, "train", "cannot move ", cur, " to ", old, ": ", ec.message());
    core::fsync_dir(dir);
  }
  fs::rename(tmp, cur, ec);
  core::require(!ec, "train", "cannot move ", tmp, " to ", cur, ": ", ec.message());
  core::fsync_dir(dir);
  fs::remove_all(old, ec);
  core::fsync_dir(dir);
}

nlohmann::json load_checkpoint(const std::string& dir, ShardedState& state) {
  std::string ck = dir + "/checkpoint";
  if (!fs::exists(ck + "/trainer_state.json")) ck = dir + "/checkpoint.old";
  core::require(fs::exists(ck + "/trainer_state.json"), "train", "--resume ", dir,
                ": no checkpoint/trainer_state.json (nor checkpoint.old/) in it");
  verify_json_checksums(ck);
  const nlohmann::json ts = read_json(ck + "/trainer_state.json");
  validate_trainer_state(ts, ck + "/trainer_state.json");
  const model::ParamLayout& layout = state.layout();
  const nlohmann::json want = hf_config(layout.config());
  const nlohmann::json have = read_json(ck + "/config.json");
  core::require(have.is_object(), "train", ck, "/config.json: expected a JSON object, got ",
                have.type_name());
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
        const std::string name =
            which == 0 ? t.name : (which == 1 ? "exp_avg." : "exp_avg_sq.") + t.name;
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
  try {
    return hf_config_fields(j, path);
  } catch (const nlohmann::json::exception& e) {
    core::fail("train", path, ": a field has the wrong type: ", e.what());
  }
}

namespace {

// The kind of model and the JSON types of the optional keys; returns model_type.
std::string check_hf_kinds(const nlohmann::json& j, const std::string& path) {
  const std::string type = j.value("model_type", std::string("(missing)"));
  core::require(type == "llama" || type == "mistral", "train", path, ": model_type '", type,
                "' is not supported (llama, or mistral: LLaMA with a sliding window)");
  const std::string act = j.value("hidden_act", std::string("silu"));
  core::require(act == "silu", "train", path, ": hidden_act '", act,
                "' (the model is SwiGLU: silu)");
  for (const char* k : {"attention_bias", "mlp_bias"})
    core::require(!j.value(k, false), "train", path, ": ", k,
                  " true is not supported (LLaMA has none)");
  for (const char* k :
       {"num_key_value_heads", "head_dim", "sliding_window", "max_position_embeddings"})
    core::require(!j.contains(k) || j[k].is_null() || j[k].is_number_integer(), "train", path, ": ",
                  k, " ", j.value(k, nlohmann::json()).dump(), " is not an integer");
  for (const char* k : {"rope_theta", "rms_norm_eps"})
    core::require(!j.contains(k) || j[k].is_number(), "train", path, ": ", k, " ",
                  j.value(k, nlohmann::json()).dump(), " is not a number");
  return type;
}

// Sizes beyond these are corrupt files, not models (and would overflow products of sizes).
void check_hf_ranges(const model::LlamaConfig& c, const std::string& path) {
  const std::pair<const char*, int64_t> bounds[] = {
      {"hidden_size", c.hidden},        {"intermediate_size", c.intermediate},
      {"head_dim", c.head_dim},         {"num_hidden_layers", c.layers},
      {"num_attention_heads", c.heads}, {"num_key_value_heads", c.kv_heads}};
  for (const auto& [k, v] : bounds)
    core::require(v >= 1 && v <= kMaxConfigDim, "train", path, ": ", k, " ", v,
                  " out of range [1, ", kMaxConfigDim, "]");
  core::require(c.sliding_window <= kMaxStep, "train", path, ": sliding_window ", c.sliding_window,
                " out of range (at most ", kMaxStep, ")");
  core::require(c.max_position_embeddings <= kMaxStep, "train", path, ": max_position_embeddings ",
                c.max_position_embeddings, " out of range (at most ", kMaxStep, ")");
  core::require(c.vocab >= 1 && c.vocab <= (int64_t{1} << 31) - 1, "train", path, ": vocab_size ",
                c.vocab, " out of range [1, 2^31 - 1]");
  core::require(std::isfinite(c.rope_theta) && c.rope_theta > 0, "train", path, ": rope_theta ",
                c.rope_theta, " must be a positive finite number");
  core::require(std::isfinite(c.norm_eps) && c.norm_eps > 0, "train", path, ": rms_norm_eps ",
                c.norm_eps, " must be a positive finite number");
}

}  // namespace

model::LlamaConfig hf_config_fields(const nlohmann::json& j, const std::string& path) {
  const std::string type = check_hf_kinds(j, path);
  // Integers only: a float such as 1e300 would be cast to int64 (undefined) by get<int64_t>.
  auto need = [&](const char* k) -> const nlohmann::json& {
    core::require(j.contains(k) && j[k].is_number_integer(), "train", path, ": ", k,
                  " missing or not an integer (", j.value(k, nlohmann::json()).dump(), ")");
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
                 : c.heads > 0                                      ? c.hidden / c.heads
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
  check_hf_ranges(c, path);
  try {
    c.rope_scaling = model::RopeScaling::from_json(j.value("rope_scaling", nlohmann::json()));
    c.validate();
  } catch (const core::Error& e) {
    core::fail("train", path, ": ", e.what());
  }
  return c;
}

std::vector<std::string> hf_index_files(const nlohmann::json& j, const std::string& path) {
  core::require(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), "train",
                path, ": no weight_map object");
  std::vector<std::string> files;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    core::require(it.value().is_string(), "train", path, ": weight_map[", it.key(),
                  "] is not a file name (", it.value().dump(), ")");
    const std::string f = it.value().get<std::string>();
    // A shard is a file beside the index (as transformers writes them): no directories, so an
    // index cannot make --init-from read files elsewhere.
    core::require(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", "train",
                  path, ": weight_map[", it.key(), "] is '", f,
                  "', expected a file name in the same directory");
    if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  }
  core::require(!files.empty(), "train", path, ": weight_map names no file");
  return files;
}

namespace {

// The files holding the weights: one model.safetensors, or the shards an index names.
std::vector<std::string> weight_files(const std::string& dir) {
  std::vector<std::string> files;
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(index)) {
    files = hf_index_files(read_json(index), index);
    for (std::string& f : files) f = dir + "/" + f;
  } else {
    core::require(fs::exists(dir + "/model.safetensors"), "train", "--init-from ", dir,
                  ": neither model.safetensors nor model.safetensors.index.json in it");
    files.push_back(dir + "/model.safetensors");
  }
  return files;
}

}  // namespace

void load_hf_weights(const std::string& dir, ShardedState& state) {
  const std::vector<std::string> files = weight_files(dir);
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
    core::require(harmless, "train", ft.first, ": tensor ", name, " is not part of this model (",
                  layout.config().describe(), ")");
  }
}

}  // namespace longseq::train
