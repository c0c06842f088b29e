#pragma once
// Fast CPU attention block kernels: one block of queries against one block of keys, in the
// (O, LSE) form the ring algorithms accumulate (design.md §2, §5). Flash style: queries and keys
// are tiled, the softmax is online, no score matrix larger than one tile exists, and the tile
// GEMMs go through kernels/gemm (BLAS). The later CUDA backend keeps these signatures.
//
// Legend: Tq query tokens, Tk key tokens, Hq query heads, Hkv key/value heads (Hq = g * Hkv, query
// head h uses kv head h / g; K/V are never repeated), D head dim.
// Layouts, row-major: q [Tq, Hq, D], k and v [Tk, Hkv, D], o and do [Tq, Hq, D], lse and
// delta [Tq, Hq], dq [Tq, Hq, D], dk and dv [Tk, Hkv, D]. LSE is the natural-log logsumexp of the
// masked, scaled scores. Inputs are fp32 or bf16 (q, k, v and do share one type); accumulation,
// partials (O, LSE), delta and gradients are always fp32.
//
// Masks: `mask` is a predicate over the *global* positions (and document ids) in `qt` / `kt`
// (kernels/mask.hpp), so a block may sit anywhere in the sequence (queries late and keys early or
// the reverse, as on a ring; striped or any other order). Each (query tile, key tile) pair is
// classified from the tiles' position and document-id ranges: empty pairs are skipped without
// touching q/k/v, full pairs skip the per-element mask, partial pairs evaluate the predicate per
// element (so any order of positions is correct; ranges only decide how much work is skipped).
// Padding tokens (pos < 0) see nothing and are seen by nobody; a row that sees no key gets
// O = 0, LSE = -inf and zero gradients, never NaN.
//
// Memory ("no hidden allocation"): every call takes a caller-owned fp32 workspace of at least
// `*_workspace_floats(dims, threads)` floats (contents on entry are irrelevant and are clobbered;
// 64-byte alignment is recommended, not required). The kernels allocate nothing else. The needs
// are O(threads * tile^2) for the forward and, for the backward, additionally (C - 1) dq-sized
// buffers when Hkv is too small to give the threads enough independent heads (see
// attention_backward_chunks).
//
// Threads: every call runs on at most `threads` OpenMP threads (threads <= 0 means 1), because
// several ranks may share one host's cores; GEMMs run single-threaded inside them. Work is
// partitioned into fixed tiles whose size and summation order never depend on `threads`, so every
// output is bit-identical for every thread count (and every run). Distinct calls may run
// concurrently when their outputs and workspaces do not overlap.
//
// Errors: shapes, pointers and workspace sizes come from code, not users: they are checked with
// LONGSEQ_CHECK.
#include <cstddef>
#include <cstdint>
#include <span>

#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/kernels/mask.hpp"
#include "longseq/kernels/ref/attention.hpp"

