// RMSNorm on a GPU (contracts in rmsnorm.hpp). The row's sum (of squares, or of weight * dout * x)
// in fp64 per thread, then block_sum; the elementwise pass after it.
//
// Two paths. The vector path (C a multiple of 4 up to kMaxVecC, every pointer 16-byte aligned):
// one block of kBlock threads per row, each thread holding up to kVec float4 of the row in
// registers from the sum to the elementwise pass, so that x (and dout) cross the memory bus once;
// all of a thread's loads are issued before the first use, so several are in flight. The
// generic path (any C, any alignment): a strided loop per row that reads the row twice (the second
// read mostly from L2), the kernels before the vector path existed.
//
// The weight gradient sums over rows in two stages without atomics: stage 1 gives each group of
// kRmsNormRowsPerGroup rows one partial sum per column (rows in order); on the vector path the
// dx kernel does it while the row is in its registers (a block per group, not per row), so dout
// and x are not read again. Stage 2 adds the groups in a fixed order into dweight.
#include <cuda_runtime.h>

#include <cstdint>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/launch.cuh"
#include "longseq/kernels/cuda/rmsnorm.hpp"

namespace longseq::kernels::cuda {

namespace {

using detail::kBlock;

constexpr int64_t kRowsPerGroup = kRmsNormRowsPerGroup;
// The vector path keeps up to 8 float4 per thread (32 floats; the backward holds dout's and x's:
// 64 registers of data), so C up to 8 x 4 x kBlock = 8192.
constexpr int kMaxVec = 8;
constexpr int64_t kMaxVecC = int64_t{kMaxVec} * 4 * kBlock;

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// float4 per thread for C (a multiple of 4, at most kMaxVecC): 1, 2, 4 or 8, so that only four
// kernels are instantiated.
int vec_per_thread(int64_t c) {
  const int64_t need = (c / 4 + kBlock - 1) / kBlock;
  return need <= 1 ? 1 : need <= 2 ? 2 : need <= 4 ? 4 : 8;
}

// ---- vector path
// ----------------------------------------------------------------------------------

// x, out may alias: each thread reads its float4 of x into registers before block_sum's barrier
// and writes out at the same positions after it.
template <int kVec>
__global__ void __launch_bounds__(kBlock)
    rmsnorm_forward_vec_kernel(const float* x, const float* weight, int64_t c, float eps,
                               float* out, float* rstd) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const int64_t nv = c / 4;
  const auto* xr = reinterpret_cast<const float4*>(x + row * c);
  auto* o = reinterpret_cast<float4*>(out + row * c);
  const auto* w4 = reinterpret_cast<const float4*>(weight);
  float4 v[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(i) * kBlock;
    v[i] = j < nv ? xr[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  double ss = 0.0;
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    ss += static_cast<double>(v[i].x) * v[i].x;
    ss += static_cast<double>(v[i].y) * v[i].y;
    ss += static_cast<double>(v[i].z) * v[i].z;
    ss += static_cast<double>(v[i].w) * v[i].w;
  }
  ss = detail::block_sum(ss, shared);
  const float r =
      static_cast<float>(1.0 / sqrt(ss / static_cast<double>(c) + static_cast<double>(eps)));
  if (threadIdx.x == 0) rstd[row] = r;
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(i) * kBlock;
    if (j < nv) {
      const float4 w = w4[j];
      o[j] = make_float4(v[i].x * r * w.x, v[i].y * r * w.y, v[i].z * r * w.z, v[i].w * r * w.w);
    }
  }
}

// One block per group of kRowsPerGroup rows, the rows in order: dx of each row from the dout and
// x it holds in registers (the CPU kernel's expression), and the group's partial weight gradient
// sum_r dout * x * rstd per column accumulated in registers in row order, written once to
// partial[group, C].
template <int kVec>
__global__ void __launch_bounds__(kBlock)
    rmsnorm_backward_vec_kernel(const float* dout, const float* x, const float* weight,
                                const float* rstd, int64_t t, int64_t c, float* dx, bool accumulate,
                                float* partial) {
  __shared__ double shared[32];
  const int64_t nv = c / 4;
  const int64_t g = blockIdx.x;
  const int64_t r0 = g * kRowsPerGroup;
  const int64_t r1 = r0 + kRowsPerGroup < t ? r0 + kRowsPerGroup : t;
  const auto* w4 = reinterpret_cast<const float4*>(weight);
  float4 acc[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) acc[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int64_t row = r0; row < r1; ++row) {
    const auto* d4 = reinterpret_cast<const float4*>(dout + row * c);
    const auto* x4 = reinterpret_cast<const float4*>(x + row * c);
    float4 dv[kVec], xv[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * kBlock;
      const bool in = j < nv;
      dv[i] = in ? d4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      xv[i] = in ? x4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const float r = rstd[row];
    double dot = 0.0;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * kBlock;
      if (j < nv) {
        const float4 w = w4[j];  // 4C bytes for the whole grid: L1/L2 hits after the first row
        dot += static_cast<double>(w.x) * dv[i].x * xv[i].x;
        dot += static_cast<double>(w.y) * dv[i].y * xv[i].y;
        dot += static_cast<double>(w.z) * dv[i].z * xv[i].z;
        dot += static_cast<double>(w.w) * dv[i].w * xv[i].w;
      }
    }
    dot = detail::block_sum(dot, shared);
    const float k = static_cast<float>(dot * r * r / static_cast<double>(c));
    auto* o = reinterpret_cast<float4*>(dx + row * c);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * kBlock;
      if (j < nv) {
        const float4 w = w4[j];
        float4 v =
            make_float4(r * (w.x * dv[i].x - xv[i].x * k), r * (w.y * dv[i].y - xv[i].y * k),
                        r * (w.z * dv[i].z - xv[i].z * k), r * (w.w * dv[i].w - xv[i].w * k));
        if (accumulate) {
          const float4 p = o[j];
          v = make_float4(p.x + v.x, p.y + v.y, p.z + v.z, p.w + v.w);
        }
        o[j] = v;
        acc[i].x += dv[i].x * xv[i].x * r;
        acc[i].y += dv[i].y * xv[i].y * r;
        acc[i].z += dv[i].z * xv[i].z * r;
        acc[i].w += dv[i].w * xv[i].w * r;
      }
    }
  }
  auto* p4 = reinterpret_cast<float4*>(partial + g * c);
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(i) * kBlock;
    if (j < nv) p4[j] = acc[i];
  }
}

