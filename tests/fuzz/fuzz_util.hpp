#pragma once
// Shared by the fuzz harnesses (tests/fuzz/fuzz_*.cpp). A harness feeds one input to one parser:
// a core::Error is the expected refusal of bad input; anything else escaping (another exception,
// a crash, a sanitizer report, a hang) is a bug the fuzzer reports.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "longseq/core/error.hpp"

namespace longseq::fuzz {

/// A per-process scratch directory (created once) for parsers that read paths.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    std::string d =
        std::string(t && *t ? t : "/tmp") + "/longseq_fuzz_" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

/// Writes the input to scratch_dir()/name and returns the path.
inline std::string write_input(const uint8_t* data, size_t size, const std::string& name) {
  const std::string p = scratch_dir() + "/" + name;
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return p;
}

/// The input as JSON, or nothing when it is not JSON: the checkpoint loaders refuse malformed
/// JSON naming the file before the code under test sees it, so harnesses of JSON-shaped inputs
/// start from a parsed value.
inline std::optional<nlohmann::json> parse_json(const uint8_t* data, size_t size) {
  try {
    return nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

/// Runs `f`, accepting a core::Error (a clean refusal) and letting everything else through.
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const core::Error&) {
  }
}

}  // namespace longseq::fuzz