namespace longseq::kernels::cpu {

/// Same dims as the reference: tq, tk, hq, hkv, d (hq must be a multiple of hkv).
using AttnDims = ref::AttnDims;

/// Tile sizes (tokens). Fixed, never derived from the thread count (determinism). Chosen by
/// measurement at D = 128, T = 8192 (docs/kernels.md): a forward tile of 256 x 512 runs fp32 at
/// ~410 GFLOP/s on 2 threads against ~330 for 128 x 256 (the tile GEMMs get closer to the
/// large-matrix rate, and the per-tile softmax bookkeeping is amortised), bf16 ~730 against
/// ~620; the S tile (256 x 512 fp32, 512 KiB) still fits the 1 MiB L2. Backward 256 x 256 beats
/// 128 x 128 by ~4%. Causal cost stays ~0.5x full because contiguous diagonal tiles are trimmed.
inline constexpr int64_t kForwardTileQ = 256;
inline constexpr int64_t kForwardTileK = 512;
inline constexpr int64_t kBackwardTileQ = 256;
inline constexpr int64_t kBackwardTileK = 256;

/// Floats of workspace attention_block_forward needs for `dims` on `threads` threads.
size_t attention_forward_workspace_floats(const AttnDims& dims, const core::Exec& exec);

/// Partial attention of one query block against one key block:
///   o   [Tq, Hq, D] = softmax(scale * q k^T + mask) v      (normalised within this block)
///   lse [Tq, Hq]    = logsumexp(scale * q k^T + mask)       (natural log)
/// Both are overwritten. Rows that see no key of this block get o = 0, lse = -inf; merging such
/// a partial with merge_partials is a no-op. qt.pos has Tq entries, kt.pos Tk (and doc ids when
/// mask.docs). Blocking; uses at most `threads` threads.
void attention_block_forward(const float* q, const float* k, const float* v, const Tokens& qt,
                             const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                             const core::Exec& exec, std::span<float> workspace, float* o,
                             float* lse);
/// bf16 inputs; fp32 accumulation, o and lse fp32. P is rounded to bf16 for the P·V GEMM (as a
/// bf16 FlashAttention does); the error stays within 2x that of a naive bf16 attention
/// (tests/kernels/cpu_attention_test.cpp, design.md §9).
void attention_block_forward(const core::bf16* q, const core::bf16* k, const core::bf16* v,
                             const Tokens& qt, const Tokens& kt, const Mask& mask, float scale,
                             const AttnDims& dims, const core::Exec& exec,
                             std::span<float> workspace, float* o, float* lse);

/// Combines the partial (o_other, lse_other) into (o, lse) in place, for [T, H] rows of D:
///   lse' = logaddexp(lse, lse_other);  o' = exp(lse - lse') o + exp(lse_other - lse') o_other
/// Stable at large logits (weights are computed relative to the larger LSE); a side with
/// lse = -inf contributes nothing (its o is not read for that row, so garbage there cannot leak);
/// both -inf gives o = 0, lse = -inf. Merging is commutative up to rounding; a ring step merges in
/// a fixed order, so the result is deterministic.
///
/// Backward: no merge backward exists because none is needed. After all merges, (o, lse) are the
/// final output and the global LSE; attention_block_backward of every block with that global lse
/// and delta = rowsum(do * o_final) is exactly the gradient through all merges (the softmax
/// probabilities of a block are exp(s - lse_global)). So a ring keeps only the final (o, lse).
void merge_partials(float* o, float* lse, const float* o_other, const float* lse_other, int64_t t,
                    int64_t h, int64_t d, const core::Exec& exec);

/// delta [T, H] = rowsum(do * o) over D, in fp32 (fp32 or bf16 inputs; o is the *final*, merged
/// output). Computed once on the rank that owns o; BurstAttention circulates delta and lse
/// instead of o. Bit-identical for every thread count.
void attention_delta(const float* dout, const float* o, int64_t t, int64_t h, int64_t d,
                     const core::Exec& exec, float* delta);
void attention_delta(const core::bf16* dout, const core::bf16* o, int64_t t, int64_t h, int64_t d,
                     const core::Exec& exec, float* delta);
void attention_delta(const core::bf16* dout, const float* o, int64_t t, int64_t h, int64_t d,
                     const core::Exec& exec, float* delta);

/// Number of fixed key-tile chunks C the backward splits each kv head into (a function of dims
/// only, never of threads). Work units are (kv head, chunk); chunk c owns key tiles c, c + C, ...
/// (interleaved so causal work is balanced). Chunk c accumulates its dq contributions into its
/// own zeroed head-major [Hq, Tq, D] workspace buffer (dense, so the tile GEMMs accumulate in
/// place), and the buffers are added to dq in order c = 0..C-1 at the end: a fixed summation
/// order whatever the thread count.
/// Worked example: Hkv = 8 gives C = 1 (8 independent heads, one buffer); Hkv = 2 gives C = 4
/// (8 units, 4 buffers); Hkv = 1 (MQA) gives C = 8. dims.chunk_hkv > 0 stands for Hkv here.
int64_t attention_backward_chunks(const AttnDims& dims);

/// Floats of workspace attention_block_backward needs for `dims` on `threads` threads.
size_t attention_backward_workspace_floats(const AttnDims& dims, const core::Exec& exec);

/// Gradients of one (query block, key block) pair, *accumulated*: dq += dL/dq, dk += dL/dk,
/// dv += dL/dv, where the block's probabilities are P = exp(scale * q k^T + mask - lse) with the
/// final (global, merged) lse, and delta = rowsum(do * o_final) (attention_delta). o itself is
/// not an input, so the block's backward can run on a rank that never saw o (BurstAttention).
/// Rows with lse = -inf (saw nothing anywhere) contribute nothing. Blocking; at most `threads`
/// threads; bit-identical for every thread count.
void attention_block_backward(const float* q, const float* k, const float* v, const float* dout,
                              const float* lse, const float* delta, const Tokens& qt,
                              const Tokens& kt, const Mask& mask, float scale, const AttnDims& dims,
                              const core::Exec& exec, std::span<float> workspace, float* dq,
                              float* dk, float* dv);
/// bf16 inputs; fp32 accumulation and gradients. P and dS are rounded to bf16 for the gradient
/// GEMMs (as a bf16 FlashAttention does).
void attention_block_backward(const core::bf16* q, const core::bf16* k, const core::bf16* v,
                              const core::bf16* dout, const float* lse, const float* delta,
                              const Tokens& qt, const Tokens& kt, const Mask& mask, float scale,
                              const AttnDims& dims, const core::Exec& exec,
                              std::span<float> workspace, float* dq, float* dk, float* dv);

}  // namespace longseq::kernels::cpu
