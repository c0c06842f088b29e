#include <cstdio>

#include "commands.hpp"
#include "longseq/core/cpu.hpp"
#include "longseq/kernels/cpu/dispatch.hpp"
#include "longseq/kernels/gemm.hpp"

namespace longseq::cli {

std::function<int()> add_info(CLI::App&) {
  return [] {
    const core::CpuFeatures& f = core::cpu_features();
    const core::Isa isa = core::active_isa();
    std::string built;
    for (core::Isa b : kernels::cpu::built_isas()) built += std::string(" ") + core::isa_name(b);
    std::printf("longseq\n  gemm library: %s (%s)\n  mpi backend:  %s\n", kernels::gemm_library(),
                kernels::gemm_isa().c_str(),
#ifdef LONGSEQ_WITH_MPI
                "built"
#else
                "not built"
#endif
    );
    std::printf("  cpu:          %s (%s)\n  cpu features: %s\n",
                f.brand.empty() ? "unknown" : f.brand.c_str(),
                f.vendor.empty() ? "unknown vendor" : f.vendor.c_str(), f.list().c_str());
    std::printf("  kernel variants built:%s; best for this CPU: %s\n", built.c_str(),
                core::isa_name(core::best_isa(f)));
    // One table serves every family (kernels/cpu/dispatch.hpp), so they always agree.
    std::printf("  kernel variant: %s%s\n", core::isa_name(isa),
                isa == core::best_isa(f) ? "" : " (forced by LONGSEQ_ISA)");
    std::printf("    attention:            %s\n",
                core::isa_name(kernels::cpu::active_kernels().isa));
    std::printf("    norms, rope, swiglu:  %s\n",
                core::isa_name(kernels::cpu::active_kernels().isa));
    std::printf("    lm head + loss:       %s\n",
                core::isa_name(kernels::cpu::active_kernels().isa));
    std::printf("  bf16: %s\n", core::bf16_mode());
    return 0;
  };
}

}  // namespace longseq::cli
