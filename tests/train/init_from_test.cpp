// --init-from: Hugging Face LLaMA weights as the starting point (config.json + model.safetensors or
// an index of shards, F32 or BF16). A checkpoint of this trainer is such a directory, so the tests
// train a tiny model, write its checkpoint, and start again from it:
// 1. F32: the loaded parameters are the checkpoint's bit for bit (a run with lr 1e-30 leaves them
//    unchanged in fp32, so its final parameters are what was loaded);
// 2. BF16 in two shards with an index (as HF ships large models): the loaded parameters are the
//    checkpoint's rounded to bf16;
// 3. refusals name the file and the value: another model_type (than llama or mistral), an
//    incomplete rope_scaling, a missing or extra
//    tensor, a wrong shape, a model flag that contradicts config.json, --init-from with --resume.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/core/safetensors.hpp"
#include "longseq/train/checkpoint.hpp"
#include "train_test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace tr = longseq::train;
namespace core = longseq::core;
using longseq::testing::refusal;
using longseq::testing::temp_path;
using longseq::testing::tiny_config;

// A tiny run's checkpoint directory (trained one step, untied embeddings so lm_head.weight exists).
struct Trained {
  std::string root, dir;
  std::vector<float> params;
};

const Trained& trained() {
  static const Trained t = [] {
    Trained x;
    x.root = temp_path("init_from", "src");
    fs::remove_all(x.root);
    tr::TrainConfig c = tiny_config();
    c.model.tied_embeddings = false;
    c.out = x.root;
    c.save_every = 0;
    x.params = tr::train(c).params;
    x.dir = x.root + "/checkpoint";
    return x;
  }();
  return t;
}

// Starts from `dir` with a vanishing learning rate: the final parameters are the loaded ones.
std::vector<float> loaded(const std::string& dir) {
  tr::TrainConfig c = tiny_config();
  c.init_from = dir;
  c.model = tr::read_hf_config(dir);
  c.optim.lr = 1e-30;
  c.optim.min_lr = 0;
  return tr::train(c).params;
}

TEST(InitFrom, F32CheckpointLoadsBitForBit) {
  const Trained& t = trained();
  const std::vector<float> p = loaded(t.dir);
  ASSERT_EQ(p.size(), t.params.size());
  for (size_t i = 0; i < p.size(); ++i) ASSERT_NEAR(p[i], t.params[i], 1e-20) << i;
}

TEST(InitFrom, Bf16ShardsWithAnIndexLoadRounded) {
  const Trained& t = trained();
  const std::string dir = temp_path("init_from", "bf16");
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(t.dir + "/config.json", dir + "/config.json");
  const core::SafeTensorsFile f = core::read_safetensors(t.dir + "/model.safetensors");
  // bf16 copies, split over two shards in file order, and the index HF writes
  std::vector<std::vector<core::bf16>> keep;
  std::vector<core::SafeTensorRef> shard[2];
  nlohmann::json map = nlohmann::json::object();
  int i = 0;
  for (const auto& [name, st] : f.tensors) {
    const size_t n = static_cast<size_t>(st.numel());
    keep.emplace_back(n);
    core::f32_to_bf16(reinterpret_cast<const float*>(st.bytes.data()), keep.back().data(), n);
    const int s = i++ % 2;
    shard[s].push_back({name, core::DType::bf16, st.shape, keep.back().data()});
    map[name] = s ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
  }
  core::write_safetensors(dir + "/model-00001-of-00002.safetensors", shard[0]);
  core::write_safetensors(dir + "/model-00002-of-00002.safetensors", shard[1]);
  core::write_file_atomic(
      dir + "/model.safetensors.index.json",
      nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump());
  const std::vector<float> p = loaded(dir);
  ASSERT_EQ(p.size(), t.params.size());
  int differ = 0;
  for (size_t k = 0; k < p.size(); ++k) {
    ASSERT_NEAR(p[k], core::round_bf16(t.params[k]), 1e-20) << k;
    differ += p[k] != t.params[k];
  }
  EXPECT_GT(differ, static_cast<int>(p.size() / 2));  // really rounded
  fs::remove_all(dir);
}

TEST(InitFrom, RefusesWhatItCannotLoadNamingIt) {
  const Trained& t = trained();
  const std::string dir = temp_path("init_from", "bad");
  auto fresh = [&] {
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(t.dir + "/config.json", dir + "/config.json");
    fs::copy_file(t.dir + "/model.safetensors", dir + "/model.safetensors");
  };
  auto config_with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = nlohmann::json::parse(core::read_file(dir + "/config.json"));
    j[key] = value;
    core::write_file_atomic(dir + "/config.json", j.dump());
  };
  auto expect = [&](const std::string& want) {
    tr::TrainConfig c = tiny_config();
    c.model.tied_embeddings = false;
    c.init_from = dir;
    const std::string msg = refusal(c);
    EXPECT_NE(msg.find(want), std::string::npos) << "want: " << want << "\ngot: " << msg;
  };
  fresh();
  config_with("model_type", "gemma");
  expect("model_type 'gemma' is not supported");
  fresh();
  config_with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}});
  expect("rope_scaling");
  fresh();
  config_with("num_hidden_layers", 3);
  expect("num_hidden_layers is 3 there, 2 in this run");
  // tensors: one missing, one extra, one of another shape
  const core::SafeTensorsFile f = core::read_safetensors(t.dir + "/model.safetensors");
  auto rewrite = [&](const std::string& drop, const std::string& add, const std::string& reshape) {
    std::vector<core::SafeTensorRef> refs;
    std::vector<float> extra(4, 1.0f);
    for (const auto& [name, st] : f.tensors) {
      if (name == drop) continue;
      std::vector<int64_t> shape = st.shape;
      if (name == reshape) shape = {st.numel()};
      refs.push_back({name, core::DType::f32, shape, st.bytes.data()});
    }
    if (!add.empty()) refs.push_back({add, core::DType::f32, {4}, extra.data()});
    core::write_safetensors(dir + "/model.safetensors", refs);
  };
  fresh();
  rewrite("model.layers.1.mlp.up_proj.weight", "", "");
  expect("tensor model.layers.1.mlp.up_proj.weight is missing");
  fresh();
  rewrite("", "model.layers.0.self_attn.q_proj.bias", "");
  expect("tensor model.layers.0.self_attn.q_proj.bias is not part of this model");
  fresh();
  rewrite("", "", "model.layers.0.self_attn.o_proj.weight");
  expect(
      "tensor model.layers.0.self_attn.o_proj.weight has shape [1024], the model needs [32, 32]");
  fs::remove_all(dir);
  // exclusive with --resume
  tr::TrainConfig c = tiny_config();
  c.init_from = t.dir;
  c.resume = t.root;
  EXPECT_NE(refusal(c).find("exclude each other"), std::string::npos) << refusal(c);
}

}  // namespace
