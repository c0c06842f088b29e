#pragma once
// The model on a GPU (issue "GPU III"): model/kernels.hpp's interface over kernels/cuda, and the
// attention of a rank that holds the whole sequence. CUDA builds only (library
// longseq_model_cuda); callers reach it behind `#if defined(LONGSEQ_WITH_CUDA)`.
//
// Execution: every kernel, copy and attention call of one Kernels is queued on the legacy default
// stream of its GPU, in call order, so each sees the results of the ones before it and of every
// blocking copy (core::copy_bytes) made before it was queued; results reach the host through
// blocking copies or synchronize(). Why one stream and not several: the model's steps are a chain
// (each kernel reads the last one's output); overlapping transfers with compute belongs to the
// device executor (several ranks on one GPU, each with its own stream), not to this layer.
#include <memory>
#include <string>

#include "longseq/attention/layout.hpp"
#include "longseq/attention/mask_spec.hpp"
#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/model/attention_op.hpp"
#include "longseq/model/kernels.hpp"

namespace longseq::model::cuda {

/// The kernels of GPU `device` (cuda:N), made current on the calling thread with its memory
/// registered (kernels::cuda::activate). Throws core::Error naming the device when it is not a
/// GPU or the runtime sees no such GPU. The LM head is fused only (`--loss unfused` is refused
/// naming the device).
std::unique_ptr<Kernels> make_kernels(core::Device device);

/// Attention of a rank that holds the whole sequence (`layout.world()` == 1), on GPU `device`:
/// one forward kernel and one two-pass backward over all L tokens (kernels/cuda/attention.hpp),
/// every mask by global positions, q, k, v and dO rounded to bf16 first when `precision` is bf16
/// (AttentionSpec's contract: fp32 views in, fp32 o, lse and gradients out, on the device). The
/// token positions, document ids and block mask are copied to the device here, and again by
/// set_mask. times(): wall seconds of each call, device work included (each call waits for it);
/// no waits (there is no communication). A layout of several ranks is refused: spreading a
/// sequence over ranks sharing a GPU is the executor's there (train::device_attention).
std::unique_ptr<AttentionOp> make_local_attention(std::shared_ptr<const attention::MaskSpec> mask,
                                                  const attention::Layout& layout,
                                                  core::DType precision, core::Device device);

/// The GPU's measured GEMM rate in GFLOP/s at `precision` (bf16: bf16 operands, fp32
/// accumulation; f32: fp32): the best of 3 timed runs of an 8192^3 product through cuBLASLt,
/// after a warm-up (the trainer's MFU denominator on a GPU).
double gemm_peak_gflops(core::Device device, core::DType precision);

/// The GPU's name as the runtime reports it ("NVIDIA H100 80GB HBM3"), or "" when it sees none.
std::string gpu_name(core::Device device);

}  // namespace longseq::model::cuda
