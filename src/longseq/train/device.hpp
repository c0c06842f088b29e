#pragma once
// Where the trainer computes (--device, design.md §10): the model's kernels, its attention and the
// MFU denominator of a CPU or a GPU. The one place in train/ that knows whether this build has
// CUDA: everything else takes what these return.
//
// On a GPU (issue "GPU III", first stage): one rank holds the whole sequence and the whole model
// (world 1). The host's ShardedState stays the run's state (parameters, AdamW moments,
// checkpoints, everything --resume reads); each step copies the parameters to a DeviceReplica on
// the GPU, runs the forward and backward there, and copies the gradients back, where the host's
// AdamW applies them (train/step.cpp). Moving the optimizer onto the GPU removes two copies of
// the parameters per step; it is the next stage (docs/gpu.md).
#include <memory>
#include <string>

#include "longseq/attention/algorithm.hpp"
#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/kernels.hpp"

namespace longseq::train {

/// Whether this build can run `--device cuda` (built with the CUDA backend).
bool cuda_built();

/// The model's kernels on `device`: CpuKernels(threads) for the CPU; for cuda:N the CUDA kernels
/// with that GPU made current on the calling thread. Throws core::Error("[train] --device ...")
/// naming the device when this build has no CUDA backend or the runtime sees no such GPU.
std::unique_ptr<model::Kernels> device_kernels(core::Device device, int threads);

/// The attention operator of a step: the distributed executor on a CPU
/// (model::make_distributed_attention over `group`), the whole-sequence GPU attention on cuda:N
/// (which needs a layout of one rank). Same errors as device_kernels.
std::unique_ptr<model::AttentionOp> device_attention(
    core::Device device, const attention::Algorithm& algo,
    std::shared_ptr<const attention::MaskSpec> mask, const attention::Layout& layout,
    comm::Group& group, int threads, core::DType precision);

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

}  // namespace longseq::train
