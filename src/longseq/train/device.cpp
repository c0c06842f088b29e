#include "longseq/train/device.hpp"

#include "longseq/core/cpu.hpp"
#include "longseq/core/error.hpp"
#include "longseq/train/trainer.hpp"
#if defined(LONGSEQ_WITH_CUDA)
#include "longseq/kernels/cuda/device.hpp"
#include "longseq/model/cuda/kernels_cuda.hpp"
#endif

namespace longseq::train {

#if !defined(LONGSEQ_WITH_CUDA)
namespace {

// A GPU asked of a build without the CUDA backend: the same error from every entry point.
[[noreturn]] void no_cuda(core::Device device) {
  core::fail("train", "--device ", device.str(),
             ": this build has no CUDA backend (configure with a CUDA toolkit: LONGSEQ_CUDA=ON, "
             "docs/gpu.md); use --device cpu");
}

}  // namespace
#endif

bool cuda_built() {
#if defined(LONGSEQ_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

std::unique_ptr<model::Kernels> device_kernels(core::Device device, int threads) {
  if (device.is_cpu()) return std::make_unique<model::CpuKernels>(threads);
#if defined(LONGSEQ_WITH_CUDA)
  return model::cuda::make_kernels(device);
#else
  no_cuda(device);
#endif
}

std::unique_ptr<model::AttentionOp> device_attention(
    core::Device device, const attention::Algorithm& algo,
    std::shared_ptr<const attention::MaskSpec> mask, const attention::Layout& layout,
    comm::Group& group, int threads, core::DType precision) {
  if (device.is_cpu())
    return model::make_distributed_attention(algo, std::move(mask), layout, group, threads,
                                             precision);
#if defined(LONGSEQ_WITH_CUDA)
  return model::cuda::make_local_attention(std::move(mask), layout, precision, device);
#else
  no_cuda(device);
#endif
}

double device_peak_gflops(core::Device device, core::DType precision) {
  if (device.is_cpu()) return measure_peak_gflops(precision);
#if defined(LONGSEQ_WITH_CUDA)
  return model::cuda::gemm_peak_gflops(device, precision);
#else
  no_cuda(device);
#endif
}

std::string device_peak_formula(core::Device device) {
  if (device.is_cpu())
    return "single-thread GEMM 1024^3 at the run's precision (best of 3) * hardware threads";
  return "the GPU's cuBLASLt GEMM 8192^3 at the run's precision (best of 3 runs of 5)";
}

double device_peak_mib(core::Device device) {
  if (device.is_cpu()) return 0.0;
#if defined(LONGSEQ_WITH_CUDA)
  return static_cast<double>(kernels::cuda::memory_stats(device.index).peak) / (1024.0 * 1024.0);
#else
  no_cuda(device);
#endif
}

std::string device_name(core::Device device) {
  if (device.is_cpu()) return core::cpu_features().brand;
#if defined(LONGSEQ_WITH_CUDA)
  return model::cuda::gpu_name(device);
#else
  no_cuda(device);
#endif
}

}  // namespace longseq::train
