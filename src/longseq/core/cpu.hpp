#pragma once
// What this CPU can do, and which kernel variant runs on it (design.md §10).
//
// One build carries every kernel variant (kernels/cpu/isa/): portable C++, AVX2+FMA, AVX-512 and
// AVX-512+BF16. The variant is chosen once per process from what the CPU and the operating system
// report (cpuid, and xgetbv for the register state the OS saves), never from the build machine.
// LONGSEQ_ISA=portable|avx2|avx512|avx512_bf16 forces a lower level (tests, benchmarks); a level
// the CPU lacks is refused with both names. Off x86-64 only `portable` exists.
//
// bf16: only avx512_bf16 multiplies bf16 in hardware (AVX512_BF16; AMX where oneDNN finds it).
// Every lower level widens bf16 to fp32 for its products, with the same contract (bf16 storage and
// transfers, fp32 accumulation): "emulated".
#include <cstdint>
#include <string>
#include <string_view>

namespace longseq::core {

/// The CPU features that decide a kernel variant, each already ANDed with the operating system's
/// support for the registers it needs (a feature the OS does not save on context switch is
/// absent).
struct CpuFeatures {
  std::string vendor;  ///< cpuid vendor string, e.g. "AuthenticAMD"; empty off x86-64
  std::string brand;   ///< cpuid brand string, e.g. "AMD EPYC 7B13"; empty off x86-64
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false;  ///< reported; used through oneDNN only
  /// The features as one space-separated string of the names above that are present
  /// ("sse4.2 avx avx2 fma f16c ..."); "none" when none is.
  std::string list() const;
};

/// This machine's features, read once (thread-safe).
const CpuFeatures& cpu_features();

/// Kernel variants, lowest first: each level includes the ones below it.
enum class Isa : uint8_t { portable, avx2, avx512, avx512_bf16 };

/// "portable" | "avx2" | "avx512" | "avx512_bf16".
const char* isa_name(Isa isa);

/// Parses an isa_name; throws Error("[cpu] LONGSEQ_ISA='x': expected portable|avx2|avx512|
/// avx512_bf16") otherwise.
Isa parse_isa(std::string_view s);

/// The highest variant `f` supports: avx2 needs AVX2, FMA and F16C; avx512 needs AVX-512 F, BW,
/// DQ and VL; avx512_bf16 needs those and AVX512_BF16.
Isa best_isa(const CpuFeatures& f);

/// The variant the kernels run: LONGSEQ_ISA when set (read at the first call; a level above
/// best_isa(cpu_features()) throws Error naming both), else the best one. Thread-safe.
Isa active_isa();

/// Forces the variant for the rest of the process (tests and benchmarks comparing variants in one
/// run); returns the previous one. Throws Error, naming both, for a level this CPU lacks. Not to
/// be called while kernels run on other threads.
Isa set_active_isa(Isa isa);

/// Whether `isa` multiplies bf16 in hardware (avx512_bf16); otherwise bf16 products widen to fp32.
inline bool bf16_native(Isa isa) {
  return isa == Isa::avx512_bf16;
}

/// "native" or "emulated (widened to fp32)" for the active variant: what `info` and a run's header
/// print.
const char* bf16_mode();

}  // namespace longseq::core
