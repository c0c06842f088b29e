#include "longseq/train/checkpoint.hpp"

#include <cstring>
#include <filesystem>

#include "longseq/core/error.hpp"
#include "longseq/core/safetensors.hpp"

namespace longseq::train {

namespace fs = std::filesystem;

nlohmann::json hf_config(const model::LlamaConfig& c) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
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
  nlohmann::json ts;
  try {
    ts = nlohmann::json::parse(core::read_file(ck + "/trainer_state.json"));
  } catch (const nlohmann::json::exception& e) {
    core::fail("train", ck, "/trainer_state.json: malformed JSON: ", e.what());
  }
  const model::ParamLayout& layout = state.layout();
  const nlohmann::json want = hf_config(layout.config());
  const nlohmann::json have = nlohmann::json::parse(core::read_file(ck + "/config.json"));
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

}  // namespace longseq::train
