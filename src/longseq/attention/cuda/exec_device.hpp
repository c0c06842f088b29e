#pragma once
// The attention executor on a GPU (attention/exec_device.hpp; CUDA builds only, library
// longseq_attention_cuda): kernels/cuda's block kernels, merges and elementwise kernels on a
// non-blocking stream of the calling rank's own, so ranks that share one GPU (threads of the
// local backend) queue their work side by side and the GPU overlaps them.
//
// Each thread gets one device object per GPU (thread-local, made on first use): its stream, the
// attention workspace and the partial (O, LSE) scratch, which grow to the largest call seen (a
// grow waits for the stream first, since queued calls may still use the old buffer), and the
// token tables and block mask of the bound pass copied to the GPU (again only when another table
// or mask is bound).
//
// Ordering with the rest of the process: the model's kernels and core's copies run on the legacy
// default stream, which a non-blocking stream does not wait for. bind() therefore makes the
// rank's stream wait (on the GPU) for what the legacy stream has queued, so the inputs are
// complete before the first kernel reads them; the executor's final sync() makes its outputs
// complete before it returns.
namespace longseq::attention::cuda {

/// Registers the GPU's executor device with attention::register_exec_device (idempotent). After
/// it, AttentionSpec::device = cuda:N runs the executor on GPU N.
void register_exec_device();

}  // namespace longseq::attention::cuda
