#include "longseq/train/device.hpp"

#include <cmath>

#include "longseq/core/cpu.hpp"
#include "longseq/core/error.hpp"
#include "longseq/train/trainer.hpp"
#if defined(LONGSEQ_WITH_CUDA)
#include "longseq/kernels/cuda/adamw.hpp"
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

DeviceOptimizer::DeviceOptimizer(const model::DeviceReplica& replica,
                                 const std::vector<uint8_t>& decay)
    : layout_(&replica.layout()), device_(replica.device()) {
  LONGSEQ_CHECK(static_cast<int64_t>(decay.size()) == replica.total());
#if !defined(LONGSEQ_WITH_CUDA)
  if (!device_.is_cpu()) no_cuda(device_);
#endif
  for (int u = 0; u < layout_->num_units(); ++u) offset_.push_back(replica.offset(u));
  const auto n = static_cast<size_t>(replica.total());
  m_ = core::Buffer<float>(n, device_, "exp_avg");
  v_ = core::Buffer<float>(n, device_, "exp_avg_sq");
  decay_ = core::Buffer<uint8_t>(n, device_, core::Uninit{}, "weight decay mask");
  core::copy_bytes(decay_.data(), device_, decay.data(), core::Device::cpu(), n);
}

double DeviceOptimizer::grad_norm(const model::DeviceReplica& r) const {
  if (device_.is_cpu()) {
    // global_grad_norm's loop (its all-reduce is the identity at world 1); the replica's gaps
    // are zeros, which leave the sum's bits alone.
    const float* g = r.grads();
    double ss = 0.0;
    for (int64_t i = 0; i < r.total(); ++i) ss += static_cast<double>(g[i]) * g[i];
    return std::sqrt(ss);
  }
#if defined(LONGSEQ_WITH_CUDA)
  return std::sqrt(
      kernels::cuda::sum_squares(r.grads(), r.total(), core::Exec::gpu(device_, nullptr)));
#else
  no_cuda(device_);
#endif
}

void DeviceOptimizer::step(model::DeviceReplica& r, double norm, const AdamWConfig& c, double lr,
                           int64_t step) {
  const int64_t n = r.total();
  if (device_.is_cpu()) {
    clip_gradients(r.grads(), n, norm, c.grad_clip);
    adamw_step(r.params(), r.grads(), m_.data(), v_.data(), decay_.data(), n, c, lr, step);
    return;
  }
#if defined(LONGSEQ_WITH_CUDA)
  const core::Exec exec = core::Exec::gpu(device_, nullptr);
  // clip_gradients' factor, computed on the host exactly as there.
  if (c.grad_clip > 0 && norm > c.grad_clip)
    kernels::cuda::scale(r.grads(), n, static_cast<float>(c.grad_clip / norm), exec);
  kernels::cuda::AdamWStep s;
  s.lr = lr;
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.eps = c.eps;
  s.weight_decay = c.weight_decay;
  s.step = step;
  kernels::cuda::adamw_step(r.params(), r.grads(), m_.data(), v_.data(), decay_.data(), n, s, exec);
#else
  no_cuda(device_);
#endif
}

std::vector<float> DeviceOptimizer::download(int unit, int which) const {
  LONGSEQ_CHECK(which == 1 || which == 2);
  const auto n = static_cast<size_t>(layout_->units().at(static_cast<size_t>(unit)).size);
  std::vector<float> out(n);
  const float* src = (which == 1 ? m_.data() : v_.data()) + offset_.at(static_cast<size_t>(unit));
  core::copy_bytes(out.data(), core::Device::cpu(), src, device_, n * sizeof(float));
  return out;
}

void DeviceOptimizer::upload(int unit, int which, const float* values) {
  LONGSEQ_CHECK(which == 1 || which == 2);
  const auto n = static_cast<size_t>(layout_->units().at(static_cast<size_t>(unit)).size);
  float* dst = (which == 1 ? m_.data() : v_.data()) + offset_.at(static_cast<size_t>(unit));
  core::copy_bytes(dst, device_, values, core::Device::cpu(), n * sizeof(float));
}

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
