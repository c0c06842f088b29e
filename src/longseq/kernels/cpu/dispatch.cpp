// The variant tables of this build and the choice among them (dispatch.hpp).
#include "longseq/kernels/cpu/dispatch.hpp"

#include <vector>

#include "longseq/core/error.hpp"

namespace longseq::kernels::cpu {

// Each variant's table, defined in kernels/cpu/isa/attention.cpp compiled for that variant. CMake
// defines LONGSEQ_ISA_<LEVEL>_BUILT for the variants it built (all four on x86-64).
namespace isa_portable {
extern const KernelTable kTable;
}
#if defined(LONGSEQ_ISA_AVX2_BUILT)
namespace isa_avx2 {
extern const KernelTable kTable;
}
#endif
#if defined(LONGSEQ_ISA_AVX512_BUILT)
namespace isa_avx512 {
extern const KernelTable kTable;
}
#endif
#if defined(LONGSEQ_ISA_AVX512_BF16_BUILT)
namespace isa_avx512_bf16 {
extern const KernelTable kTable;
}
#endif

namespace {

// The built variants, lowest first: the one list the rest is derived from.
constexpr const KernelTable* kTables[] = {
    &isa_portable::kTable,
#if defined(LONGSEQ_ISA_AVX2_BUILT)
    &isa_avx2::kTable,
#endif
#if defined(LONGSEQ_ISA_AVX512_BUILT)
    &isa_avx512::kTable,
#endif
#if defined(LONGSEQ_ISA_AVX512_BF16_BUILT)
    &isa_avx512_bf16::kTable,
#endif
};

const KernelTable* table_or_null(core::Isa isa) {
  for (const KernelTable* t : kTables)
    if (t->isa == isa) return t;
  return nullptr;
}

}  // namespace

std::span<const core::Isa> built_isas() {
  static const std::vector<core::Isa> isas = [] {
    std::vector<core::Isa> v;
    for (const KernelTable* t : kTables) v.push_back(t->isa);
    return v;
  }();
  return isas;
}

const KernelTable& kernel_table(core::Isa isa) {
  const KernelTable* t = table_or_null(isa);
  if (!t) core::fail("kernels", "kernel variant ", core::isa_name(isa), " is not in this build");
  return *t;
}

const KernelTable& active_kernels() {
  // Off x86-64 only the portable variant is built, and best_isa() never returns more.
  return kernel_table(core::active_isa());
}

}  // namespace longseq::kernels::cpu
