#include "longseq/train/info.hpp"

#include <string>

#include "longseq/comm/launch.hpp"
#include "longseq/comm/nccl_backend.hpp"
#include "longseq/core/cpu.hpp"
#include "longseq/kernels/cpu/dispatch.hpp"
#include "longseq/kernels/gemm.hpp"
#if defined(LONGSEQ_WITH_CUDA)
#include "longseq/kernels/cuda/device.hpp"
#endif

namespace longseq::train {

const char* version() {
  return LONGSEQ_VERSION;
}

nlohmann::json build_info() {
  using nlohmann::json;
  const core::CpuFeatures& f = core::cpu_features();
  const core::Isa isa = core::active_isa();
  json built = json::array();
  for (core::Isa b : kernels::cpu::built_isas()) built.push_back(core::isa_name(b));
  // One table serves every kernel family (kernels/cpu/dispatch.hpp), so they always agree.
  const std::string family = core::isa_name(kernels::cpu::active_kernels().isa);
  json j = {
      {"version", version()},
      {"gemm", {{"library", kernels::gemm_library()}, {"isa", kernels::gemm_isa()}}},
      {"mpi", comm::mpi_available() ? "built" : "not built"},
      {"nccl", comm::nccl_built() ? "built" : "not built"},
      {"cpu",
       {{"brand", f.brand.empty() ? "unknown" : f.brand},
        {"vendor", f.vendor.empty() ? "unknown vendor" : f.vendor},
        {"features", f.list()}}},
      {"kernel_variants_built", built},
      {"best_variant", core::isa_name(core::best_isa(f))},
      {"kernel_variant", core::isa_name(isa)},
      {"kernel_variant_forced", isa != core::best_isa(f)},
      {"kernels", {{"attention", family}, {"norms_rope_swiglu", family}, {"lm_head", family}}},
      {"bf16", core::bf16_mode()},
  };
#if defined(LONGSEQ_WITH_CUDA)
  namespace kcu = kernels::cuda;
  const kcu::RuntimeInfo r = kcu::runtime_info();
  json gpus = json::array();
  for (const kcu::GpuInfo& g : r.gpus)
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"sm", std::to_string(g.major) + std::to_string(g.minor)},
                    {"memory_gib", static_cast<double>(g.total_bytes) / (1 << 30)},
                    {"multiprocessors", g.multiprocessors}});
  j["cuda"] = {{"built", true},
               {"archs", r.archs},
               {"runtime", kcu::version_string(r.runtime_version)},
               {"driver", r.driver_version ? json(kcu::version_string(r.driver_version)) : json()},
               {"status", r.status},
               {"gpus", gpus}};
#else
  j["cuda"] = {{"built", false}};
#endif
  return j;
}

}  // namespace longseq::train