// ---- generic path
// ---------------------------------------------------------------------------------

// x, out may alias: every x of the row is read before block_sum's barrier, each out written after
// it by the thread that reads the same x.
__global__ void rmsnorm_forward_kernel(const float* x, const float* weight, int64_t c, float eps,
                                       float* out, float* rstd) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * c;
  float* o = out + row * c;
  double ss = 0.0;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const double v = xr[j];
    ss += v * v;
  }
  ss = detail::block_sum(ss, shared);
  const float r =
      static_cast<float>(1.0 / sqrt(ss / static_cast<double>(c) + static_cast<double>(eps)));
  if (threadIdx.x == 0) rstd[row] = r;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) o[j] = xr[j] * r * weight[j];
}

// dx = rstd * (w * dout - x * rstd^2 / C * sum(w * dout * x)), the CPU kernel's expression.
__global__ void rmsnorm_backward_dx_kernel(const float* dout, const float* x, const float* weight,
                                           const float* rstd, int64_t c, float* dx,
                                           bool accumulate) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const float* d = dout + row * c;
  const float* xr = x + row * c;
  float* o = dx + row * c;
  const float r = rstd[row];
  double dot = 0.0;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    dot += static_cast<double>(weight[j]) * d[j] * xr[j];
  dot = detail::block_sum(dot, shared);
  const float k = static_cast<float>(dot * r * r / static_cast<double>(c));
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float v = r * (weight[j] * d[j] - xr[j] * k);
    o[j] = accumulate ? o[j] + v : v;
  }
}

// Stage 1 of the generic path: partial[g, j] = sum over the rows of group g, in order, of
// dout * x * rstd. Grid: x = groups, y = blocks of kBlock columns.
__global__ void rmsnorm_dweight_partial_kernel(const float* dout, const float* x, const float* rstd,
                                               int64_t t, int64_t c, float* partial) {
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  const int64_t g = blockIdx.x;
  const int64_t r0 = g * kRowsPerGroup;
  const int64_t r1 = r0 + kRowsPerGroup < t ? r0 + kRowsPerGroup : t;
  float s = 0.0f;
  for (int64_t r = r0; r < r1; ++r) s += dout[r * c + j] * x[r * c + j] * rstd[r];
  partial[g * c + j] = s;
}

// ---- stage 2 (both paths)
// -------------------------------------------------------------------------

// Stage 2: dweight[j] += the groups' partial sums. Block (32, kSumLanes): x = one of 32 adjacent
// columns (coalesced reads of a partial row), y = lane l summing groups l, l + kSumLanes, ... in
// order; then thread y = 0 adds the kSumLanes lane sums in lane order. Fixed order for given T
// and C; 32 x kSumLanes loads in flight per block, where a thread per column would walk all
// T / 16 groups alone.
constexpr int kSumLanes = 32;
__global__ void __launch_bounds__(32 * kSumLanes)
    rmsnorm_dweight_sum_kernel(const float* partial, int64_t groups, int64_t c, float* dweight) {
  __shared__ float lanes[kSumLanes][33];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.0f;
  if (j < c)
    for (int64_t g = threadIdx.y; g < groups; g += kSumLanes) s += partial[g * c + j];
  lanes[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < c) {
    float total = 0.0f;
    for (int l = 0; l < kSumLanes; ++l) total += lanes[l][threadIdx.x];
    dweight[j] += total;
  }
}

void check_dims(int64_t t, int64_t c) {
  // One block per row: the grid's x dimension holds at most 2^31 - 1 blocks.
  LONGSEQ_CHECK_MSG(t >= 0 && c >= 0 && t < (int64_t{1} << 31), "rmsnorm t=", t, " c=", c);
}

