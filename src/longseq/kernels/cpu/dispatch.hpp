#pragma once
// Which kernel variant runs (design.md §10). Every variant in kernels/cpu/isa/ is the same source
// compiled for one ISA level (portable, avx2, avx512, avx512_bf16) into its own namespace, and
// exports one KernelTable. The public entry points (attention.hpp, ...) check their arguments once
// and call the table of core::active_isa(); tests and benchmarks may call any built variant's
// table directly to compare them in one process.
#include <cstddef>
#include <cstdint>
#include <span>

#include "longseq/core/cpu.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/kernels/mask.hpp"
#include "longseq/kernels/ref/attention.hpp"

namespace longseq::kernels::cpu {

/// The element-wise kernels of one variant (kernels/cpu/isa/pointwise.cpp), with the contracts
/// of the public functions of the same names (rmsnorm.hpp, swiglu.hpp, attention.hpp), arguments
/// already checked. rope_rotate is RopeTable's rotation of x [T, H, D] by the tables cos, sin
/// [T, D/2] (sign -1: the backward), skipping rows with pad[t] != 0. lm_lse_update and
/// lm_softmax_rows are the fused LM head's row passes (lm_head.cpp).
struct PointwiseTable {
  void (*rmsnorm_forward)(const float* x, const float* weight, int64_t t, int64_t c, float eps,
                          float* out, float* rstd, int threads);
  void (*rmsnorm_backward)(const float* dout, const float* x, const float* weight,
                           const float* rstd, int64_t t, int64_t c, float* dx, float* dweight,
                           bool accumulate, int threads);
  void (*rope_rotate)(float* x, int64_t t, int64_t h, int64_t d, const float* cos, const float* sin,
                      const uint8_t* pad, float sign, int threads);
  void (*swiglu_forward)(const float* gate, const float* up, int64_t n, float* out);
  void (*swiglu_backward)(const float* dout, const float* gate, const float* up, int64_t n,
                          float* dgate, float* dup);
  void (*merge_partials)(float* o, float* lse, const float* o_other, const float* lse_other,
                         int64_t t, int64_t h, int64_t d, int threads);
  void (*attention_delta_f32)(const float* dout, const float* o, int64_t t, int64_t h, int64_t d,
                              int threads, float* delta);
  void (*attention_delta_bf16)(const core::bf16* dout, const core::bf16* o, int64_t t, int64_t h,
                               int64_t d, int threads, float* delta);
  void (*attention_delta_bf16_f32)(const core::bf16* dout, const float* o, int64_t t, int64_t h,
                                   int64_t d, int threads, float* delta);
  /// Online logsumexp of rows [n, bv] (row stride v) merged into (m, s): running max and sum.
  void (*lm_lse_update)(const float* tile, int64_t n, int64_t bv, int64_t v, double* m, double* s,
                        int threads);
  /// row[j] = grad_scale * e^(row[j] - lse[r]) for rows [n, v].
  void (*lm_softmax_rows)(float* logits, const float* lse, int64_t n, int64_t v, float grad_scale,
                          int threads);
  /// The variant's fp32 e^x (exposed for tests: relative error ~1.2e-7).
  float (*exp)(float x);
};

/// Entry points of one variant. The attention functions have the contracts of attention.hpp with
/// the arguments already checked (dims, tokens, workspace size); the backward also takes
/// attention_backward_chunks(dims). The row kernels are exposed so tests can check every variant.
struct KernelTable {
  core::Isa isa;
  /// Floats of one thread's forward (backward) workspace slice at head dim d, for fp32 or bf16
  /// inputs: the same in every variant (one source).
  size_t (*forward_slice_floats)(int64_t d, bool bf16);
  size_t (*backward_slice_floats)(int64_t d, bool bf16);
  void (*attention_forward_f32)(const float* q, const float* k, const float* v, const Tokens& qt,
                                const Tokens& kt, const Mask& mask, float scale,
                                const ref::AttnDims& dims, int threads, float* ws, float* o,
                                float* lse);
  void (*attention_forward_bf16)(const core::bf16* q, const core::bf16* k, const core::bf16* v,
                                 const Tokens& qt, const Tokens& kt, const Mask& mask, float scale,
                                 const ref::AttnDims& dims, int threads, float* ws, float* o,
                                 float* lse);
  void (*attention_backward_f32)(const float* q, const float* k, const float* v, const float* dout,
                                 const float* lse, const float* delta, const Tokens& qt,
                                 const Tokens& kt, const Mask& mask, float scale,
                                 const ref::AttnDims& dims, int threads, int64_t chunks, float* ws,
                                 float* dq, float* dk, float* dv);
  void (*attention_backward_bf16)(const core::bf16* q, const core::bf16* k, const core::bf16* v,
                                  const core::bf16* dout, const float* lse, const float* delta,
                                  const Tokens& qt, const Tokens& kt, const Mask& mask, float scale,
                                  const ref::AttnDims& dims, int threads, int64_t chunks, float* ws,
                                  float* dq, float* dk, float* dv);
  /// s[j] = 2^(s[j] - m) in place (0 below 2^-126 and for -inf); returns the sum.
  float (*exp2_row_inplace)(float* s, int64_t n, float m);
  /// The per-element mask of one query against n keys (kernels/cpu/isa/rows.hpp mask_row).
  void (*mask_row)(const Mask& m, int64_t qp, int32_t qd, const int64_t* kp, const int32_t* kd,
                   int64_t kstart, float* s, int64_t n);
  /// out[j] = core::to_bf16(x[j]) (hardware rounding on avx512_bf16: denormals become 0).
  void (*to_bf16_row)(const float* x, core::bf16* out, int64_t n);
  /// The same variant's element-wise kernels.
  const PointwiseTable* pointwise;
};

/// Variants compiled into this build, lowest first (portable only off x86-64).
std::span<const core::Isa> built_isas();

/// The table of `isa`; throws core::Error("[kernels] ...") naming the variant when this build
/// lacks it. Running a variant above core::best_isa() would fault: callers take levels from
/// built_isas() up to the best one.
const KernelTable& kernel_table(core::Isa isa);

/// The table of core::active_isa().
const KernelTable& active_kernels();

/// The element-wise table of core::active_isa().
inline const PointwiseTable& active_pointwise() {
  return *active_kernels().pointwise;
}

}  // namespace longseq::kernels::cpu
