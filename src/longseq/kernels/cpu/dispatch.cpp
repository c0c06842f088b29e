// The variant tables of this build and the choice among them (dispatch.hpp).
#include "longseq/kernels/cpu/dispatch.hpp"

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

constexpr core::Isa kBuilt[] = {
    core::Isa::portable,
#if defined(LONGSEQ_ISA_AVX2_BUILT)
    core::Isa::avx2,
#endif
#if defined(LONGSEQ_ISA_AVX512_BUILT)
    core::Isa::avx512,
#endif
#if defined(LONGSEQ_ISA_AVX512_BF16_BUILT)
    core::Isa::avx512_bf16,
#endif
};

const KernelTable* table_or_null(core::Isa isa) {
  switch (isa) {
    case core::Isa::portable:
      return &isa_portable::kTable;
#if defined(LONGSEQ_ISA_AVX2_BUILT)
    case core::Isa::avx2:
      return &isa_avx2::kTable;
#endif
#if defined(LONGSEQ_ISA_AVX512_BUILT)
    case core::Isa::avx512:
      return &isa_avx512::kTable;
#endif
#if defined(LONGSEQ_ISA_AVX512_BF16_BUILT)
    case core::Isa::avx512_bf16:
      return &isa_avx512_bf16::kTable;
#endif
    default:
      return nullptr;
  }
}

}  // namespace

std::span<const core::Isa> built_isas() {
  return kBuilt;
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
