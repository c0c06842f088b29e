#include "longseq/kernels/gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "longseq/core/cpu.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/op_account.hpp"

#if defined(LONGSEQ_GEMM_OPENBLAS)
#include <cblas.h>
#elif defined(LONGSEQ_GEMM_ONEDNN)
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#else
#error "kernels/gemm.cpp needs LONGSEQ_GEMM_OPENBLAS or LONGSEQ_GEMM_ONEDNN (set by CMake)"
#endif

namespace longseq::kernels {

namespace {

// Same argument contract for both libraries (OpenBLAS would print an xerbla message and return,
// oneDNN would return a status): a bad stride is a bug in the caller, so abort with the values.
void check_args(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                int64_t ldc) {
  LONGSEQ_CHECK_MSG(m >= 0 && n >= 0 && k >= 0, "gemm sizes m=", m, " n=", n, " k=", k);
  const int64_t a_cols = ta ? m : k, b_cols = tb ? k : n;
  LONGSEQ_CHECK_MSG(lda >= std::max<int64_t>(1, a_cols), "gemm lda=", lda, " < ", a_cols);
  LONGSEQ_CHECK_MSG(ldb >= std::max<int64_t>(1, b_cols), "gemm ldb=", ldb, " < ", b_cols);
  LONGSEQ_CHECK_MSG(ldc >= std::max<int64_t>(1, n), "gemm ldc=", ldc, " < ", n);
}

// C = beta * C, the whole product when K == 0 (beta == 0 writes zeros, as BLAS does).
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f)
      std::fill(row, row + n, 0.0f);
    else
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
  }
}

// rows x cols of a row-major matrix with row stride ld, converted row by row into a compact
// [rows, cols] buffer; large matrices split their rows over `threads`. buf only grows (a shrink
// and regrow would zero-fill on every call whose shapes alternate).
template <class In, class Out, class Convert>
const Out* compact_parallel(const In* x, int64_t rows, int64_t cols, int64_t ld,
                            std::vector<Out>& buf, int threads, Convert convert) {
  const size_t need = static_cast<size_t>(std::max<int64_t>(rows * cols, 1));
  if (buf.size() < need) buf.resize(need);
  const int nt = rows * cols >= (int64_t{1} << 16) ? std::max(threads, 1) : 1;
  auto row = [&](int64_t r) { convert(x + r * ld, buf.data() + r * cols, cols); };
  if (nt == 1) {
    // No OpenMP region at all: gemm_bf16_widened calls this once per tile product.
    for (int64_t r = 0; r < rows; ++r) row(r);
  } else {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; ++r) row(r);
  }
  return buf.data();
}

// bf16 -> f32 (exact): emulated bf16 operands.
void widen_row(const core::bf16* in, float* out, int64_t n) {
  core::bf16_to_f32(in, out, static_cast<size_t>(n));
}
// f32 -> the f32 value of its bf16 rounding: emulated mixed precision (the same values a bf16
// operand would carry, kept in f32).
void round_bf16_row(const float* in, float* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = core::round_bf16(in[j]);
}
// f32 -> bf16 (round to nearest even).
void to_bf16_row(const float* in, core::bf16* out, int64_t n) {
  core::f32_to_bf16(in, out, static_cast<size_t>(n));
}

}  // namespace