template <int kVec>
void forward_vec(cudaStream_t s, const float* x, const float* weight, int64_t t, int64_t c,
                 float eps, float* out, float* rstd) {
  rmsnorm_forward_vec_kernel<kVec>
      <<<static_cast<unsigned>(t), kBlock, 0, s>>>(x, weight, c, eps, out, rstd);
}

template <int kVec>
void backward_vec(cudaStream_t s, int64_t groups, const float* dout, const float* x,
                  const float* weight, const float* rstd, int64_t t, int64_t c, float* dx,
                  bool accumulate, float* partial) {
  rmsnorm_backward_vec_kernel<kVec><<<static_cast<unsigned>(groups), kBlock, 0, s>>>(
      dout, x, weight, rstd, t, c, dx, accumulate, partial);
}

}  // namespace

void rmsnorm_forward(const float* x, const float* weight, int64_t t, int64_t c, float eps,
                     float* out, float* rstd, const core::Exec& exec) {
  const cudaStream_t s = detail::stream(exec, "rmsnorm_forward");
  check_dims(t, c);
  if (t == 0) return;
  const bool vec =
      c > 0 && c % 4 == 0 && c <= kMaxVecC && aligned16(x) && aligned16(weight) && aligned16(out);
  if (!vec) {
    rmsnorm_forward_kernel<<<static_cast<unsigned>(t), kBlock, 0, s>>>(x, weight, c, eps, out,
                                                                       rstd);
  } else {
    switch (vec_per_thread(c)) {
      case 1:
        forward_vec<1>(s, x, weight, t, c, eps, out, rstd);
        break;
      case 2:
        forward_vec<2>(s, x, weight, t, c, eps, out, rstd);
        break;
      case 4:
        forward_vec<4>(s, x, weight, t, c, eps, out, rstd);
        break;
      default:
        forward_vec<8>(s, x, weight, t, c, eps, out, rstd);
        break;
    }
  }
  LONGSEQ_CUDA_LAUNCHED();
}

void rmsnorm_backward(const float* dout, const float* x, const float* weight, const float* rstd,
                      int64_t t, int64_t c, float* dx, float* dweight, bool accumulate,
                      const core::Exec& exec) {
  const cudaStream_t s = detail::stream(exec, "rmsnorm_backward");
  check_dims(t, c);
  if (t == 0 || c == 0) return;
  const int64_t groups = (t + kRowsPerGroup - 1) / kRowsPerGroup;
  const bool vec = c % 4 == 0 && c <= kMaxVecC && aligned16(dout) && aligned16(x) &&
                   aligned16(weight) && aligned16(dx);
  // Checked before the scratch is allocated, so that a refusal leaks nothing.
  const int64_t col_blocks = (c + kBlock - 1) / kBlock;
  LONGSEQ_CHECK_MSG(vec || col_blocks <= 65535, "rmsnorm_backward c=", c,
                    " exceeds the grid's y limit");
  const int64_t col_slabs = (c + 31) / 32;
  LONGSEQ_CHECK_MSG(col_slabs < (int64_t{1} << 31), "rmsnorm_backward c=", c);
  float* partial = nullptr;
  LONGSEQ_CUDA_CALL(cudaMallocAsync(reinterpret_cast<void**>(&partial),
                                    static_cast<size_t>(groups * c) * sizeof(float), s));
  // cudaMallocAsync returns at least 256-byte aligned memory, so partial's rows (C % 4 == 0) are
  // 16-byte aligned too.
  if (vec) {
    switch (vec_per_thread(c)) {
      case 1:
        backward_vec<1>(s, groups, dout, x, weight, rstd, t, c, dx, accumulate, partial);
        break;
      case 2:
        backward_vec<2>(s, groups, dout, x, weight, rstd, t, c, dx, accumulate, partial);
        break;
      case 4:
        backward_vec<4>(s, groups, dout, x, weight, rstd, t, c, dx, accumulate, partial);
        break;
      default:
        backward_vec<8>(s, groups, dout, x, weight, rstd, t, c, dx, accumulate, partial);
        break;
    }
    LONGSEQ_CUDA_LAUNCHED();
  } else {
    rmsnorm_backward_dx_kernel<<<static_cast<unsigned>(t), kBlock, 0, s>>>(dout, x, weight, rstd, c,
                                                                           dx, accumulate);
    LONGSEQ_CUDA_LAUNCHED();
    const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(col_blocks));
    rmsnorm_dweight_partial_kernel<<<grid, kBlock, 0, s>>>(dout, x, rstd, t, c, partial);
    LONGSEQ_CUDA_LAUNCHED();
  }
  rmsnorm_dweight_sum_kernel<<<static_cast<unsigned>(col_slabs), dim3(32, kSumLanes), 0, s>>>(
      partial, groups, c, dweight);
  LONGSEQ_CUDA_LAUNCHED();
  LONGSEQ_CUDA_CALL(cudaFreeAsync(partial, s));
}

}  // namespace longseq::kernels::cuda
