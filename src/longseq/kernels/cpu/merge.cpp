// merge_partials and attention_delta (contracts in attention.hpp): arguments checked here, the
// rows computed in the active kernel variant (kernels/cpu/isa/pointwise.cpp). Each row is computed
// by one thread in a fixed order, so the bits never depend on threads.
#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/attention.hpp"
#include "longseq/kernels/cpu/dispatch.hpp"

namespace longseq::kernels::cpu {

namespace {
void check(int64_t t, int64_t h, int64_t d, const char* what) {
  LONGSEQ_CHECK_MSG(t >= 0 && h > 0 && d > 0, what, " t=", t, " h=", h, " d=", d);
}
}  // namespace

void merge_partials(float* o, float* lse, const float* o_other, const float* lse_other, int64_t t,
                    int64_t h, int64_t d, const core::Exec& exec) {
  const int threads = exec.cpu_threads("merge_partials");
  check(t, h, d, "merge_partials");
  active_pointwise().merge_partials(o, lse, o_other, lse_other, t, h, d, threads);
}

void attention_delta(const float* dout, const float* o, int64_t t, int64_t h, int64_t d,
                     const core::Exec& exec, float* delta) {
  const int threads = exec.cpu_threads("attention_delta");
  check(t, h, d, "attention_delta");
  active_pointwise().attention_delta_f32(dout, o, t, h, d, threads, delta);
}
void attention_delta(const core::bf16* dout, const core::bf16* o, int64_t t, int64_t h, int64_t d,
                     const core::Exec& exec, float* delta) {
  const int threads = exec.cpu_threads("attention_delta");
  check(t, h, d, "attention_delta");
  active_pointwise().attention_delta_bf16(dout, o, t, h, d, threads, delta);
}
void attention_delta(const core::bf16* dout, const float* o, int64_t t, int64_t h, int64_t d,
                     const core::Exec& exec, float* delta) {
  const int threads = exec.cpu_threads("attention_delta");
  check(t, h, d, "attention_delta");
  active_pointwise().attention_delta_bf16_f32(dout, o, t, h, d, threads, delta);
}

}  // namespace longseq::kernels::cpu