// bf16 without bf16 arithmetic (every variant below avx512_bf16, and every OpenBLAS build: Debian's
// 0.3.21 declares cblas_sbgemm but does not export it): both operands widened to f32, which is
// exact, then the f32 tile product. Same contract as the hardware path: bf16 inputs, fp32
// accumulation; only the summation order differs.
void gemm_bf16_widened(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const core::bf16* a, int64_t lda, const core::bf16* b, int64_t ldb,
                       float beta, float* c, int64_t ldc) {
  check_args(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  // Scratch per thread, grown on demand and reused: per-call allocation would cost more than the
  // product at attention-tile sizes. One thread: callers parallelise around this call.
  thread_local std::vector<float> wa, wb;
  const float* af = compact_parallel(a, ar, ac, lda, wa, 1, widen_row);
  const float* bf = compact_parallel(b, br, bc, ldb, wb, 1, widen_row);
  gemm_f32_tile(ta, tb, m, n, k, alpha, af, ac, bf, bc, beta, c, ldc);
}

#if defined(LONGSEQ_GEMM_OPENBLAS)
// ---- OpenBLAS (Debian 0.3.21, pthread build) ---------------------------------------------------
namespace {
// OpenBLAS's own pool would oversubscribe the cores the caller already parallelises over. With one
// thread OpenBLAS runs the call on the caller's thread (it is safe to call from many threads).
void pin_single_thread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace

void gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  check_args(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  pin_single_thread();
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const core::bf16* a,
               int64_t lda, const core::bf16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_bf16_widened(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_f32_tile(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_f32(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char* gemm_library() {
  return "openblas";
}

std::string gemm_isa() {
  // OpenBLAS picks its kernels at load time (OPENBLAS_CORETYPE overrides); LONGSEQ_ISA does not
  // move it.
  return std::string("openblas core ") + openblas_get_corename();
}

#elif defined(LONGSEQ_GEMM_ONEDNN)
// ---- oneDNN 2.6 (OpenMP runtime) ---------------------------------------------------------------
namespace {

// oneDNN's OpenMP runtime sizes its parallel regions from omp_get_max_threads() (and goes
// sequential inside an active parallel region). Setting the calling task's nthreads ICV to 1 for
// the duration of the call makes every call single-threaded in both cases; the ICV is per task,
// so this never affects other threads, and it is restored on exit (exceptions included).
class OmpSingleThread {
 public:
  OmpSingleThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OmpSingleThread() { omp_set_num_threads(saved_); }
  OmpSingleThread(const OmpSingleThread&) = delete;
  OmpSingleThread& operator=(const OmpSingleThread&) = delete;

 private:
  int saved_;
};

// oneDNN follows LONGSEQ_ISA: when a lower variant is forced (tests, benchmarks comparing levels
// on one machine), its GEMMs are capped at the same level, so an "avx2" run is an AVX2 run
// throughout. Must happen before oneDNN's first dispatch, hence once, on the first GEMM; a later
// core::set_active_isa() no longer moves oneDNN (documented in docs/kernels.md).
void cap_onednn_isa() {
  static std::once_flag once;
  std::call_once(once, [] {
    const core::Isa isa = core::active_isa();
    if (isa == core::best_isa(core::cpu_features())) return;
    dnnl::cpu_isa cap = dnnl::cpu_isa::all;
    switch (isa) {
      case core::Isa::portable:
        cap = dnnl::cpu_isa::sse41;
        break;
      case core::Isa::avx2:
        cap = dnnl::cpu_isa::avx2;
        break;
      case core::Isa::avx512:
        cap = dnnl::cpu_isa::avx512_core;
        break;
      case core::Isa::avx512_bf16:
        cap = dnnl::cpu_isa::avx512_core_bf16;
        break;
    }
    // Refused only when oneDNN already dispatched (a GEMM through another path): then it keeps
    // its own choice, which is correct, only not capped.
    try {
      dnnl::set_max_cpu_isa(cap);
    } catch (const dnnl::error&) {
    }
  });
}

const dnnl::engine& cpu_engine() {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// A bf16 matmul primitive for one (transposes, shape, strides, alpha, beta). Attention calls a
// handful of tile shapes millions of times, so the primitive (creation costs tens of
// microseconds, more than a 64x64x64 product) is built once per thread and shape. Memory objects
// are kept and re-pointed with set_data_handle; the scratchpad is ours (user mode) so concurrent
// threads never share one.
struct MatmulEntry {
  dnnl::matmul prim;
  dnnl::memory a, b, c, scratch;
  std::vector<uint8_t> scratch_buf;
};

using MatmulKey = std::tuple<bool, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                             uint32_t, uint32_t>;

uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

MatmulEntry make_matmul(bool bf16_inputs, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        float alpha, int64_t lda, int64_t ldb, float beta, int64_t ldc) {
  using dt = dnnl::memory::data_type;
  const dt in = bf16_inputs ? dt::bf16 : dt::f32;
  const dnnl::memory::desc a_md({m, k}, in,
                                ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
  const dnnl::memory::desc b_md({k, n}, in,
                                tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
  const dnnl::memory::desc c_md({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  const auto& eng = cpu_engine();
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, eng);
  MatmulEntry e;
  e.prim = dnnl::matmul(pd);
  e.a = dnnl::memory(a_md, eng, DNNL_MEMORY_NONE);
  e.b = dnnl::memory(b_md, eng, DNNL_MEMORY_NONE);
  e.c = dnnl::memory(c_md, eng, DNNL_MEMORY_NONE);
  e.scratch_buf.resize(pd.scratchpad_desc().get_size());
  e.scratch = dnnl::memory(pd.scratchpad_desc(), eng, e.scratch_buf.data());
  return e;
}

MatmulEntry& matmul_for(bool bf16_inputs, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        float alpha, int64_t lda, int64_t ldb, float beta, int64_t ldc) {
  // Bounded: a caller sweeping many shapes (a benchmark) must not grow memory without end.
  constexpr size_t kMaxEntries = 256;
  thread_local std::map<MatmulKey, MatmulEntry> cache;
  const MatmulKey key{bf16_inputs,     ta, tb, m, n, k, lda, ldb, ldc, float_bits(alpha),
                      float_bits(beta)};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= kMaxEntries) cache.clear();
  return cache.emplace(key, make_matmul(bf16_inputs, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc))
      .first->second;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

// Runs a cached matmul primitive on (a, b, c); the caller holds OmpSingleThread.
void run_matmul(MatmulEntry& e, const void* a, const void* b, float* c) {
  e.a.set_data_handle(const_cast<void*>(a));
  e.b.set_data_handle(const_cast<void*>(b));
  e.c.set_data_handle(c);
  auto& s = thread_stream();
  // The C entry point takes a plain array; the C++ one builds an unordered_map per call, which
  // costs several percent at 64x64 tiles.
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, e.a.get()},
                                  {DNNL_ARG_WEIGHTS, e.b.get()},
                                  {DNNL_ARG_DST, e.c.get()},
                                  {DNNL_ARG_SCRATCHPAD, e.scratch.get()}};
  dnnl::error::wrap_c_api(dnnl_primitive_execute(e.prim.get(), s.get(), 4, args),
                          "dnnl_primitive_execute");
  s.wait();
}

}  // namespace

void gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  check_args(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  cap_onednn_isa();
  OmpSingleThread one;
  const dnnl_status_t st =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (st != dnnl_success)
    core::fail("gemm", "dnnl_sgemm failed with status ", static_cast<int>(st), " for m=", m,
               " n=", n, " k=", k, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
}

void gemm_f32_tile(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // The matmul primitive (brgemm) runs dense attention tiles 5-10% faster than dnnl_sgemm, which
  // re-packs both operands on every call; not with a transposed A (256 x 64 x 256: 175 against
  // 212 GFLOP/s), nor strided operands (it leaves brgemm), nor large ones (no per-call packing
  // cost to save; and each new shape costs a 0.2-0.5 ms primitive creation).
  const bool dense = lda == k && ldb == (tb ? k : n) && ldc == n;
  if (ta || !dense || std::max({m, n, k}) > 1024 || m == 0 || n == 0 || k == 0)
    return gemm_f32(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);  // checks the args
  check_args(ta, tb, m, n, k, lda, ldb, ldc);
  cap_onednn_isa();
  OmpSingleThread one;
  try {
    run_matmul(matmul_for(false, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc), a, b, c);
  } catch (const dnnl::error& err) {
    core::fail("gemm", "oneDNN f32 matmul failed (", err.what(), ") for m=", m, " n=", n, " k=", k,
               " lda=", lda, " ldb=", ldb, " ldc=", ldc, " trans_b=", tb);
  }
}

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const core::bf16* a,
               int64_t lda, const core::bf16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // oneDNN 2.6 has no bf16 matmul below AVX-512 ("could not create a primitive descriptor
  // iterator"), and on AVX-512 without BF16 it only emulates: widen, as every lower variant does.
  if (!core::bf16_native(core::active_isa()))
    return gemm_bf16_widened(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  check_args(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  cap_onednn_isa();
  // oneDNN 2.6 picks its brgemm (AMX / avx512_bf16) matmul only for dense operands; a row stride
  // wider than the row (attention's q/k/v tiles inside [T, H, D]) sends it to the gemm-based
  // matmul, whose bf16 post-processing is a scalar loop (~20 GFLOP/s on a 256x256x64 tile on a
  // Sapphire Rapids core, against ~200 for brgemm). Packing the tile dense first costs one pass
  // over A and B.
  thread_local std::vector<core::bf16> pack_a, pack_b;
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
  const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
  auto dense = [](const core::bf16* x, int64_t rows, int64_t cols, int64_t& ld,
                  std::vector<core::bf16>& buf) {
    if (ld == cols) return x;
    buf.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(buf.data() + r * cols, x + r * ld,
                  static_cast<size_t>(cols) * sizeof(core::bf16));
    ld = cols;
    return static_cast<const core::bf16*>(buf.data());
  };
  a = dense(a, a_rows, a_cols, lda, pack_a);
  b = dense(b, b_rows, b_cols, ldb, pack_b);
  // The same for C (attention writes o and dq tiles inside [T, H, D]): through a dense buffer,
  // loaded first when beta needs the old values.
  thread_local std::vector<float> pack_c;
  float* const c_user = c;
  const int64_t ldc_user = ldc;
  if (ldc != n) {
    pack_c.resize(static_cast<size_t>(m * n));
    if (beta != 0.0f)
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(pack_c.data() + r * n, c + r * ldc, static_cast<size_t>(n) * sizeof(float));
    c = pack_c.data();
    ldc = n;
  }
  OmpSingleThread one;  // before creation too: the primitive's blocking is chosen for 1 thread
  try {
    run_matmul(matmul_for(true, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc), a, b, c);
    if (c != c_user)
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(c_user + r * ldc_user, c + r * n, static_cast<size_t>(n) * sizeof(float));
  } catch (const dnnl::error& err) {
    core::fail("gemm", "oneDNN bf16 matmul failed (", err.what(), ") for m=", m, " n=", n, " k=", k,
               " lda=", lda, " ldb=", ldb, " ldc=", ldc, " trans_a=", ta, " trans_b=", tb);
  }
}

const char* gemm_library() {
  return "onednn";
}

std::string gemm_isa() {
  cap_onednn_isa();
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}
#endif

// ---- deterministic row-panel parallelism (library independent) -------------------------------

// 128 rows: large enough that each panel is an efficient GEMM, small enough that a 256-row
// attention tile still splits over 2 threads.
int64_t gemm_panel_rows() {
  return 128;
}

namespace {
template <class T, class Gemm>
void panel_parallel(int threads, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                    const T* a, int64_t lda, const T* b, int64_t ldb, float beta, float* c,
                    int64_t ldc, Gemm gemm) {
  check_args(ta, tb, m, n, k, lda, ldb, ldc);
  // The per-op account: a GEMM called from the model's pointwise code (or from no scope) is
  // charged to gemm; inside attention or the LM head it stays theirs.
  core::OpScope scope(core::Op::gemm, /*weak=*/true);
  const int64_t panel = gemm_panel_rows();
  const int64_t panels = (m + panel - 1) / panel;
  const int nt = static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, panels)));
  // Panel p is rows [p*panel, ...) of C: rows of A, or columns of the stored A when trans_a.
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t r0 = p * panel, rows = std::min(panel, m - r0);
    const T* ap = ta ? a + r0 : a + r0 * lda;
    gemm(ta, tb, rows, n, k, alpha, ap, lda, b, ldb, beta, c + r0 * ldc, ldc);
  }
}
}  // namespace

void gemm_f32_parallel(const core::Exec& exec, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                       float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                       float beta, float* c, int64_t ldc) {
  const int threads = exec.cpu_threads("gemm_f32_parallel");
  panel_parallel(threads, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, gemm_f32);
}

void gemm_bf16_parallel(const core::Exec& exec, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        float alpha, const core::bf16* a, int64_t lda, const core::bf16* b,
                        int64_t ldb, float beta, float* c, int64_t ldc) {
  const int threads = exec.cpu_threads("gemm_bf16_parallel");
  if (!core::bf16_native(core::active_isa())) {
    // Emulated: widen both operands once (not once per panel, as gemm_bf16 per panel would).
    check_args(ta, tb, m, n, k, lda, ldb, ldc);
    thread_local std::vector<float> af, bf;
    const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    compact_parallel(a, ar, ac, lda, af, threads, widen_row);
    compact_parallel(b, br, bc, ldb, bf, threads, widen_row);
    panel_parallel(threads, ta, tb, m, n, k, alpha, af.data(), std::max<int64_t>(ac, 1), bf.data(),
                   std::max<int64_t>(bc, 1), beta, c, ldc, gemm_f32);
    return;
  }
  panel_parallel(threads, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, gemm_bf16);
}

void gemm_parallel(core::DType compute, const core::Exec& exec, bool ta, bool tb, int64_t m,
                   int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float beta, float* c, int64_t ldc) {
  const int threads = exec.cpu_threads("gemm_parallel");
  if (compute == core::DType::f32) {
    gemm_f32_parallel(threads, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  LONGSEQ_CHECK_MSG(compute == core::DType::bf16, "gemm_parallel: compute dtype ",
                    core::dtype_name(compute));
  check_args(ta, tb, m, n, k, lda, ldb, ldc);
  core::OpScope scope(core::Op::gemm, /*weak=*/true);  // the rounding to bf16 included
  if (!core::bf16_native(core::active_isa())) {
    // Emulated: the operands rounded to bf16 values but kept in f32 (one pass, no widening).
    thread_local std::vector<float> ar, br;
    const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
    const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
    compact_parallel(a, a_rows, a_cols, lda, ar, threads, round_bf16_row);
    compact_parallel(b, b_rows, b_cols, ldb, br, threads, round_bf16_row);
    gemm_f32_parallel(threads, ta, tb, m, n, k, alpha, ar.data(), std::max<int64_t>(a_cols, 1),
                      br.data(), std::max<int64_t>(b_cols, 1), beta, c, ldc);
    return;
  }
  // Scratch per thread: the trainer's ranks are threads of one process under the local backend.
  thread_local std::vector<core::bf16> abuf, bbuf;
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
  const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
  const core::bf16* ab = compact_parallel(a, a_rows, a_cols, lda, abuf, threads, to_bf16_row);
  const core::bf16* bb = compact_parallel(b, b_rows, b_cols, ldb, bbuf, threads, to_bf16_row);
  gemm_bf16_parallel(threads, ta, tb, m, n, k, alpha, ab, std::max<int64_t>(a_cols, 1), bb,
                     std::max<int64_t>(b_cols, 1), beta, c, ldc);
}

}  // namespace longseq::kernels
