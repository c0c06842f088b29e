// The CLI and LONGSEQ_ISA (design.md §10): `info` names the CPU's features and the variant; a
// forced lower level is reported as forced and runs; an unknown or unsupported level is one clear
// error before any work, naming the value (and, for an unsupported one, the CPU's best).
#include <gtest/gtest.h>

#include <string>

#include "longseq/core/cpu.hpp"
#include "train/train_test_util.hpp"

namespace {

namespace t = longseq::testing;
using longseq::core::Isa;

std::string info_with(const std::string& isa, int& rc) {
  std::string out;
  rc = t::run("env LONGSEQ_ISA=" + isa + " " + std::string(LONGSEQ_CLI) + " info", out);
  return out;
}

TEST(CliIsa, InfoNamesTheVariantAndAForcedOneRuns) {
  const Isa best = longseq::core::best_isa(longseq::core::cpu_features());
  int rc = 0;
  std::string out = info_with("", rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(std::string("kernel variant: ") + longseq::core::isa_name(best) + "\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("cpu features: " + longseq::core::cpu_features().list()), std::string::npos)
      << out;
  EXPECT_NE(out.find(longseq::core::bf16_native(best) ? "bf16: native" : "bf16: emulated"),
            std::string::npos)
      << out;
  out = info_with("portable", rc);
  ASSERT_EQ(rc, 0) << out;
  if (best != Isa::portable) {
    EXPECT_NE(out.find("kernel variant: portable (forced by LONGSEQ_ISA)"), std::string::npos)
        << out;
  }
  EXPECT_NE(out.find("bf16: emulated"), std::string::npos) << out;
  // The forced variant trains (a one-step tiny run, fp32 and bf16).
  for (const char* precision : {"fp32", "bf16"}) {
    std::string run_out;
    const int code =
        t::run("env LONGSEQ_ISA=portable " + std::string(LONGSEQ_CLI) +
                   " train --preset tiny --steps 1 --seq 64 --world 2 --threads 1 "
                   "--quiet --precision " +
                   precision + " --data " + LONGSEQ_SOURCE_DIR +
                   "/data/kjv-genesis-exodus.txt --out " + t::temp_path("cli_isa", precision),
               run_out);
    EXPECT_EQ(code, 0) << precision << ": " << run_out;
  }
}

TEST(CliIsa, UnknownAndUnsupportedLevelsAreRefusedByName) {
  int rc = 0;
  std::string out = info_with("avx9", rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("[cpu] LONGSEQ_ISA='avx9': expected portable|avx2|avx512|avx512_bf16"),
            std::string::npos)
      << out;
  const Isa best = longseq::core::best_isa(longseq::core::cpu_features());
  if (best == Isa::avx512_bf16) GTEST_SKIP() << "this CPU supports every level";
  out = info_with("avx512_bf16", rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find(std::string("LONGSEQ_ISA=avx512_bf16 but this CPU")), std::string::npos)
      << out;
  EXPECT_NE(out.find(std::string("supports at most ") + longseq::core::isa_name(best)),
            std::string::npos)
      << out;
}

}  // namespace
