// The training configuration as data (train/config.hpp): the table, preset files with
// inheritance, JSON read and write, and the refusals they name.
//
// 1. Every JSON-scoped field round-trips: to_json() of a configuration whose every field differs
//    from the defaults, applied over the defaults, gives the same configuration back.
//    The table has one row per key and per flag.
// 2. Presets are files: a shipped preset equals its parent with its own keys applied
//    ("small" and "tiny" inherit "main"); a user file inherits "main" unless it says otherwise;
//    the older "base" spelling still works.
// 3. Unknown keys, wrong types, inheritance cycles and unknown names are refused naming the
//    file, the key and the value.
#include "longseq/train/config.hpp"

#include <gtest/gtest.h>

#include <string>

#include "longseq/core/data_path.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/io.hpp"
#include "train_test_util.hpp"

namespace {

namespace tr = longseq::train;
using longseq::testing::error_of;
using longseq::testing::temp_path;
using nlohmann::json;

std::string write_preset(const std::string& name, const std::string& text) {
  const std::string p = temp_path("config", name + ".json");
  longseq::core::write_file_atomic(p, text);
  return p;
}

TEST(TrainConfig, EveryJsonFieldRoundTrips) {
  const tr::TrainConfig defaults;
  tr::TrainConfig c;
  // A value per type that no default holds.
  for (const auto& f : tr::train_fields()) {
    std::visit(
        [](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>)
            *p = !*p;
          else if constexpr (std::is_same_v<T, std::string>)
            *p += "-x";
          else
            *p = static_cast<T>(*p + 3);
        },
        f.get(c));
  }
  const json j = c.to_json();
  tr::TrainConfig back = defaults;
  tr::apply_json(back, j);
  for (const auto& f : tr::train_fields()) {
    if (!f.in_json()) {
      EXPECT_FALSE(j.contains(f.key)) << f.key;
      continue;
    }
    EXPECT_EQ(longseq::core::field_json(f.get(back)), longseq::core::field_json(f.get(c))) << f.key;
    EXPECT_NE(longseq::core::field_json(f.get(back)), longseq::core::field_json(f.get(defaults)))
        << f.key;
  }
  EXPECT_EQ(j.at("cp"), c.cp());
}

TEST(TrainConfig, OneRowPerKeyAndPerFlag) {
  const auto& t = tr::train_fields();
  for (size_t i = 0; i < t.size(); ++i)
    for (size_t k = i + 1; k < t.size(); ++k) {
      EXPECT_STRNE(t[i].key, t[k].key);
      if (t[i].in_cli() && t[k].in_cli()) {
        EXPECT_STRNE(t[i].flag, t[k].flag);
      }
    }
  // The spellings tests, docs and scripts use.
  for (const char* k : {"steps", "seq", "world", "dp", "algo", "balance", "checkpoint", "loss",
                        "precision", "kv_heads", "adam_eps", "grad_clip", "init_from", "doc_mask"})
    EXPECT_NE(longseq::core::find_field(t, k), nullptr) << k;
}

TEST(TrainConfig, ShippedPresetsInheritMain) {
  const json main = tr::preset("main").to_json();
  for (const std::string name : {"small", "tiny"}) {
    json file = json::parse(
        longseq::core::read_file(longseq::core::data_dir() + "/presets/" + name + ".json"));
    ASSERT_EQ(file.at("inherits"), "main") << name;
    json want = main;
    for (auto it = file.begin(); it != file.end(); ++it)
      if (it.key() != "inherits") want[it.key()] = it.value();
    want["preset"] = name;
    want["cp"] = want["world"].get<int>() / want["dp"].get<int>();
    EXPECT_EQ(tr::preset(name).to_json(), want) << name;
  }
  // The values every trainer test starts from.
  const tr::TrainConfig tiny = tr::preset("tiny");
  EXPECT_EQ(tiny.model.hidden, 32);
  EXPECT_EQ(tiny.model.vocab, 257);
  EXPECT_EQ(tiny.world, 1);
  EXPECT_EQ(tiny.optim.min_lr, 3e-4);
  EXPECT_NO_THROW(tr::preset("main").validate());
}

