#include "longseq/train/passkey.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/io.hpp"
#include "longseq/core/plot.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/train/data.hpp"
#include "longseq/train/device.hpp"
#include "longseq/train/generate.hpp"

namespace longseq::train {

namespace {

const char kFiller[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
const char kQuestion[] = "What is the pass key? The pass key is";

std::string needle(const std::string& key) {
  return "The pass key is " + key + ". Remember it. " + key + " is the pass key. ";
}

}  // namespace

std::string passkey_key(uint64_t seed, int64_t length, int64_t depth_index, int64_t trial,
                        int digits) {
  const uint64_t s = core::derive_seed(core::derive_seed(seed, static_cast<uint64_t>(length)),
                                       static_cast<uint64_t>(depth_index * 1000003 + trial));
  std::string k;
  for (int i = 0; i < digits; ++i) {
    const auto d =
        static_cast<int>(core::uniform01(s, static_cast<uint64_t>(i)) * (i == 0 ? 9 : 10));
    k += static_cast<char>('0' + (i == 0 ? 1 + d : d));  // no leading zero
  }
  return k;
}

PasskeyCase passkey_case(int64_t length, double depth, const std::string& key) {
  core::require(depth >= 0 && depth <= 1, "passkey", "depth ", depth, " must be in [0, 1]");
  const std::string nd = needle(key);
  const int64_t fixed = static_cast<int64_t>(nd.size() + sizeof(kQuestion) - 1);
  core::require(length >= fixed, "passkey", "length ", length,
                " cannot hold the needle and the question (", fixed, " bytes)");
  const int64_t budget = length - fixed;
  std::string filler;
  while (static_cast<int64_t>(filler.size()) < budget) filler += kFiller;
  filler.resize(static_cast<size_t>(budget));
  const auto at = static_cast<size_t>(std::floor(depth * static_cast<double>(budget)));
  PasskeyCase c;
  c.prompt = filler.substr(0, at) + nd + filler.substr(at) + kQuestion;
  c.answer = " " + key;
  LONGSEQ_CHECK(static_cast<int64_t>(c.prompt.size()) == length);
  return c;
}

void write_passkey_data(const std::string& path, int64_t length, int64_t count, uint64_t seed,
                        int digits) {
  core::require(count >= 1, "passkey", "--count ", count, " must be >= 1");
  std::vector<std::string> docs;
  for (int64_t i = 0; i < count; ++i) {
    const double depth =
        core::uniform01(core::derive_seed(seed, 0x64657074), static_cast<uint64_t>(i));
    const std::string key = passkey_key(seed, length, -1, i, digits);
    const PasskeyCase c = passkey_case(length, depth, key);
    docs.push_back(c.prompt + c.answer + ".");
  }
  write_token_file(path, byte_tokenize(docs), kByteVocab, kByteEot);
}

void PasskeyConfig::validate() const {
  core::require(!lengths.empty() && !depths.empty(), "passkey",
                "--lengths and --depths must not be empty");
  core::require(trials >= 1, "passkey", "--trials ", trials, " must be >= 1");
  core::require(digits >= 1 && digits <= 18, "passkey", "--digits ", digits, " must be in [1, 18]");
  for (double d : depths)
    core::require(d >= 0 && d <= 1, "passkey", "depth ", d, " must be in [0, 1]");
  (void)parse_shared_device("passkey", device, world);
}

nlohmann::json PasskeyResult::to_json() const {
  nlohmann::json cells = nlohmann::json::array();
  for (size_t i = 0; i < lengths.size(); ++i)
    for (size_t j = 0; j < depths.size(); ++j)
      cells.push_back({{"length", lengths[i]},
                       {"depth", depths[j]},
                       {"accuracy", accuracy[i * depths.size() + j]},
                       {"digit_accuracy", digit_accuracy[i * depths.size() + j]}});
  double digits = 0;
  for (double d : digit_accuracy) digits += d;
  if (!digit_accuracy.empty()) digits /= static_cast<double>(digit_accuracy.size());
  return {{"lengths", lengths},
          {"depths", depths},
          {"accuracy", overall},
          {"digit_accuracy", digits},
          {"cells", cells}};
}

std::string passkey_svg(const PasskeyResult& r, const std::string& title, bool digits) {
  core::plot::HeatMap h;
  h.title = title;
  h.xlabel = "depth of the key in the context";
  h.ylabel = "context length (tokens)";
  for (double d : r.depths)
    h.columns.push_back(core::cat(static_cast<int>(std::lround(d * 100)), "%"));
  for (int64_t l : r.lengths) h.rows.push_back(core::cat(l));
  h.values = digits ? r.digit_accuracy : r.accuracy;
  return core::plot::heatmap_svg(h);
}

namespace {

// One trial: greedy generation after the prompt; {whole key right, fraction of digits in place}.
std::pair<bool, double> score_trial(const PasskeyConfig& cfg, const PasskeyCase& c) {
  GenerateConfig g;
  g.checkpoint = cfg.checkpoint;
  g.prompt.assign(c.prompt.begin(), c.prompt.end());
  for (int32_t& x : g.prompt) x &= 0xff;
  g.max_new_tokens = static_cast<int64_t>(c.answer.size());
  g.world = cfg.world;
  g.algo = cfg.algo;
  g.balance = cfg.balance;
  g.threads = cfg.threads;
  g.device = cfg.device;
  const GenerateResult out = generate(g);
  std::string got;
  for (int32_t id : out.ids) got += id < 256 ? static_cast<char>(id) : '?';
  // Partial credit for the report: the key's digits in place (answer[0] is the space).
  int right = 0;
  for (size_t k = 1; k < c.answer.size(); ++k) right += k < got.size() && got[k] == c.answer[k];
  return {got == c.answer, static_cast<double>(right) / static_cast<double>(c.answer.size() - 1)};
}

// OUT/passkey.json and the two heat maps.
void write_passkey(const PasskeyConfig& cfg, const PasskeyResult& r) {
  std::error_code ec;
  std::filesystem::create_directories(cfg.out, ec);
  core::require(!ec, "passkey", "--out ", cfg.out, ": cannot create: ", ec.message());
  nlohmann::json j = r.to_json();
  j["config"] = {{"checkpoint", cfg.checkpoint}, {"trials", cfg.trials},
                 {"digits", cfg.digits},         {"seed", cfg.seed},
                 {"world", cfg.world},           {"algo", cfg.algo}};
  core::write_file_atomic(cfg.out + "/passkey.json", j.dump(1) + "\n");
  core::write_file_atomic(cfg.out + "/passkey.svg",
                          passkey_svg(r, core::cat("passkey retrieval: ", cfg.checkpoint, " (",
                                                   cfg.trials, " keys per cell, greedy)")));
  core::write_file_atomic(cfg.out + "/passkey_digits.svg",
                          passkey_svg(r,
                                      core::cat("passkey digits in place: ", cfg.checkpoint, " (",
                                                cfg.trials, " keys per cell, greedy; chance 0.1)"),
                                      true));
}

}  // namespace

PasskeyResult run_passkey(const PasskeyConfig& cfg) {
  cfg.validate();
  const core::Device device = core::Device::parse(cfg.device, "passkey");
  if (!device.is_cpu()) (void)device_kernels(device, 1, "passkey");
  PasskeyResult r;
  r.lengths = cfg.lengths;
  r.depths = cfg.depths;
  double total = 0;
  for (size_t i = 0; i < cfg.lengths.size(); ++i)
    for (size_t j = 0; j < cfg.depths.size(); ++j) {
      int correct = 0;
      double digits = 0;
      for (int64_t t = 0; t < cfg.trials; ++t) {
        const std::string key =
            passkey_key(cfg.seed, cfg.lengths[i], static_cast<int64_t>(j), t, cfg.digits);
        const auto [whole, part] =
            score_trial(cfg, passkey_case(cfg.lengths[i], cfg.depths[j], key));
        correct += whole;
        digits += part;
      }
      const double acc = static_cast<double>(correct) / static_cast<double>(cfg.trials);
      r.accuracy.push_back(acc);
      r.digit_accuracy.push_back(digits / static_cast<double>(cfg.trials));
      total += acc;
    }
  r.overall = total / static_cast<double>(r.accuracy.size());
  if (!cfg.out.empty() && comm::launcher_rank() == 0) write_passkey(cfg, r);
  return r;
}

}  // namespace longseq::train
