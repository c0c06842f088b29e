#include <cstdio>

#include "commands.hpp"
#include "longseq/core/cpu.hpp"
#include "longseq/kernels/cpu/dispatch.hpp"
#include "longseq/kernels/gemm.hpp"
#if defined(LONGSEQ_WITH_CUDA)
#include "longseq/kernels/cuda/device.hpp"
#endif

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
#if defined(LONGSEQ_WITH_CUDA)
    namespace kcu = kernels::cuda;
    const kcu::RuntimeInfo r = kcu::runtime_info();
    std::printf("  cuda: built for sm %s; runtime %s, driver %s; %zu GPU(s)%s%s\n", r.archs.c_str(),
                kcu::version_string(r.runtime_version).c_str(),
                r.driver_version ? kcu::version_string(r.driver_version).c_str() : "none",
                r.gpus.size(), r.status == "ok" ? "" : ": ",
                r.status == "ok" ? "" : r.status.c_str());
    for (const kcu::GpuInfo& g : r.gpus)
      std::printf("    gpu %d: %s, sm_%d%d, %.1f GiB, %d SMs\n", g.index, g.name.c_str(), g.major,
                  g.minor, static_cast<double>(g.total_bytes) / (1 << 30), g.multiprocessors);
#else
    std::printf("  cuda: not built (no CUDA toolkit at configure time, or LONGSEQ_CUDA=OFF)\n");
#endif
    return 0;
  };
}

}  // namespace longseq::cli
