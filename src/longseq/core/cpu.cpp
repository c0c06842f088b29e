#include "longseq/core/cpu.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "longseq/core/error.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define LONGSEQ_X86 1
#endif

namespace longseq::core {

namespace {

#if defined(LONGSEQ_X86)
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}

// xgetbv(0): which register states the OS saves (XCR0). Inline assembly rather than _xgetbv, which
// needs the whole file compiled with -mxsave.
uint64_t xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(unsigned reg, int b) {
  return (reg >> b) & 1u;
}

CpuFeatures detect() {
  CpuFeatures f;
  const Regs v = cpuid(0, 0);
  const unsigned max_leaf = v.a;
  char vendor[13] = {};
  std::memcpy(vendor, &v.b, 4);
  std::memcpy(vendor + 4, &v.d, 4);
  std::memcpy(vendor + 8, &v.c, 4);
  f.vendor = vendor;
  if (cpuid(0x80000000u, 0).a >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i, 0);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    f.brand = brand;
    // Brand strings are padded with spaces on some CPUs.
    const size_t first = f.brand.find_first_not_of(' ');
    f.brand = first == std::string::npos ? "" : f.brand.substr(first);
    while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
  }
  if (max_leaf < 1) return f;
  const Regs l1 = cpuid(1, 0);
  f.sse42 = bit(l1.c, 20);
  const bool osxsave = bit(l1.c, 27);
  const uint64_t xcr = osxsave ? xcr0() : 0;
  const bool ymm = (xcr & 0x6) == 0x6;            // SSE and AVX state
  const bool zmm = (xcr & 0xe6) == 0xe6;          // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool tiles = (xcr & 0x60000) == 0x60000;  // XTILECFG, XTILEDATA
  f.avx = ymm && bit(l1.c, 28);
  f.fma = f.avx && bit(l1.c, 12);
  f.f16c = f.avx && bit(l1.c, 29);
  if (max_leaf < 7) return f;
  const Regs l7 = cpuid(7, 0);
  f.avx2 = f.avx && bit(l7.b, 5);
  f.avx512f = zmm && bit(l7.b, 16);
  f.avx512dq = f.avx512f && bit(l7.b, 17);
  f.avx512bw = f.avx512f && bit(l7.b, 30);
  f.avx512vl = f.avx512f && bit(l7.b, 31);
  f.amx_tile = tiles && bit(l7.d, 24);
  f.amx_bf16 = f.amx_tile && bit(l7.d, 22);
  if (l7.a >= 1) f.avx512_bf16 = f.avx512f && bit(cpuid(7, 1).a, 5);
  return f;
}
#else
CpuFeatures detect() {
  return {};
}
#endif

constexpr Isa kAll[] = {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_bf16};

// The active variant: -1 until first resolved. An atomic so the kernels' per-call read is cheap
// and race-free; resolution itself happens once under the mutex.
std::atomic<int> g_active{-1};
std::mutex g_mutex;

void require_supported(Isa want, std::string_view how) {
  const Isa best = best_isa(cpu_features());
  require(want <= best, "cpu", how, "=", isa_name(want), " but this CPU (",
          cpu_features().brand.empty() ? "unknown" : cpu_features().brand, ") supports at most ",
          isa_name(best), " (features: ", cpu_features().list(), ")");
}

}  // namespace

std::string CpuFeatures::list() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(sse42, "sse4.2");
  add(avx, "avx");
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512dq, "avx512dq");
  add(avx512vl, "avx512vl");
  add(avx512_bf16, "avx512_bf16");
  add(amx_tile, "amx_tile");
  add(amx_bf16, "amx_bf16");
  return s.empty() ? "none" : s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::portable:
      return "portable";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    case Isa::avx512_bf16:
      return "avx512_bf16";
  }
  return "?";
}

Isa parse_isa(std::string_view s) {
  for (Isa isa : kAll)
    if (s == isa_name(isa)) return isa;
  fail("cpu", "LONGSEQ_ISA='", s, "': expected portable|avx2|avx512|avx512_bf16");
}

Isa best_isa(const CpuFeatures& f) {
#if defined(LONGSEQ_X86)
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl;
  if (avx512 && f.avx512_bf16) return Isa::avx512_bf16;
  if (avx512) return Isa::avx512;
  if (avx2) return Isa::avx2;
#else
  (void)f;
#endif
  return Isa::portable;
}

Isa active_isa() {
  const int a = g_active.load(std::memory_order_acquire);
  if (a >= 0) return static_cast<Isa>(a);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const int again = g_active.load(std::memory_order_relaxed); again >= 0)
    return static_cast<Isa>(again);
  Isa isa = best_isa(cpu_features());
  if (const char* env = std::getenv("LONGSEQ_ISA"); env && *env) {
    isa = parse_isa(env);
    require_supported(isa, "LONGSEQ_ISA");
  }
  g_active.store(static_cast<int>(isa), std::memory_order_release);
  return isa;
}

Isa set_active_isa(Isa isa) {
  require_supported(isa, "set_active_isa");
  const Isa prev = active_isa();
  g_active.store(static_cast<int>(isa), std::memory_order_release);
  return prev;
}

const char* bf16_mode() {
  return bf16_native(active_isa()) ? "native" : "emulated (widened to fp32)";
}

}  // namespace longseq::core