TEST(TrainConfig, PresetFilesInheritAndOverride) {
  const std::string p = write_preset("over", R"({"inherits": "tiny", "world": 2})");
  EXPECT_EQ(tr::preset(p).world, 2);
  EXPECT_EQ(tr::preset(p).model.hidden, 32);
  EXPECT_EQ(tr::preset(p).preset, p);
  const std::string legacy = write_preset("legacy", R"({"base": "tiny", "seq": 80})");
  EXPECT_EQ(tr::preset(legacy).seq, 80);
  EXPECT_EQ(tr::preset(legacy).model.hidden, 32);
  const std::string plain = write_preset("plain", R"({"steps": 3})");
  EXPECT_EQ(tr::preset(plain).model.hidden, tr::preset("main").model.hidden);  // inherits main
  const std::string bare = write_preset("bare", R"({"inherits": "defaults"})");
  const tr::TrainConfig defaults;
  EXPECT_EQ(tr::preset(bare).model.vocab, defaults.model.vocab);
}

TEST(TrainConfig, PresetFilesRefuseNamingFileKeyAndValue) {
  const std::string unknown =
      write_preset("unknown", R"({"inherits": "tiny", "world": 2, "bogus": 1})");
  std::string msg = error_of([&] { tr::preset(unknown); });
  EXPECT_NE(msg.find("[train] " + unknown + ": unknown key 'bogus'"), std::string::npos) << msg;
  const std::string type = write_preset("type", R"({"steps": 1.5})");
  msg = error_of([&] { tr::preset(type); });
  EXPECT_NE(msg.find(type + ": key 'steps' must be an integer, got 1.5"), std::string::npos) << msg;
  const std::string neg = write_preset("neg", R"({"seed": -4})");
  msg = error_of([&] { tr::preset(neg); });
  EXPECT_NE(msg.find("key 'seed' must be a non-negative integer, got -4"), std::string::npos)
      << msg;
  const std::string self = temp_path("config", "self.json");
  longseq::core::write_file_atomic(self, R"({"inherits": ")" + self + R"("})");
  msg = error_of([&] { tr::preset(self); });
  EXPECT_NE(msg.find("cannot inherit itself"), std::string::npos) << msg;
  const std::string bad = write_preset("bad", R"({"steps": )");
  msg = error_of([&] { tr::preset(bad); });
  EXPECT_NE(msg.find(bad + ": malformed JSON"), std::string::npos) << msg;
  for (const auto& f : {unknown, type, neg, self, bad, temp_path("config", "over.json"),
                        temp_path("config", "legacy.json"), temp_path("config", "plain.json"),
                        temp_path("config", "bare.json")})
    std::remove(f.c_str());
}

TEST(TrainConfig, UnknownPresetNamesTheChoices) {
  const std::string msg = error_of([] { tr::preset("huge"); });
  EXPECT_NE(msg.find("--preset 'huge': expected "), std::string::npos) << msg;
  for (const char* n : {"main", "small", "tiny"})
    EXPECT_NE(msg.find(n), std::string::npos) << n << ": " << msg;
}

TEST(TrainConfig, JsonWithAWrongTypeOrKeyIsRefused) {
  tr::TrainConfig c;
  EXPECT_NE(error_of([&] {
              tr::apply_json(c, json{{"algo", 3}}, "x.json");
            }).find("[train] x.json: key 'algo' must be a string, got 3"),
            std::string::npos);
  // Keys a run writes but never reads back.
  EXPECT_EQ(error_of([&] { tr::apply_json(c, json{{"preset", "main"}, {"cp", 4}}); }), "no error");
  EXPECT_NE(error_of([&] {
              tr::apply_json(c, json{{"out", "/tmp/x"}});
            }).find("unknown key 'out'"),
            std::string::npos);
}

}  // namespace
