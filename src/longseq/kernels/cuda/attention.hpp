#pragma once
// Attention block kernels on a GPU (issue "GPU II"): one block of queries against one block of
// keys in the (O, LSE) form, with the contract of kernels/cpu/attention.hpp on device pointers and
// a stream. The specification is the fp64 kernels/ref/attention.hpp.
//
// Legend and layouts as the CPU's: q [Tq, Hq, D], k and v [Tk, Hkv, D], o and do [Tq, Hq, D],
// lse and delta [Tq, Hq], dq [Tq, Hq, D], dk and dv [Tk, Hkv, D], row-major, all in device memory.
// Query head h uses kv head h / (Hq / Hkv); K/V are never repeated. Inputs fp32 or bf16 (q, k, v
// and do share one type); accumulation, o, lse, delta and gradients fp32.
//
// Masks: kernels/mask.hpp's predicate over *global* positions, as on the CPU. Here the token
// metadata (qt.pos, qt.doc, kt.pos, kt.doc) and mask.block_mask point to DEVICE memory (the
// executor keeps them there for the whole step; copying them per call would cost a host round
// trip). Tiles of 64 tokens are classified as kernels/cpu/tiles.cpp does (same rule: min/max of
// positions and document ids, block-mask rectangles of up to 4096 entries scanned): empty pairs
// are skipped without loading q/k/v, full pairs skip the per-element predicate, partial pairs
// evaluate it per element. Padding (pos < 0) sees nothing and is seen by nobody; a row that sees
// no key gets o = 0, lse = -inf and zero gradients, never NaN.
//
// Paths: bf16 inputs with D = 64 or 128 run the tensor-core kernels (mma.sync m16n8k16, sm_80+,
// so the same code runs on A100 and H100); P (forward) and P, dS (backward) are rounded to bf16
// for the second product, as a bf16 FlashAttention does. Every other case (fp32 inputs, any D up
// to kMaxGenericHeadDim) runs the generic kernels: fp32 CUDA-core arithmetic, exact order, meant
// for tests and odd shapes, not speed. D above kMaxGenericHeadDim is refused (core::Error).
//
// Memory ("no hidden allocation"): each call takes a caller-owned device workspace of at least
// attention_workspace_bytes(dims) bytes (16-byte aligned; contents on entry irrelevant); it holds
// the per-tile position summaries. Calls on one stream may share it.
//
// Determinism: no floating-point atomics. The backward is two passes (FlashAttention-2's split
// made deterministic): one thread block per (key tile, kv head) accumulates dk, dv over every
// query head of the group and every query tile in a fixed order; one per (query tile, query
// head) accumulates dq over the key tiles in order. Every output element has exactly one writer,
// so repeats are bit-identical, and the bits depend only on the inputs and dims.
//
// Execution: queued on `exec`'s stream (a CPU context is refused naming the kernel); asynchronous
// like every kernel under kernels/cuda/. Launch errors are checked after each launch.
//
// Errors: D out of range, Hkv not dividing Hq, negative sizes, a too-small workspace and
// mask.docs without document ids throw core::Error("[kernels.cuda.attention] ...") naming the
// values. A position beyond the block mask is not checked on the device (it would need a host
// round trip); the executor's mask spec guarantees it (and the CPU path checks the same plans).
#include <cstddef>
#include <cstdint>

#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/kernels/mask.hpp"
#include "longseq/kernels/ref/attention.hpp"

namespace longseq::kernels::cuda {

using AttnDims = ref::AttnDims;

/// Tokens per tile in every attention kernel (query and key tiles, forward and backward): the
/// granularity of the tile classification.
inline constexpr int64_t kAttnTile = 64;
/// The largest head dim the generic (fp32 / odd-D) kernels take.
inline constexpr int64_t kMaxGenericHeadDim = 256;

/// Bytes of device workspace every attention call below needs for `dims`.
size_t attention_workspace_bytes(const AttnDims& dims);

/// Whether (dtype, D) runs the tensor-core path (bf16 and D in {64, 128}); otherwise the generic
/// one. For benches and tests; the kernels choose by themselves.
bool attention_fast_path(core::DType input, int64_t d);

/// Tiles per thread block of the tensor-core kernels: 0 (the default) lets each launch choose
/// (two, 8 warps, where such blocks fill the GPU; else one, 4 warps); 1 or 2 force it, for tests
/// and benches. The output bits do not depend on it. Process-wide; returns the previous value.
int set_attention_block_tiles(int tiles);

/// o [Tq, Hq, D] = softmax(scale q k^T + mask) v, lse [Tq, Hq] its natural-log logsumexp; both
/// overwritten. Rows that see no key of this block: o = 0, lse = -inf.
void attention_block_forward(const float* q, const float* k, const float* v, const Tokens& qt,
                             const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                             const core::Exec& exec, void* workspace, size_t workspace_bytes,
                             float* o, float* lse);
/// bf16 inputs (tensor cores at D = 64, 128); fp32 o and lse.
void attention_block_forward(const core::bf16* q, const core::bf16* k, const core::bf16* v,
                             const Tokens& qt, const Tokens& kt, const Mask& mask, float scale,
                             const AttnDims& dims, const core::Exec& exec, void* workspace,
                             size_t workspace_bytes, float* o, float* lse);

/// delta [T, H] = rowsum(do * o) over D in fp32 (o the final, merged output). One warp per row,
/// a fixed reduction order.
void attention_delta(const float* dout, const float* o, int64_t t, int64_t h, int64_t d,
                     const core::Exec& exec, float* delta);
void attention_delta(const core::bf16* dout, const float* o, int64_t t, int64_t h, int64_t d,
                     const core::Exec& exec, float* delta);

/// Gradients of one (query block, key block) pair, ACCUMULATED as on the CPU: dq += dL/dq,
/// dk += dL/dk, dv += dL/dv, with P = exp(scale q k^T + mask - lse) from the final (global) lse
/// and delta = rowsum(do * o_final) (attention_delta). Rows with lse = -inf contribute nothing.
/// dq must not overlap dk or dv (the two passes run one after the other on the stream).
void attention_block_backward(const float* q, const float* k, const float* v, const float* dout,
                              const float* lse, const float* delta, const Tokens& qt,
                              const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                              const core::Exec& exec, void* workspace, size_t workspace_bytes,
                              float* dq, float* dk, float* dv);
void attention_block_backward(const core::bf16* q, const core::bf16* k, const core::bf16* v,
                              const core::bf16* dout, const float* lse, const float* delta,
                              const Tokens& qt, const Tokens& kt, const Mask& mask, float scale,
                              const AttnDims& dims, const core::Exec& exec, void* workspace,
                              size_t workspace_bytes, float* dq, float* dk, float* dv);

}  // namespace longseq::kernels::cuda
