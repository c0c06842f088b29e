#pragma once
// LM head + cross-entropy on a GPU, fused: the twin of kernels/cpu/lm_head.hpp's
// lm_head_ce_fused, with its contract, types and options on device pointers; the specification is
// kernels/ref/cross_entropy.hpp (the kernel registry, tests/kernels/kernel_cases.hpp, checks one
// against the other).
//
// Legend: T tokens, C hidden, V vocabulary, Bs token tile. hidden [T, C], weight [V, C], labels
// int32 [T] (the next token, or o.ignore_index), dhidden [T, C], dweight [V, C]: device memory of
// o.exec's GPU.
//
//   logits = hidden weight^T,  loss_t = logsumexp(logits[t]) - logits[t, labels[t]]
//   returned: sum of loss_t over non-ignored tokens (fp64, summed in token order), their count
//   dlogits = grad_scale * (softmax(logits) - onehot(label)): dhidden = dlogits weight
//   (overwritten), dweight += dlogits^T hidden (accumulated, as on the CPU)
//
// How: the logits are never materialised for the whole sequence. Per token tile of Bs rows: one
// cuBLASLt product writes the tile's logits [Bs, V] (fp32, or bf16 at bf16 compute); one kernel
// per row (a block of 1024 threads, 512 on bf16 logits) takes the row's logsumexp in one pass (an
// online max and sum, exponentials in fp32 summed in fp64 as the CPU does), the loss, then turns
// the row into dlogits in place; two products give the tile's dhidden rows and add its share of
// dweight. Memory: Bs x V logits (4 bytes each, 2 at bf16 compute, where V x C and Bs x C bf16
// operands come on top) and 12 bytes per token, never [T, V]. o.vocab_tile is the CPU's
// online-logsumexp step and is not used here (a row is one block's).
//
// Precision: o.compute f32 multiplies in exact fp32 (no TF32), logits and dlogits fp32. bf16
// rounds hidden, weight and dlogits to bf16 for the products (fp32 accumulation), as the CPU's
// bf16 path does, and also rounds the logits to bf16 (nearest even, from the fp32 accumulation)
// before the softmax, as PyTorch's bf16 F.cross_entropy(x @ W.T) does and the CPU's bf16 path
// does not: each logit moves by at most 2^-9 |logit|, the loss of a row by at most 2^-9 (max |z|
// + |z_label|), each softmax value by a factor within exp(+-2^-8 max |z|) (tests/README.md rule
// 2). That halves the tile's bytes, so the tile holds 4x the rows of the fp32 one (2048 at V =
// 128256) in the same 512 MiB. The logsumexp, softmax and loss are computed in fp32/fp64 either
// way.
//
// Execution and errors: queued on o.exec's stream, then the stream is synchronised once at the
// end to return the loss (the call is blocking, as the CPU's). Labels live on the device, so they
// are checked by the row kernel rather than before the products: a label outside [0, V) that is
// not the ignore index throws core::Error("[model] label L at row R outside the vocabulary ...")
// (the CPU's message) after the work ran, and dhidden and dweight then hold the result with the
// bad rows treated as ignored. A CPU context is refused naming the kernel; dims that are negative,
// or V < 1, throw core::Error("[kernels] ...") naming them. Deterministic: every reduction has a
// fixed order and the products' algorithms are fixed per shape (kernels/cuda/gemm.hpp).
#include <cstddef>
#include <cstdint>

#include "longseq/core/device.hpp"
#include "longseq/kernels/cpu/lm_head.hpp"

namespace longseq::kernels::cuda {

// The CPU's contract types (kernels/cpu/lm_head.hpp, C++17-clean), so a caller switches device by
// switching namespace and o.exec. Call these functions qualified (kernels::cuda::...): their
// arguments are kernels::cpu types, so an unqualified call also finds the CPU's by
// argument-dependent lookup and is ambiguous.
using cpu::LmHeadDims;
using cpu::LmHeadOptions;
using cpu::LossPart;

/// Token rows per tile: o.token_tile, or when <= 0 about 2^26 / V rows at f32 compute (a 256 MiB
/// fp32 logits tile: 512 rows at V = 128256, where each product still fills an H100) and 2^28 / V
/// at bf16 (a 512 MiB bf16 tile: 2048 rows, so that dweight's fp32 read-modify-write per tile
/// is amortised over a product of K = 2048), within [64, 4096], rounded down to a multiple of
/// 128 from 128 up; never more than T (at least 1).
int64_t lm_head_token_tile(const LmHeadDims& d, const LmHeadOptions& o);

/// Bytes of device scratch lm_head_ce_fused allocates for these dims and options (one allocation,
/// freed before it returns).
size_t lm_head_workspace_bytes(const LmHeadDims& d, const LmHeadOptions& o);

/// Fused loss and gradients (see the header comment). Blocking.
LossPart lm_head_ce_fused(const float* hidden, const float* weight, const int32_t* labels,
                          const LmHeadDims& d, double grad_scale, float* dhidden, float* dweight,
                          const LmHeadOptions& o);

}  // namespace longseq::kernels::cuda
