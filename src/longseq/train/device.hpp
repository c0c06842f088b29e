#pragma once
// Where the trainer computes (--device, design.md §10): the model's kernels, its attention and the
// MFU denominator of a CPU or a GPU. The one place in train/ that knows whether this build has
// CUDA: everything else takes what these return.
//
// On a GPU (issue "GPU III", first stage): one rank holds the whole sequence and the whole model
// (world 1). Parameters, gradients and AdamW's moments live on the GPU (a DeviceReplica and a
// DeviceOptimizer) and every step runs there: forward, backward, gradient norm, clipping, AdamW.
// The host's ShardedState is what checkpoints are written from and --resume reads into: it is
// brought up to date from the GPU before a save and at the end, and the GPU from it after a
// restore (train/run.hpp sync_to_device / sync_from_device), so a checkpoint is the same file
// whatever trained it.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "longseq/attention/algorithm.hpp"
#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/device_replica.hpp"
#include "longseq/model/kernels.hpp"
#include "longseq/train/optimizer.hpp"

namespace longseq::train {

/// AdamW beside a DeviceReplica: the moments and the weight-decay mask on the replica's device;
/// the gradient norm, clipping and update run there (kernels/cuda on a GPU; on a CPU the loops of
/// train/optimizer.hpp, bit for bit: the trainer's own path at world 1).
class DeviceOptimizer {
 public:
  /// For `replica` (which must outlive it). decay: replica.total() bytes, 1 where weight decay
  /// applies (in the replica's layout). Moments zero. Throws core::Error naming the device for a
  /// GPU in a build without CUDA.
  DeviceOptimizer(model::DeviceReplica& replica, const std::vector<uint8_t>& decay);
  /// ||g||_2 over every gradient of the replica (fp64 sum of squares; on a CPU train::sum_squares,
  /// as global_grad_norm at world 1).
  double grad_norm() const;
  /// Scales the replica's gradients by clip_factor(norm, c.grad_clip) (clip_gradients), then one
  /// AdamW step at `lr`.
  void step(double norm, const AdamWConfig& c, double lr, int64_t step);
  /// Unit `unit` of exp_avg (which 1) or exp_avg_sq (2), to or from the host (the unit's size).
  void to_host(int unit, int which, float* out) const;
  void from_host(int unit, int which, const float* in);

 private:
  float* moment(int which);
  const float* moment(int which) const;

  model::DeviceReplica* replica_;
  core::Buffer<float> m_, v_;
  core::Buffer<uint8_t> decay_;
};

/// Whether this build can run `--device cuda` (built with the CUDA backend).
bool cuda_built();

/// --device of train, eval, generate and passkey: core::Device::parse(device, component). On a GPU
/// above world 1 the ranks are threads of one process sharing it (the local backend moves device
/// buffers; every rank holds the whole model), so an mpirun job is refused with
/// core::Error("[component] --device D at
/// --world P runs its ranks as threads of one process sharing the GPU; under mpirun ...").
core::Device parse_shared_device(std::string_view component, const std::string& device, int world);

/// The model's kernels on `device`: CpuKernels(threads) for the CPU; for cuda:N the CUDA kernels
/// with that GPU made current on the calling thread. Throws core::Error("[component] --device
/// ...") naming the device when this build has no CUDA backend or the runtime sees no such GPU
/// (then with the runtime's words). `component`: the command that asked (train, eval).
std::unique_ptr<model::Kernels> device_kernels(core::Device device, int threads,
                                               std::string_view component = "train");

/// The attention operator of a step: the distributed executor on a CPU
/// (model::make_distributed_attention over `group`); on cuda:N, the whole-sequence GPU attention
/// for a layout of one rank, else the same executor on the GPU (its backend registered here; the
/// group's ranks are threads of the local backend sharing the GPU, each with its own stream).
/// Same errors as device_kernels.
std::unique_ptr<model::AttentionOp> device_attention(
    core::Device device, const attention::Algorithm& algo,
    std::shared_ptr<const attention::MaskSpec> mask, const attention::Layout& layout,
    comm::Group& group, int threads, core::DType precision, std::string_view component = "train");

/// Makes the attention executor runnable on `device` (attention::AttentionSpec::device): on a
/// GPU registers its backend and checks the GPU on the calling thread; nothing on the CPU. Throws
/// device_kernels' errors ("[component] --device ...": no CUDA in this build, no such GPU).
void prepare_device_executor(core::Device device, std::string_view component);

/// data[0, n) = the sum over `group` of every rank's data[0, n), on every rank, where data is
/// memory of `device` (the gradients of ranks that share a GPU, each holding a whole replica).
/// Collective. comm moves device memory but does not reduce it, so the sum is an all-to-all of
/// 1/P blocks, each block summed on the device in member order, and an all-gather: every rank gets
/// the same bits, and a repeat the same bits again (not those of comm's ring all_reduce). At most
/// 16M floats per round, so the temporaries stay within 2 x 64 MiB whatever n is. On the CPU the
/// same steps run on the host. A GPU's executor backend must be registered first
/// (prepare_device_executor; attach_device_state does it).
void device_all_reduce(float* data, int64_t n, core::Device device, comm::Group& group);

/// The measured peak the MFU is taken against, GFLOP/s at `precision`: on a CPU, single-thread
/// GEMM times the hardware threads (measure_peak_gflops); on a GPU, its cuBLASLt GEMM rate
/// (model/cuda/kernels_cuda.hpp gemm_peak_gflops).
double device_peak_gflops(core::Device device, core::DType precision);

/// How the peak was measured, for metrics.json's mfu_formula.
std::string device_peak_formula(core::Device device);

/// The most device memory (MiB) the process's tensors held on `device` since it started: 0 on a
/// CPU (the trainer reports the host's peak RSS there), kernels::cuda::memory_stats's peak on a
/// GPU.
double device_peak_mib(core::Device device);

/// The processor's name: the CPU's brand string, or the GPU's name.
std::string device_name(core::Device device);

/// A GPU's memory in bytes, as its runtime reports it (cudaDeviceProp::totalGlobalMem). Throws
/// core::Error naming the device for the CPU, in a build without CUDA, or where the runtime sees
/// no such GPU.
double device_memory_bytes(core::Device device);

/// The rate of a blocking device-to-device copy of `bytes` on `device` (2 x bytes / seconds: read
/// and write), best of `repeats` after a warm-up; on a GPU its buffers are dropped from the peak
/// device_peak_mib reports. Same errors as device_kernels.
double device_copy_bandwidth(core::Device device, size_t bytes, int repeats);

}  // namespace longseq::train
