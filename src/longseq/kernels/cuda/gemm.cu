// Matrix products through cuBLASLt, and the linear layer (contracts in gemm.hpp).
//
// Row-major to cuBLASLt's column-major: a row-major [R, C] matrix with row stride ld is the
// column-major [C, R] matrix with leading dimension ld, its transpose. So the row-major product
// C[M, N] = op(A) op(B) is the column-major product C^T[N, M] = op(B)^T op(A)^T, in which
//   cuBLASLt's A is our b: stored column-major [N, K] (op N) when !trans_b, [K, N] (op T) when
//                          trans_b, leading dimension ldb;
//   cuBLASLt's B is our a: stored column-major [K, M] (op N) when !trans_a, [M, K] (op T) when
//                          trans_a, leading dimension lda;
//   cuBLASLt's C = D is our c: column-major [N, M], leading dimension ldc.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/cublaslt.hpp"
#include "longseq/kernels/cuda/gemm.hpp"
#include "longseq/kernels/cuda/launch.cuh"

namespace longseq::kernels::cuda {

namespace {

using detail::kBlock;

void check_cublas(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  core::fail("cuda", what, " failed: ", lt::api().GetStatusString(status), " (",
             static_cast<int>(status), ") at ", file, ":", line);
}

#define LONGSEQ_CUBLAS_CALL(call) check_cublas((call), #call, __FILE__, __LINE__)

// Workspace of every (GPU, stream): cuBLAS recommends 32 MiB on Hopper (4 MiB before it).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

void check_args(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                int64_t ldc) {
  LONGSEQ_CHECK_MSG(m >= 0 && n >= 0 && k >= 0, "gemm sizes m=", m, " n=", n, " k=", k);
  const int64_t a_cols = ta ? m : k, b_cols = tb ? k : n;
  LONGSEQ_CHECK_MSG(lda >= std::max<int64_t>(1, a_cols), "gemm lda=", lda, " < ", a_cols);
  LONGSEQ_CHECK_MSG(ldb >= std::max<int64_t>(1, b_cols), "gemm ldb=", ldb, " < ", b_cols);
  LONGSEQ_CHECK_MSG(ldc >= std::max<int64_t>(1, n), "gemm ldc=", ldc, " < ", n);
}

// The largest power of two (at most 256, cuBLASLt's default requirement) dividing the address.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

// ---- plain kernels ------------------------------------------------------------------------------

__device__ inline float widen(float x) {
  return x;
}
__device__ inline float widen(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// C's element type: fp32, or bf16 rounded to nearest even (gemm_bf16_out_bf16).
__device__ inline void store(float* c, float v) {
  *c = v;
}
__device__ inline void store(__nv_bfloat16* c, float v) {
  *c = __float2bfloat16_rn(v);
}
__device__ inline float load(const float* c) {
  return *c;
}
__device__ inline float load(const __nv_bfloat16* c) {
  return __bfloat162float(*c);
}

// C = alpha op(A) op(B) + beta C (beta == 0: C not read), one element of C per iteration of a
// grid-stride loop, fp32 accumulation in K order. The fallback and the reference of last resort:
// obviously correct, slow.
template <class T, class O>
__global__ void gemm_simple_kernel(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                                   const T* a, int64_t lda, const T* b, int64_t ldb, float beta,
                                   O* c, int64_t ldc) {
  const int64_t total = m * n;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    const int64_t i = idx / n, j = idx % n;
    float acc = 0.0f;
    for (int64_t p = 0; p < k; ++p) {
      const float av = widen(ta ? a[p * lda + i] : a[i * lda + p]);
      const float bv = widen(tb ? b[j * ldb + p] : b[p * ldb + j]);
      acc += av * bv;
    }
    O* cij = c + i * ldc + j;
    store(cij, beta == 0.0f ? alpha * acc : alpha * acc + beta * load(cij));
  }
}

// C = beta C over M x N (beta == 0 writes zeros): the whole product when K == 0.
template <class O>
__global__ void scale_kernel(int64_t m, int64_t n, float beta, O* c, int64_t ldc) {
  const int64_t total = m * n;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    O* cij = c + (idx / n) * ldc + idx % n;
    store(cij, beta == 0.0f ? 0.0f : beta * load(cij));
  }
}

// dst [rows, cols] (dense bf16) = src [rows, cols] (fp32, row stride ld), rounded to nearest even.
__global__ void round_bf16_kernel(const float* src, int64_t rows, int64_t cols, int64_t ld,
                                  __nv_bfloat16* dst) {
  const int64_t total = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride)
    dst[idx] = __float2bfloat16_rn(src[(idx / cols) * ld + idx % cols]);
}

