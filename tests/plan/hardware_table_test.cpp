// Hardware profiles as a table (plan/hardware.cpp, core/options.hpp): every field declared once,
// the file format read, written and checked from it.
//
// 1. Every shipped profile reads, writes and reads back to the same JSON.
// 2. A missing required field, an unknown key, a value of the wrong type and an out-of-range
//    correction are refused naming the file, the field and the value.
// 3. Whatever rows the table holds (adding a field is one row): each round-trips through the file
//    format at a value no default holds, each range is enforced at the value just outside it, and
//    each required row's absence is refused naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "longseq/core/error.hpp"
#include "longseq/plan/hardware.hpp"

namespace {

using namespace longseq::plan;
using nlohmann::json;

std::string error_of(const std::string& text) {
  try {
    parse_hardware(text, "x.json");
  } catch (const longseq::core::Error& e) {
    return e.what();
  }
  return "no error";
}

// A minimal valid profile with `key` (a JSON pointer) set to `value`.
std::string with(const std::string& pointer, const json& value) {
  json j = {{"gpus_per_node", 8},
            {"memory_bytes", 8e10},
            {"peak_flops", 3e14},
            {"dtype_bytes", 2},
            {"intra", {{"latency_s", 1e-6}, {"bandwidth_Bps", 2e11}}},
            {"inter", {{"latency_s", 5e-6}, {"node_bandwidth_Bps", 1e11}}}};
  if (!pointer.empty()) j[json::json_pointer(pointer)] = value;
  return j.dump();
}

TEST(HardwareTable, ShippedProfilesRoundTrip) {
  ASSERT_FALSE(hardware_names().empty());
  for (const std::string& n : hardware_names()) {
    const Hardware hw = load_hardware(n);
    const std::string once = hardware_to_json(hw);
    const Hardware back = parse_hardware(once, "round trip");
    EXPECT_EQ(hardware_to_json(back), once) << n;
    EXPECT_DOUBLE_EQ(back.inter.bandwidth_Bps, hw.inter_node_bandwidth_Bps / hw.gpus_per_node) << n;
  }
  EXPECT_EQ(error_of(with("", nullptr)), "no error");
  EXPECT_EQ(parse_hardware(with("", nullptr), "x.json").name, "x.json");
}

TEST(HardwareTable, RefusalsNameFileFieldAndValue) {
  json missing = json::parse(with("", nullptr));
  missing["intra"].erase("bandwidth_Bps");
  EXPECT_NE(error_of(missing.dump()).find("x.json: missing field 'intra.bandwidth_Bps'"),
            std::string::npos)
      << error_of(missing.dump());
  EXPECT_NE(error_of(with("/intra/bogus", 1)).find("x.json: unknown key 'intra.bogus'"),
            std::string::npos);
  EXPECT_NE(
      error_of(with("/peak_flops", "fast")).find("key 'peak_flops' must be a number, got \"fast\""),
      std::string::npos);
  EXPECT_NE(error_of(with("/corrections/gemm_efficiency", 2.0))
                .find("x.json: corrections.gemm_efficiency 2 must be in (0, 1.5] (an efficiency)"),
            std::string::npos)
      << error_of(with("/corrections/gemm_efficiency", 2.0));
  EXPECT_NE(error_of(with("/memory_bytes", 0)).find("memory_bytes 0 must be > 0"),
            std::string::npos);
  // Kept for readers, never read back.
  EXPECT_EQ(error_of(with("/intra/note", "NVLink")), "no error");
  EXPECT_EQ(error_of(with("/measurements", json{{"gemm_f32_flops", 1e11}})), "no error");
}

TEST(HardwareTable, EveryRowRoundTripsIsCheckedAndRequiredWhereSaid) {
  const Hardware base = parse_hardware(with("", nullptr), "x.json");
  Hardware h = base;
  for (const auto& f : hardware_fields())
    std::visit(
        [](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>)
            *p = !*p;
          else if constexpr (std::is_same_v<T, std::string>)
            *p += "-x";
          else
            *p = static_cast<T>(*p + 0.5 + (std::is_integral_v<T> ? 1 : 0));  // within every range
        },
        f.get(h));
  const Hardware back = parse_hardware(hardware_to_json(h), "x.json");
  for (const auto& f : hardware_fields()) {
    EXPECT_EQ(longseq::core::field_json(f.get(back)), longseq::core::field_json(f.get(h))) << f.key;
    EXPECT_NE(longseq::core::field_json(f.get(back)), longseq::core::field_json(f.get(base)))
        << f.key;
  }
  int checked = 0;
  for (const auto& f : hardware_fields()) {
    const json::json_pointer ptr = longseq::core::key_pointer(f.key);
    const bool integral = std::visit(
        [](auto* p) { return std::is_integral_v<std::remove_pointer_t<decltype(p)>>; }, f.get(h));
    const auto& k = f.check;
    std::vector<double> bad;
    if (std::isfinite(k.lo)) bad.push_back(k.lo_open ? k.lo : k.lo - 1);
    if (std::isfinite(k.hi)) bad.push_back(k.hi_open ? k.hi : 2 * k.hi);
    for (double v : bad) {
      const json value = integral ? json(static_cast<int64_t>(v)) : json(v);
      const std::string msg = error_of(with(ptr.to_string(), value));
      EXPECT_NE(msg.find(std::string("x.json: ") + f.key + " " + longseq::core::cat(v)),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("must be"), std::string::npos) << msg;
      ++checked;
    }
    if (f.required) {
      json j = json::parse(with("", nullptr));
      j[ptr.parent_pointer()].erase(ptr.back());
      const std::string msg = error_of(j.dump());
      EXPECT_NE(msg.find(std::string("x.json: missing field '") + f.key + "'"), std::string::npos)
          << msg;
      ++checked;
    }
  }
  EXPECT_GE(checked, 20);
}

}  // namespace
