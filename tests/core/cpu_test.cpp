// core/cpu: feature detection feeds the variant choice; LONGSEQ_ISA's vocabulary and refusals.
#include "longseq/core/cpu.hpp"

#include <gtest/gtest.h>

#include <string>

#include "longseq/core/error.hpp"

namespace {

using longseq::core::best_isa;
using longseq::core::CpuFeatures;
using longseq::core::Isa;
using longseq::core::isa_name;

CpuFeatures avx2_cpu() {
  CpuFeatures f;
  f.sse42 = f.avx = f.avx2 = f.fma = f.f16c = true;
  return f;
}

TEST(Cpu, IsaNamesRoundTripAndUnknownNamesAreRefusedByName) {
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_bf16})
    EXPECT_EQ(longseq::core::parse_isa(isa_name(isa)), isa);
  for (const char* bad : {"", "AVX2", "avx", "sse2", "avx512bf16", "native"}) {
    try {
      longseq::core::parse_isa(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const longseq::core::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("[cpu] LONGSEQ_ISA='" + std::string(bad) + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("portable|avx2|avx512|avx512_bf16"), std::string::npos) << msg;
    }
  }
}

TEST(Cpu, BestIsaNeedsEveryFeatureOfItsLevel) {
  EXPECT_EQ(best_isa(CpuFeatures{}), Isa::portable);
  CpuFeatures f = avx2_cpu();
  EXPECT_EQ(best_isa(f), Isa::avx2);
  for (bool CpuFeatures::*need : {&CpuFeatures::avx2, &CpuFeatures::fma, &CpuFeatures::f16c}) {
    CpuFeatures g = f;
    g.*need = false;
    EXPECT_EQ(best_isa(g), Isa::portable);
  }
  f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = true;
  EXPECT_EQ(best_isa(f), Isa::avx512);
  for (bool CpuFeatures::*need : {&CpuFeatures::avx512f, &CpuFeatures::avx512bw,
                                  &CpuFeatures::avx512dq, &CpuFeatures::avx512vl}) {
    CpuFeatures g = f;
    g.*need = false;
    EXPECT_EQ(best_isa(g), Isa::avx2);
  }
  f.avx512_bf16 = true;
  EXPECT_EQ(best_isa(f), Isa::avx512_bf16);
  // AVX512_BF16 without the AVX-512 base (impossible on real CPUs) does not lift AVX2.
  CpuFeatures g = avx2_cpu();
  g.avx512_bf16 = true;
  EXPECT_EQ(best_isa(g), Isa::avx2);
  EXPECT_EQ(CpuFeatures{}.list(), "none");
  EXPECT_EQ(avx2_cpu().list(), "sse4.2 avx avx2 fma f16c");
}

TEST(Cpu, ThisMachineRunsItsActiveVariantAndRefusesHigherOnes) {
  const Isa best = best_isa(longseq::core::cpu_features());
  EXPECT_LE(longseq::core::active_isa(), best);
  const Isa saved = longseq::core::active_isa();
  // Every level up to the best can be forced; bf16 is native only on avx512_bf16.
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
    if (isa > best) {
      try {
        longseq::core::set_active_isa(isa);
        ADD_FAILURE() << "forced " << isa_name(isa) << " above " << isa_name(best);
      } catch (const longseq::core::Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(std::string("=") + isa_name(isa)), std::string::npos) << msg;
        EXPECT_NE(msg.find(std::string("at most ") + isa_name(best)), std::string::npos) << msg;
      }
      EXPECT_EQ(longseq::core::active_isa(), saved);
      continue;
    }
    longseq::core::set_active_isa(isa);
    EXPECT_EQ(longseq::core::active_isa(), isa);
    EXPECT_EQ(longseq::core::bf16_native(isa), isa == Isa::avx512_bf16);
  }
  longseq::core::set_active_isa(saved);
}

}  // namespace