// ---- cuBLASLt state -----------------------------------------------------------------------------

// Operand and output types: fp32 -> fp32, bf16 -> fp32, bf16 -> bf16.
enum class Kind : int { f32, bf16, bf16_out_bf16 };

struct PlanKey {
  int device;
  Kind kind;
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t align_a, align_b, align_c;
  bool operator<(const PlanKey& o) const {
    return std::tie(device, kind, ta, tb, m, n, k, lda, ldb, ldc, align_a, align_b, align_c) <
           std::tie(o.device, o.kind, o.ta, o.tb, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.align_a,
                    o.align_b, o.align_c);
  }
};

// Descriptors and the chosen algorithm of one shape; `ok` false when cuBLASLt offered none.
struct Plan {
  bool ok = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

struct State {
  std::mutex mutex;
  std::map<int, cublasLtHandle_t> handles;            // per GPU
  std::map<std::pair<int, void*>, void*> workspaces;  // per (GPU, stream)
  std::map<PlanKey, Plan> plans;                      // nodes never move or go
  std::atomic<int64_t> cublaslt{0}, simple{0}, planned{0};
};

// Never destroyed (see gemm.hpp): handles and workspaces outlive every caller.
State& state() {
  static State* s = new State();
  return *s;
}

// The plan of `key`, created on first use (caller holds the mutex).
const Plan& plan_for(State& st, cublasLtHandle_t handle, const PlanKey& key) {
  const auto found = st.plans.find(key);
  if (found != st.plans.end()) return found->second;
  const lt::Api& api = lt::api();
  Plan p;
  const cudaDataType_t in_type = key.kind == Kind::f32 ? CUDA_R_32F : CUDA_R_16BF;
  LONGSEQ_CUBLAS_CALL(api.MatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t op_a = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const int32_t op_b = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our a
  LONGSEQ_CUBLAS_CALL(
      api.MatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  LONGSEQ_CUBLAS_CALL(
      api.MatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  // Stored shapes, column-major (rows, cols) = the row-major matrix's (cols, rows).
  const uint64_t la_rows = key.tb ? key.k : key.n, la_cols = key.tb ? key.n : key.k;
  const uint64_t lb_rows = key.ta ? key.m : key.k, lb_cols = key.ta ? key.k : key.m;
  LONGSEQ_CUBLAS_CALL(api.MatrixLayoutCreate(&p.la, in_type, la_rows, la_cols, key.ldb));
  LONGSEQ_CUBLAS_CALL(api.MatrixLayoutCreate(&p.lb, in_type, lb_rows, lb_cols, key.lda));
  const cudaDataType_t out_type = key.kind == Kind::bf16_out_bf16 ? CUDA_R_16BF : CUDA_R_32F;
  LONGSEQ_CUBLAS_CALL(api.MatrixLayoutCreate(&p.lc, out_type, static_cast<uint64_t>(key.n),
                                             static_cast<uint64_t>(key.m), key.ldc));

  cublasLtMatmulPreference_t pref = nullptr;
  LONGSEQ_CUBLAS_CALL(api.MatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  LONGSEQ_CUBLAS_CALL(api.MatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = key.align_b, al_b = key.align_a, al_c = key.align_c;  // swapped, as above
  LONGSEQ_CUBLAS_CALL(api.MatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  LONGSEQ_CUBLAS_CALL(api.MatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  LONGSEQ_CUBLAS_CALL(api.MatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  LONGSEQ_CUBLAS_CALL(api.MatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
  if (key.kind == Kind::bf16_out_bf16) {
    // Split-K partial sums reduced in the output type (in place in C, or bf16 in the workspace)
    // would round more than once; only no split or fp32 partials keep "the fp32 result rounded
    // once" (gemm.hpp). Scheme NONE (0) passes any mask.
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    LONGSEQ_CUBLAS_CALL(api.MatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t h =
      api.MatmulAlgoGetHeuristic(handle, p.desc, p.la, p.lb, p.lc, p.lc, pref, 1, &result, &count);
  api.MatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED: no heuristic for this configuration, the plain kernel runs it; anything else
  // is an error.
  if (h != CUBLAS_STATUS_NOT_SUPPORTED)
    check_cublas(h, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  p.ok = h == CUBLAS_STATUS_SUCCESS && count > 0 && result.state == CUBLAS_STATUS_SUCCESS &&
         result.workspaceSize <= kWorkspaceBytes;
  if (p.ok) p.algo = result.algo;
  st.planned.fetch_add(1);
  return st.plans.emplace(key, p).first->second;
}

template <class T, class O>
void simple(cudaStream_t s, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
            const T* a, int64_t lda, const T* b, int64_t ldb, float beta, O* c, int64_t ldc) {
  gemm_simple_kernel<T, O><<<detail::grid_for(m * n), kBlock, 0, s>>>(ta, tb, m, n, k, alpha, a,
                                                                      lda, b, ldb, beta, c, ldc);
  LONGSEQ_CUDA_LAUNCHED();
}

// The shared path of gemm_f32, gemm_bf16 and gemm_bf16_out_bf16 (T = float or __nv_bfloat16,
// O = float or __nv_bfloat16, matching `kind`).
template <class T, class O>
void run(const core::Exec& exec, const char* name, Kind kind, bool ta, bool tb, int64_t m,
         int64_t n, int64_t k, float alpha, const T* a, int64_t lda, const T* b, int64_t ldb,
         float beta, O* c, int64_t ldc) {
  const cudaStream_t s = detail::stream(exec, name);
  check_args(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_kernel<O><<<detail::grid_for(m * n), kBlock, 0, s>>>(m, n, beta, c, ldc);
    LONGSEQ_CUDA_LAUNCHED();
    return;
  }
  State& st = state();
  const int device = exec.device.index;
  PlanKey key{};
  key.device = device;
  key.kind = kind;
  key.ta = ta;
  key.tb = tb;
  key.m = m;
  key.n = n;
  key.k = k;
  key.lda = lda;
  key.ldb = ldb;
  key.ldc = ldc;
  key.align_a = alignment(a);
  key.align_b = alignment(b);
  key.align_c = alignment(c);
  const lt::Api& api = lt::api();
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  const Plan* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    auto h = st.handles.find(device);
    if (h == st.handles.end()) {
      cublasLtHandle_t created = nullptr;
      LONGSEQ_CUBLAS_CALL(api.Create(&created));
      h = st.handles.emplace(device, created).first;
    }
    handle = h->second;
    const std::pair<int, void*> ws_key{device, exec.stream};
    auto w = st.workspaces.find(ws_key);
    if (w == st.workspaces.end()) {
      void* created = nullptr;
      LONGSEQ_CUDA_CALL(cudaMalloc(&created, kWorkspaceBytes));
      w = st.workspaces.emplace(ws_key, created).first;
    }
    workspace = w->second;
    plan = &plan_for(st, handle, key);
  }
  if (!plan->ok) {
    st.simple.fetch_add(1);
    simple(s, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  LONGSEQ_CUBLAS_CALL(api.Matmul(handle, plan->desc, &alpha, b, plan->la, a, plan->lb, &beta, c,
                                 plan->lc, c, plan->lc, &plan->algo, workspace, kWorkspaceBytes,
                                 s));
  st.cublaslt.fetch_add(1);
}

const __nv_bfloat16* as_nv(const core::bf16* p) {
  return reinterpret_cast<const __nv_bfloat16*>(p);
}

}  // namespace

void gemm_f32(const core::Exec& exec, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
              float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
              float* c, int64_t ldc) {
  run(exec, "gemm_f32", Kind::f32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_bf16(const core::Exec& exec, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
               float alpha, const core::bf16* a, int64_t lda, const core::bf16* b, int64_t ldb,
               float beta, float* c, int64_t ldc) {
  static_assert(sizeof(core::bf16) == sizeof(__nv_bfloat16), "bf16 is 16 bits on both sides");
  run(exec, "gemm_bf16", Kind::bf16, ta, tb, m, n, k, alpha, as_nv(a), lda, as_nv(b), ldb, beta, c,
      ldc);
}

void gemm_bf16_out_bf16(const core::Exec& exec, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        float alpha, const core::bf16* a, int64_t lda, const core::bf16* b,
                        int64_t ldb, core::bf16* c, int64_t ldc) {
  run(exec, "gemm_bf16_out_bf16", Kind::bf16_out_bf16, ta, tb, m, n, k, alpha, as_nv(a), lda,
      as_nv(b), ldb, 0.0f, reinterpret_cast<__nv_bfloat16*>(c), ldc);
}

void gemm_f32_simple(const core::Exec& exec, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                     float beta, float* c, int64_t ldc) {
  const cudaStream_t s = detail::stream(exec, "gemm_f32_simple");
  check_args(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  simple(s, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_bf16_simple(const core::Exec& exec, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      float alpha, const core::bf16* a, int64_t lda, const core::bf16* b,
                      int64_t ldb, float beta, float* c, int64_t ldc) {
  const cudaStream_t s = detail::stream(exec, "gemm_bf16_simple");
  check_args(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  simple(s, ta, tb, m, n, k, alpha, as_nv(a), lda, as_nv(b), ldb, beta, c, ldc);
}

void gemm(core::DType compute, const core::Exec& exec, bool ta, bool tb, int64_t m, int64_t n,
          int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc) {
  if (compute == core::DType::f32)
    return gemm_f32(exec, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  LONGSEQ_CHECK_MSG(compute == core::DType::bf16, "gemm: compute dtype ",
                    core::dtype_name(compute));
  const cudaStream_t s = detail::stream(exec, "gemm");
  check_args(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0 || k == 0)
    return gemm_bf16(exec, ta, tb, m, n, k, alpha, nullptr, lda, nullptr, ldb, beta, c, ldc);
  // The stored operands, rounded into dense bf16 scratch (only the elements op() reads).
  const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  void* scratch = nullptr;
  // b's part starts 256-byte aligned, so its alignment never depends on ar * ac.
  const size_t a_bytes = (static_cast<size_t>(ar * ac) * sizeof(__nv_bfloat16) + 255) / 256 * 256;
  const size_t b_bytes = static_cast<size_t>(br * bc) * sizeof(__nv_bfloat16);
  LONGSEQ_CUDA_CALL(cudaMallocAsync(&scratch, a_bytes + b_bytes, s));
  auto* a16 = static_cast<__nv_bfloat16*>(scratch);
  auto* b16 = reinterpret_cast<__nv_bfloat16*>(static_cast<unsigned char*>(scratch) + a_bytes);
  round_bf16_kernel<<<detail::grid_for(ar * ac), kBlock, 0, s>>>(a, ar, ac, lda, a16);
  LONGSEQ_CUDA_LAUNCHED();
  round_bf16_kernel<<<detail::grid_for(br * bc), kBlock, 0, s>>>(b, br, bc, ldb, b16);
  LONGSEQ_CUDA_LAUNCHED();
  run(exec, "gemm", Kind::bf16, ta, tb, m, n, k, alpha, a16, ac, b16, bc, beta, c, ldc);
  LONGSEQ_CUDA_CALL(cudaFreeAsync(scratch, s));
}

void round_to_bf16(const float* src, int64_t n, core::bf16* dst, const core::Exec& exec) {
  const cudaStream_t s = detail::stream(exec, "round_to_bf16");
  LONGSEQ_CHECK_MSG(n >= 0, "round_to_bf16 n=", n);
  if (n == 0) return;
  round_bf16_kernel<<<detail::grid_for(n), kBlock, 0, s>>>(src, 1, n, n,
                                                           reinterpret_cast<__nv_bfloat16*>(dst));
  LONGSEQ_CUDA_LAUNCHED();
}

GemmStats gemm_stats() {
  State& st = state();
  GemmStats g;
  g.cublaslt = st.cublaslt.load();
  g.simple = st.simple.load();
  g.plans = st.planned.load();
  return g;
}

void linear_forward(const float* in, const float* weight, int64_t t, int64_t k, int64_t n,
                    float* out, bool accumulate, const core::Exec& exec, core::DType compute) {
  detail::stream(exec, "linear_forward");
  gemm(compute, exec, false, true, t, n, k, 1.0f, in, k, weight, k, accumulate ? 1.0f : 0.0f, out,
       n);
}

void linear_backward(const float* dout, const float* in, const float* weight, int64_t t, int64_t k,
                     int64_t n, float* din, bool accumulate_din, float* dweight,
                     const core::Exec& exec, core::DType compute) {
  detail::stream(exec, "linear_backward");
  // dweight [N, K] += dout^T [N, T] * in [T, K]; queued first, so that din may overwrite `in`.
  gemm(compute, exec, true, false, n, k, t, 1.0f, dout, n, in, k, 1.0f, dweight, k);
  if (din)
    gemm(compute, exec, false, false, t, k, n, 1.0f, dout, n, weight, k,
         accumulate_din ? 1.0f : 0.0f, din, k);
}

}  // namespace longseq::kernels::cuda
