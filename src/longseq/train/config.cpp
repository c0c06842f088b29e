#include "longseq/train/config.hpp"

#include <algorithm>
#include <filesystem>

#include "longseq/comm/launch.hpp"
#include "longseq/core/data_path.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/io.hpp"
#include "longseq/train/checkpoint.hpp"
#include "longseq/train/device.hpp"

namespace longseq::train {

using nlohmann::json;

core::DType parse_precision(const std::string& s) {
  return core::parse_precision(s, "train");
}

namespace {

// The string fields' parsers, as the table's checks (each throws naming the value).
void check_algo(const std::string& s) {
  (void)attention::Algorithm::parse(s);
}
void check_rope_scaling(const std::string& s) {
  if (s.empty()) return;
  json j;
  try {
    j = json::parse(s);
  } catch (const json::exception& e) {
    core::fail("train", "--rope-scaling '", s, "' is not JSON: ", e.what());
  }
  try {
    (void)model::RopeScaling::from_json(j);
  } catch (const core::Error& e) {
    core::fail("train", "--rope-scaling '", s, "': ", e.what());
  }
}
void check_balance(const std::string& s) {
  (void)attention::parse_balance(s);
}
void check_checkpoint(const std::string& s) {
  (void)model::parse_checkpoint_policy(s);
}
void check_precision(const std::string& s) {
  (void)parse_precision(s);
}
void check_link(const std::string& s) {
  (void)comm::LinkModel::parse(s);
}
void check_loss(const std::string& s) {
  (void)model::parse_loss_mode(s);
}
void check_device(const std::string& s) {
  (void)core::Device::parse(s, "train");
}

#define LONGSEQ_TRAIN_ROW(type, name, flag, def, scope, check, help)                \
  {#name, flag, help, core::Scope::scope, [](TrainConfig& c) -> core::FieldRef { return &c.name; }, \
   check},
#define LONGSEQ_TRAIN_NESTED_ROW(path, key, flag, scope, check, help)              \
  {key,  flag, help, core::Scope::scope, [](TrainConfig& c) -> core::FieldRef { return &c.path; }, \
   check},

const std::vector<core::Field<TrainConfig>> kFields = {
    LONGSEQ_TRAIN_FIELDS(LONGSEQ_TRAIN_ROW, LONGSEQ_TRAIN_NESTED_ROW)};

#undef LONGSEQ_TRAIN_ROW
#undef LONGSEQ_TRAIN_NESTED_ROW

// Keys to_json() writes that are not fields: the preset's name and the derived cp.
const std::vector<std::string> kDerivedKeys = {"preset", "cp"};

// The model must be the one the weights are for: compare field by field, naming the first that
// differs (the CLI copies the config, so this catches explicit overrides). The RoPE fields may
// differ: extending a model's context means changing them (rope_scaling.hpp).
void check_init_from(const TrainConfig& c) {
  json want = hf_config(read_hf_config(c.init_from));
  const json have = hf_config(c.model);
  for (const char* k : {"rope_theta", "rope_scaling", "max_position_embeddings"}) want.erase(k);
  for (auto it = want.begin(); it != want.end(); ++it)
    core::require(have[it.key()] == it.value(), "train", "--init-from ", c.init_from, ": ",
                  it.key(), " is ", it.value().dump(), " there, ", have[it.key()].dump(),
                  " in this run");
}

void check_relations(const TrainConfig& c, const ParsedConfig& p) {
  const attention::Algorithm& a = p.algo;
  const int cp = c.cp();
  core::require(c.dp >= 1 && c.world % c.dp == 0, "train", "--dp ", c.dp, " must divide --world ",
                c.world);
  core::require(c.nodes >= 1 && c.world % c.nodes == 0, "train", "--nodes ", c.nodes,
                " must divide --world ", c.world);
  core::require(c.seq >= 2 * cp, "train", "--seq ", c.seq, " must be at least 2 tokens per rank (",
                cp, " context ranks need >= ", 2 * cp, ")");
  model::seq_selective_split(c.seq, c.seq_selective_fraction);
  a.validate(cp, c.model.heads, c.model.kv_heads);
  // Under mpirun --nodes 1 means the hosts MPI reports (trainer.cpp comm_options): the double
  // ring's need of several nodes is then checked against them when the world starts.
  const bool real_nodes = c.nodes == 1 && comm::launched_by_mpirun();
  if (a.ring_family() && a.route == attention::Route::double_ring && a.inner == 0 && cp > 1 &&
      !real_nodes) {
    const int per_node = c.world / c.nodes;
    core::require(c.nodes > 1 && per_node > 1 && per_node <= cp && cp % per_node == 0, "train",
                  "--algo ", c.algo, " needs the ", cp,
                  " context ranks of a replica to span several nodes with several ranks each; got "
                  "--nodes ",
                  c.nodes, " for --world ", c.world, " --dp ", c.dp,
                  " (or name the inner ring size: double-ring:I)");
  }
  // On a GPU every rank holds the whole model (train/run.hpp attach_device_state); ranks above
  // one are threads sharing the GPU, which only the local backend runs (the mpi backend moves host
  // memory): an mpirun job is refused, by name, before any rank starts.
  if (!p.device.is_cpu()) {
    (void)parse_shared_device("train", c.device, c.world);
    core::require(p.fused_loss, "train", "--device ", c.device,
                  " has the fused LM head only: drop --loss ", c.loss);
  }
  core::require(!c.offload || !p.device.is_cpu(), "train",
                "--offload parks activations in host memory, off a GPU; with --device ", c.device,
                " they are in host memory already (add --device cuda)");
  core::require(c.init_from.empty() || c.resume.empty(), "train", "--init-from ", c.init_from,
                " and --resume ", c.resume, " exclude each other (resume continues a run of ours)");
  if (!c.init_from.empty()) check_init_from(c);
}

}  // namespace

const std::vector<core::Field<TrainConfig>>& train_fields() {
  return kFields;
}

std::string TrainConfig::mask_text() const {
  std::string t = mask.empty() ? "causal" : mask;
  if (doc_mask && t.find("document") == std::string::npos) t += ",document";
  // A model trained with a window (config.json's sliding_window) keeps it unless --mask names one.
  if (model.sliding_window > 0 && t.find("window:") == std::string::npos)
    t += ",window:" + std::to_string(model.sliding_window);
  return t;
}

model::LlamaConfig TrainConfig::model_config() const {
  model::LlamaConfig m = model;
  if (!rope_scaling.empty())
    m.rope_scaling = model::RopeScaling::from_json(json::parse(rope_scaling));
  // The window of the mask is the model's: written to config.json as Mistral's sliding_window.
  if (seq >= 1) {
    const int64_t w = model::TrainMask::parse(mask_text(), seq).window();
    if (w > 0) m.sliding_window = w;
  }
  return m;
}

ParsedConfig TrainConfig::parse() const {
  core::check_fields(kFields, *this, "train");
  core::require(seq >= 1, "train", "--seq ", seq, " must be >= 1");
  ParsedConfig p;
  p.mask = model::TrainMask::parse(mask_text(), seq);
  core::require(model.sliding_window <= 0 || p.mask.window() == model.sliding_window, "train",
                "--mask '", mask, "' has window ", p.mask.window(),
                " but the model's sliding_window is ", model.sliding_window);
  model_config().validate();
  optim.validate();
  p.algo = attention::Algorithm::parse(algo);
  p.balance = attention::parse_balance(balance);
  p.checkpoint = model::parse_checkpoint_policy(checkpoint);
  p.fused_loss = model::parse_loss_mode(loss) == model::LossMode::fused;
  p.precision = parse_precision(precision);
  p.device = core::Device::parse(device, "train");
  p.link = comm::LinkModel::parse(link);
  check_relations(*this, p);
  return p;
}

json TrainConfig::to_json() const {
  json j = core::fields_to_json(kFields, *this);
  j["preset"] = preset;
  j["cp"] = cp();
  return j;
}

void apply_json(TrainConfig& c, const json& j, const std::string& where) {
  core::fields_from_json(kFields, c, j, "train", where, kDerivedKeys);
}

// ---- presets -----------------------------------------------------------------------------------

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(core::data_dir() + "/presets", ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

bool is_json_file(const std::string& s) {
  return s.size() > 5 && s.substr(s.size() - 5) == ".json";
}

TrainConfig load_preset(const std::string& name, int depth) {
  std::string file = name;
  if (!is_json_file(name)) {
    const auto names = preset_names();
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string all;
      for (const auto& n : names) all += (all.empty() ? "" : " | ") + n;
      core::fail("train", "--preset '", name, "': expected ", all, " or a FILE.json (presets in ",
                 core::data_dir(), "/presets)");
    }
    file = core::data_dir() + "/presets/" + name + ".json";
  }
  core::require(depth < 16, "train", file, ": presets inherit in a cycle");
  json j;
  try {
    j = json::parse(core::read_file(file));
  } catch (const json::exception& e) {
    core::fail("train", "--preset ", file, ": malformed JSON: ", e.what());
  }
  core::require(j.is_object(), "train", file, ": expected a JSON object of configuration keys");
  std::string parent = "main";
  for (const char* k : {"inherits", "base"}) {
    if (!j.contains(k)) continue;
    core::require(j[k].is_string(), "train", file, ": key '", k, "' must be a preset name");
    parent = j[k].get<std::string>();
    j.erase(k);
  }
  TrainConfig c;
  if (parent != "defaults") {
    core::require(parent != name, "train", file, ": a preset cannot inherit itself");
    c = load_preset(parent, depth + 1);
  }
  apply_json(c, j, file);
  c.preset = name;
  return c;
}

}  // namespace

TrainConfig preset(const std::string& name) {
  return load_preset(name, 0);
}

}  // namespace longseq::train
