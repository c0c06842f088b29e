#include "longseq/train/device.hpp"

#include <algorithm>
#include <cmath>

#include "longseq/attention/exec_device.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/cpu.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/train/trainer.hpp"
#if defined(LONGSEQ_WITH_CUDA)
#include "longseq/attention/cuda/exec_device.hpp"
#include "longseq/kernels/cuda/adamw.hpp"
#include "longseq/kernels/cuda/device.hpp"
#include "longseq/model/cuda/kernels_cuda.hpp"
#endif

namespace longseq::train {

#if !defined(LONGSEQ_WITH_CUDA)
namespace {

// A GPU asked of a build without the CUDA backend: the same error from every entry point.
[[noreturn]] void no_cuda(core::Device device, std::string_view component = "train") {
  core::fail(component, "--device ", device.str(),
             ": this build has no CUDA backend (configure with a CUDA toolkit: LONGSEQ_CUDA=ON, "
             "docs/gpu.md); use --device cpu");
}

}  // namespace
#endif

DeviceOptimizer::DeviceOptimizer(model::DeviceReplica& replica, const std::vector<uint8_t>& decay)
    : replica_(&replica) {
  const core::Device device = replica.device();
  LONGSEQ_CHECK(static_cast<int64_t>(decay.size()) == replica.total());
#if !defined(LONGSEQ_WITH_CUDA)
  if (!device.is_cpu()) no_cuda(device);
#endif
  const auto n = static_cast<size_t>(replica.total());
  m_ = core::Buffer<float>(n, device, "exp_avg");
  v_ = core::Buffer<float>(n, device, "exp_avg_sq");
  decay_ = core::Buffer<uint8_t>(n, device, core::Uninit{}, "weight decay mask");
  core::copy_bytes(decay_.data(), device, decay.data(), core::Device::cpu(), n);
}

double DeviceOptimizer::grad_norm() const {
  const model::DeviceReplica& r = *replica_;
  // On a CPU, global_grad_norm's sum (its all-reduce is the identity at world 1); the replica's
  // gaps are zeros, which leave the sum's bits alone.
  if (r.device().is_cpu()) return std::sqrt(sum_squares(r.grads(), r.total()));
#if defined(LONGSEQ_WITH_CUDA)
  return std::sqrt(
      kernels::cuda::sum_squares(r.grads(), r.total(), core::Exec::gpu(r.device(), nullptr)));
#else
  no_cuda(r.device());
#endif
}

void DeviceOptimizer::step(double norm, const AdamWConfig& c, double lr, int64_t step) {
  model::DeviceReplica& r = *replica_;
  const int64_t n = r.total();
  if (r.device().is_cpu()) {
    clip_gradients(r.grads(), n, norm, c.grad_clip);
    adamw_step(r.params(), r.grads(), m_.data(), v_.data(), decay_.data(), n, c, lr, step);
    return;
  }
#if defined(LONGSEQ_WITH_CUDA)
  const core::Exec exec = core::Exec::gpu(r.device(), nullptr);
  // clip_gradients' factor and its fp32 rounding, as on the host.
  const double f = clip_factor(norm, c.grad_clip);
  if (f != 1.0) kernels::cuda::scale(r.grads(), n, static_cast<float>(f), exec);
  kernels::cuda::AdamWStep s;
  s.lr = lr;
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.eps = c.eps;
  s.weight_decay = c.weight_decay;
  s.step = step;
  kernels::cuda::adamw_step(r.params(), r.grads(), m_.data(), v_.data(), decay_.data(), n, s, exec);
#else
  no_cuda(r.device());
#endif
}

float* DeviceOptimizer::moment(int which) {
  LONGSEQ_CHECK(which == 1 || which == 2);
  return which == 1 ? m_.data() : v_.data();
}

const float* DeviceOptimizer::moment(int which) const {
  LONGSEQ_CHECK(which == 1 || which == 2);
  return which == 1 ? m_.data() : v_.data();
}

void DeviceOptimizer::to_host(int unit, int which, float* out) const {
  replica_->unit_to_host(moment(which), unit, out);
}

void DeviceOptimizer::from_host(int unit, int which, const float* in) {
  replica_->unit_from_host(moment(which), unit, in);
}

bool cuda_built() {
#if defined(LONGSEQ_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

core::Device parse_shared_device(std::string_view component, const std::string& device, int world) {
  const core::Device d = core::Device::parse(device, component);
  core::require(d.is_cpu() || world == 1 || !comm::launched_by_mpirun(), component, "--device ",
                device, " at --world ", world,
                " runs its ranks as threads of one process sharing the GPU; under mpirun each "
                "process would need a GPU of its own (not built yet): start it without mpirun");
  return d;
}

std::unique_ptr<model::Kernels> device_kernels(core::Device device, int threads,
                                               std::string_view component) {
  if (device.is_cpu()) return std::make_unique<model::CpuKernels>(threads);
#if defined(LONGSEQ_WITH_CUDA)
  try {
    return model::cuda::make_kernels(device);
  } catch (const core::Error& e) {
    // The runtime's words ("[cuda] no GPU 0: ..."), under the command and flag that asked.
    core::fail(component, "--device ", device.str(), ": ", e.what());
  }
#else
  no_cuda(device, component);
#endif
}

std::unique_ptr<model::AttentionOp> device_attention(
    core::Device device, const attention::Algorithm& algo,
    std::shared_ptr<const attention::MaskSpec> mask, const attention::Layout& layout,
    comm::Group& group, int threads, core::DType precision, std::string_view component) {
  // The executor: on the CPU, or on a GPU that ranks of the local backend share (a missing GPU
  // refused here, before the first pass). One rank on a GPU holds the whole sequence: one kernel.
  if (device.is_cpu() || layout.world() > 1) {
    prepare_device_executor(device, component);
    return model::make_distributed_attention(algo, std::move(mask), layout, group, threads,
                                             precision, device);
  }
#if defined(LONGSEQ_WITH_CUDA)
  try {
    return model::cuda::make_local_attention(std::move(mask), layout, precision, device);
  } catch (const core::Error& e) {
    // As device_kernels: the attention's own words (no such GPU, a layout of several ranks)
    // under the command and flag that asked.
    core::fail(component, "--device ", device.str(), ": ", e.what());
  }
#else
  no_cuda(device, component);
#endif
}

void prepare_device_executor(core::Device device, std::string_view component) {
  if (device.is_cpu()) return;
#if defined(LONGSEQ_WITH_CUDA)
  try {
    attention::cuda::register_exec_device();
    (void)attention::exec_device(device, 1);
  } catch (const core::Error& e) {
    core::fail(component, "--device ", device.str(), ": ", e.what());
  }
#else
  no_cuda(device, component);
#endif
}

void device_all_reduce(float* data, int64_t n, core::Device device, comm::Group& group) {
  const int p = group.size();
  if (p == 1 || n == 0) return;
  const std::shared_ptr<attention::ExecDevice> dev = attention::exec_device(device, 1);
  dev->enter();  // the backward that wrote `data` ran on the device's default stream
  constexpr int64_t kRound = int64_t{1} << 24;
  for (int64_t at = 0; at < n; at += kRound) {
    const int64_t len = std::min(kRound, n - at), b = (len + p - 1) / p;
    const auto bytes = static_cast<size_t>(b) * sizeof(float);
    // [P blocks of b] with the tail past len zero, so every member's block has b floats.
    core::Buffer<std::byte> send = dev->alloc(p * bytes, "all-reduce send"),
                            recv = dev->alloc(p * bytes, "all-reduce receive");
    dev->copy(send.data(), data + at, static_cast<size_t>(len) * sizeof(float));
    dev->sync();
    group.all_to_all(send.data(), recv.data(), static_cast<size_t>(b), core::DType::f32);
    // Our block, summed over the members in member order; then every block to every rank.
    auto* in = reinterpret_cast<float*>(recv.data());
    float* mine = reinterpret_cast<float*>(send.data());  // send is free again: reuse its block 0
    dev->copy(mine, in, bytes);
    for (int m = 1; m < p; ++m) dev->add(mine, in + m * b, b);
    dev->sync();
    group.all_gather(mine, recv.data(), static_cast<size_t>(b), core::DType::f32);
    dev->copy(data + at, recv.data(), static_cast<size_t>(len) * sizeof(float));
    dev->sync();  // before `send` and `recv` go
  }
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

double device_memory_bytes(core::Device device) {
  core::require(!device.is_cpu(), "train", "device memory of ", device.str(),
                ": a GPU's (the host's is MemTotal)");
#if defined(LONGSEQ_WITH_CUDA)
  kernels::cuda::activate(device.index);  // throws naming the index when there is no such GPU
  for (const kernels::cuda::GpuInfo& g : kernels::cuda::runtime_info().gpus)
    if (g.index == device.index) return static_cast<double>(g.total_bytes);
  core::fail("train", "--device ", device.str(), ": the runtime lists no such GPU");
#else
  no_cuda(device);
#endif
}

double device_copy_bandwidth(core::Device device, size_t bytes, int repeats) {
  LONGSEQ_CHECK(bytes > 0 && repeats >= 1);
#if defined(LONGSEQ_WITH_CUDA)
  if (!device.is_cpu()) kernels::cuda::activate(device.index);
#else
  if (!device.is_cpu()) no_cuda(device);
#endif
  double best = 0;
  {
    core::Buffer<std::byte> a(bytes, device, "copy bandwidth source");
    core::Buffer<std::byte> b(bytes, device, core::Uninit{}, "copy bandwidth destination");
    core::copy_bytes(b.data(), device, a.data(), device, bytes);  // warm-up
    for (int i = 0; i < repeats; ++i) {
      core::Timer t;
      core::copy_bytes(b.data(), device, a.data(), device, bytes);  // blocking (core/device.hpp)
      best = std::max(best, 2.0 * static_cast<double>(bytes) / t.elapsed());
    }
  }
#if defined(LONGSEQ_WITH_CUDA)
  // The measurement's buffers are not a run's tensors (as gemm_peak_gflops' operands).
  if (!device.is_cpu()) kernels::cuda::reset_memory_peak(device.index);
#endif
  return best;
}

}  // namespace longseq::train
