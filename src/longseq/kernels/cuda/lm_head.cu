// The fused LM head + cross-entropy on a GPU (contracts in lm_head.hpp): per token tile, a
// cuBLASLt product for the logits, ce_rows_kernel (fp32 logits) or ce_rows_bf16_kernel (bf16
// logits) for the loss and dlogits in place, two products for the gradients; ce_total_kernel sums
// the per-row losses in token order at the end.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/gemm.hpp"
#include "longseq/kernels/cuda/launch.cuh"
#include "longseq/kernels/cuda/lm_head.hpp"

namespace longseq::kernels::cuda {

namespace {

// Threads per row of ce_rows_kernel: a row of V = 128256 logits is 125 values per thread; the
// largest block block_sum takes, so that few blocks stream each row.
constexpr int kRowBlock = 1024;
// Threads per row of ce_rows_bf16_kernel: 31 16-byte groups per thread at V = 128256; half of
// kRowBlock so that ~40 registers a thread still fit three blocks (rows) on an SM, whose loads
// go on while another row's block sits in block_lse's barrier.
constexpr int kBf16RowBlock = 512;
// Row states written by ce_rows_kernel.
constexpr int32_t kIgnored = 0, kCounted = 1, kBadLabel = 2;

// What ce_total_kernel returns to the host.
struct Totals {
  double sum;
  long long count;
  long long first_bad;  // T when every label is valid
};

// Combines two online-logsumexp states (max m, sum s of exp(x - m)); -inf maxima mean empty.
// Symmetric in its arguments up to the commutative final addition, so a butterfly gives every
// lane the same bits.
__device__ inline void lse_combine(float& m, double& s, float m2, double s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both empty
  const double a = m == -INFINITY ? 0.0 : s * exp(static_cast<double>(m) - mx);
  const double b = m2 == -INFINITY ? 0.0 : s2 * exp(static_cast<double>(m2) - mx);
  m = mx;
  s = a + b;
}

// One value of a thread's online logsumexp (max m, sum s of exp(x - m) in fp64).
__device__ inline void lse_push(float x, float& m, double& s) {
  if (x > m) {
    s = s * exp(static_cast<double>(m) - x) + 1.0;  // exp(-inf) = 0 for the first value
    m = x;
  } else {
    s += static_cast<double>(expf(x - m));
  }
}

// The row's logsumexp from every thread's (m, s): a warp butterfly, then the warps in index order
// through shared memory; every thread gets the same bits. Holds __syncthreads (every thread of the
// block calls it).
__device__ inline float block_lse(float m, double s, float* sm, double* ss) {
  for (int offset = 16; offset > 0; offset >>= 1)
    lse_combine(m, s, __shfl_xor_sync(0xffffffffu, m, offset),
                __shfl_xor_sync(0xffffffffu, s, offset));
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  m = sm[0];
  s = ss[0];
  for (int w = 1; w < warps; ++w) lse_combine(m, s, sm[w], ss[w]);
  return static_cast<float>(static_cast<double>(m) + log(s));
}

// The row state of a label.
__device__ inline int32_t label_state(int32_t label, int32_t ignore, int64_t v) {
  return label == ignore ? kIgnored : (label >= 0 && label < v ? kCounted : kBadLabel);
}

// One block per row of the tile (fp32 logits, the f32 compute mode). Pass 1: the row's
// logsumexp (each thread an online max/sum over its strided values, then block_lse), and the loss
// read before the row is overwritten. Pass 2: dlogits = gs exp(x - lse) - gs onehot (the CPU
// kernel's expressions, the one-hot term subtracted: BurstEngine's Algorithm 3 prints "+ E"). An
// ignored or bad row is zeroed without a logsumexp.
__global__ void ce_rows_kernel(float* logits, int64_t v, const int32_t* labels, int32_t ignore,
                               float gs, double* row_loss, int32_t* row_state) {
  __shared__ float sm[32];
  __shared__ double ss[32];
  const int64_t row = blockIdx.x;
  float* x = logits + row * v;
  const int32_t label = labels[row];
  const int32_t state = label_state(label, ignore, v);
  if (state != kCounted) {
    // No loss, no gradient (the state is the block's: every thread returns here or none does).
    if (threadIdx.x == 0) {
      row_state[row] = state;
      row_loss[row] = 0.0;
    }
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) x[j] = 0.0f;
    return;
  }
  // Read before pass 2 overwrites it (block_lse holds __syncthreads).
  const float x_label = threadIdx.x == 0 ? x[label] : 0.0f;
  float m = -INFINITY;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) lse_push(x[j], m, s);
  const float lse = block_lse(m, s, sm, ss);
  if (threadIdx.x == 0) {
    row_state[row] = kCounted;
    row_loss[row] = static_cast<double>(lse) - x_label;
  }
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    float g = gs * expf(x[j] - lse);
    if (j == label) g -= gs;
    x[j] = g;
  }
}

// kN consecutive bf16 of a row, as floats: one 16-byte load (kN = 8) or one 2-byte one.
template <int kN>
__device__ inline void load_bf16(const __nv_bfloat16* x, int64_t q, float* f) {
  if constexpr (kN == 8) {
    const uint4 raw = reinterpret_cast<const uint4*>(x)[q];
    const auto* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 t = __bfloat1622float2(p[k]);
      f[2 * k] = t.x;
      f[2 * k + 1] = t.y;
    }
  } else {
    f[0] = __bfloat162float(x[q]);
  }
}

// The inverse: kN floats rounded to bf16 (nearest even) and stored.
template <int kN>
__device__ inline void store_bf16(__nv_bfloat16* x, int64_t q, const float* f) {
  if constexpr (kN == 8) {
    uint4 raw;
    auto* p = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) p[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    reinterpret_cast<uint4*>(x)[q] = raw;
  } else {
    x[q] = __float2bfloat16_rn(f[0]);
  }
}

// ce_rows_kernel on bf16 logits (the bf16 compute mode), in place: the same expressions in fp32 on
// the bf16 values, dlogits rounded to bf16 (they feed only the bf16 products). kN = 8 (V % 8 == 0:
// every row starts 16-byte aligned): 16-byte loads and stores, kUnroll of them issued before the
// first is used; kN = 1 any V. A thread takes groups q = threadIdx.x, + blockDim.x, ... of kN
// values, in order, so the bits depend on V and kN only.
template <int kN>
__global__ void __launch_bounds__(kBf16RowBlock)
    ce_rows_bf16_kernel(__nv_bfloat16* logits, int64_t v, const int32_t* labels, int32_t ignore,
                        float gs, double* row_loss, int32_t* row_state) {
  constexpr int kUnroll = 2;
  __shared__ float sm[32];
  __shared__ double ss[32];
  const int64_t row = blockIdx.x;
  __nv_bfloat16* x = logits + row * v;
  const int64_t nq = v / kN;  // kN divides V (the launch picks kN = 8 only then)
  const int64_t step = blockDim.x;
  const int32_t label = labels[row];
  const int32_t state = label_state(label, ignore, v);
  if (state != kCounted) {
    if (threadIdx.x == 0) {
      row_state[row] = state;
      row_loss[row] = 0.0;
    }
    float zero[kN];
#pragma unroll
    for (int i = 0; i < kN; ++i) zero[i] = 0.0f;
    for (int64_t q = threadIdx.x; q < nq; q += step) store_bf16<kN>(x, q, zero);
    return;
  }
  // Read before pass 2 overwrites it (block_lse holds __syncthreads).
  const float x_label = threadIdx.x == 0 ? __bfloat162float(x[label]) : 0.0f;
  float m = -INFINITY;
  double s = 0.0;
  for (int64_t q0 = threadIdx.x; q0 < nq; q0 += kUnroll * step) {
    float f[kUnroll][kN];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (q0 + u * step < nq) load_bf16<kN>(x, q0 + u * step, f[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (q0 + u * step < nq)
#pragma unroll
        for (int i = 0; i < kN; ++i) lse_push(f[u][i], m, s);
  }
  const float lse = block_lse(m, s, sm, ss);
  if (threadIdx.x == 0) {
    row_state[row] = kCounted;
    row_loss[row] = static_cast<double>(lse) - x_label;
  }
  for (int64_t q = threadIdx.x; q < nq; q += step) {
    float f[kN];
    load_bf16<kN>(x, q, f);
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      float g = gs * expf(f[i] - lse);
      if (q * kN + i == label) g -= gs;
      f[i] = g;
    }
    store_bf16<kN>(x, q, f);
  }
}

// Sum of the row losses, count of counted rows and the first bad row over [0, t): each thread
// takes rows i, i + blockDim.x, ... in order, then fixed-shape block reductions. One block.
__global__ void ce_total_kernel(const double* row_loss, const int32_t* row_state, int64_t t,
                                Totals* out) {
  __shared__ double sd[32];
  __shared__ long long sc[32];
  __shared__ long long sb[32];
  double sum = 0.0;
  long long count = 0, bad = t;
  for (int64_t i = threadIdx.x; i < t; i += blockDim.x) {
    sum += row_loss[i];
    count += row_state[i] == kCounted;
    if (row_state[i] == kBadLabel && i < bad) bad = i;
  }
  sum = detail::block_sum(sum, sd);
  count = detail::block_sum(count, sc);
  for (int offset = 16; offset > 0; offset >>= 1) {
    const long long o = __shfl_xor_sync(0xffffffffu, bad, offset);
    bad = o < bad ? o : bad;
  }
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  if (lane == 0) sb[warp] = bad;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 0; w < static_cast<int>(blockDim.x) >> 5; ++w) bad = sb[w] < bad ? sb[w] : bad;
    out->sum = sum;
    out->count = count;
    out->first_bad = bad;
  }
}

// One device allocation carved into 256-byte aligned parts (the products' plans are keyed by
// alignment, so every part gets the best), freed on scope exit: also when a launch throws, after
// the implicit synchronisation of cudaFree.
class Scratch {
 public:
  Scratch(core::Device dev, size_t bytes) : dev_(dev) {
    if (bytes > 0)
      base_ = static_cast<unsigned char*>(
          core::device_memory(dev).allocate(dev, bytes, "lm_head_ce workspace"));
  }
  ~Scratch() {
    if (base_) core::device_memory(dev_).release(dev_, base_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* take(size_t n) {
    T* p = reinterpret_cast<T*>(base_ + used_);
    used_ += aligned(n * sizeof(T));
    return p;
  }
  static size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

 private:
  core::Device dev_;
  unsigned char* base_ = nullptr;
  size_t used_ = 0;
};

void check_dims(const LmHeadDims& d, const LmHeadOptions& o) {
  core::require(d.t >= 0 && d.c >= 0 && d.v >= 1, "kernels", "lm_head_ce t=", d.t, " c=", d.c,
                " v=", d.v, ": dims must be >= 0 and the vocabulary non-empty");
  core::require(o.compute == core::DType::f32 || o.compute == core::DType::bf16, "kernels",
                "lm_head_ce compute precision ", core::dtype_name(o.compute),
                ": expected f32 or bf16");
  // One block per tile row: the grid's x dimension holds at most 2^31 - 1 blocks.
  LONGSEQ_CHECK_MSG(cuda::lm_head_token_tile(d, o) < (int64_t{1} << 31), "lm_head_ce token tile ",
                    cuda::lm_head_token_tile(d, o));
}

}  // namespace

int64_t lm_head_token_tile(const LmHeadDims& d, const LmHeadOptions& o) {
  int64_t bs = o.token_tile;
  if (bs <= 0) {
    // 2^26 fp32 or 2^28 bf16 logits: 256 or 512 MiB. The bf16 tile is 4x the rows (2048 at V =
    // 128256) so that dweight's fp32 read-modify-write ([V, C] per tile) is amortised over a K
    // of 2048 and its product stays compute-bound.
    const int64_t elems = o.compute == core::DType::bf16 ? int64_t{1} << 28 : int64_t{1} << 26;
    bs = std::clamp<int64_t>(elems / std::max<int64_t>(d.v, 1), 64, 4096);
    if (bs >= 128) bs = bs / 128 * 128;
  }
  return std::max<int64_t>(1, std::min(bs, std::max<int64_t>(d.t, 1)));
}

size_t lm_head_workspace_bytes(const LmHeadDims& d, const LmHeadOptions& o) {
  const auto a = [](size_t b) { return Scratch::aligned(b); };
  const size_t bs = static_cast<size_t>(cuda::lm_head_token_tile(d, o));
  const size_t v = static_cast<size_t>(d.v), c = static_cast<size_t>(d.c),
               t = static_cast<size_t>(d.t);
  // Exactly what lm_head_ce_fused takes from its Scratch: the logits tile (fp32, or bf16 at bf16
  // compute, dlogits in place either way), per-token loss and state, the totals, and at bf16
  // compute the rounded weight and hidden tile.
  size_t bytes = a(t * sizeof(double)) + a(t * sizeof(int32_t)) + a(sizeof(Totals));
  if (o.compute == core::DType::bf16)
    bytes += a(bs * v * sizeof(__nv_bfloat16)) + a(v * c * sizeof(__nv_bfloat16)) +
             a(bs * c * sizeof(__nv_bfloat16));
  else
    bytes += a(bs * v * sizeof(float));
  return bytes;
}

LossPart lm_head_ce_fused(const float* hidden, const float* weight, const int32_t* labels,
                          const LmHeadDims& d, double grad_scale, float* dhidden, float* dweight,
                          const LmHeadOptions& o) {
  const cudaStream_t s = detail::stream(o.exec, "lm_head_ce_fused");
  check_dims(d, o);
  LossPart out;
  if (d.t == 0) return out;
  const bool bf16 = o.compute == core::DType::bf16;
  const int64_t bs = cuda::lm_head_token_tile(d, o);
  Scratch ws(o.exec.device, lm_head_workspace_bytes(d, o));
  auto* row_loss = ws.take<double>(static_cast<size_t>(d.t));
  auto* row_state = ws.take<int32_t>(static_cast<size_t>(d.t));
  auto* totals = ws.take<Totals>(1);
  float* logits = nullptr;
  __nv_bfloat16 *l16 = nullptr, *w16 = nullptr, *h16 = nullptr;
  if (!bf16) {
    logits = ws.take<float>(static_cast<size_t>(bs * d.v));
  } else {
    // 256-byte aligned (Scratch), so with V % 8 == 0 every row starts 16-byte aligned.
    l16 = ws.take<__nv_bfloat16>(static_cast<size_t>(bs * d.v));
    w16 = ws.take<__nv_bfloat16>(static_cast<size_t>(d.v * d.c));
    h16 = ws.take<__nv_bfloat16>(static_cast<size_t>(bs * d.c));
    // The weight is an operand of every tile's products: rounded once.
    round_to_bf16(weight, d.v * d.c, reinterpret_cast<core::bf16*>(w16), o.exec);
  }
  const auto* w16c = reinterpret_cast<const core::bf16*>(w16);
  const auto* h16c = reinterpret_cast<const core::bf16*>(h16);
  const auto* l16c = reinterpret_cast<const core::bf16*>(l16);
  const bool vec8 = d.v % 8 == 0;
  const float gs = static_cast<float>(grad_scale);
  for (int64_t t0 = 0; t0 < d.t; t0 += bs) {
    const int64_t n = std::min(bs, d.t - t0);
    const float* h = hidden + t0 * d.c;
    float* dh = dhidden + t0 * d.c;
    // logits [n, V] = H_i W^T; then dlogits in place; dH_i = dLogits W [n, C]; dW += dLogits^T
    // H_i [V, C]
    if (bf16) {
      round_to_bf16(h, n * d.c, reinterpret_cast<core::bf16*>(h16), o.exec);
      gemm_bf16_out_bf16(o.exec, false, true, n, d.v, d.c, 1.0f, h16c, d.c, w16c, d.c,
                         reinterpret_cast<core::bf16*>(l16), d.v);
      if (vec8)
        ce_rows_bf16_kernel<8><<<static_cast<unsigned>(n), kBf16RowBlock, 0, s>>>(
            l16, d.v, labels + t0, o.ignore_index, gs, row_loss + t0, row_state + t0);
      else
        ce_rows_bf16_kernel<1><<<static_cast<unsigned>(n), kBf16RowBlock, 0, s>>>(
            l16, d.v, labels + t0, o.ignore_index, gs, row_loss + t0, row_state + t0);
      LONGSEQ_CUDA_LAUNCHED();
      gemm_bf16(o.exec, false, false, n, d.c, d.v, 1.0f, l16c, d.v, w16c, d.c, 0.0f, dh, d.c);
      gemm_bf16(o.exec, true, false, d.v, d.c, n, 1.0f, l16c, d.v, h16c, d.c, 1.0f, dweight, d.c);
    } else {
      gemm_f32(o.exec, false, true, n, d.v, d.c, 1.0f, h, d.c, weight, d.c, 0.0f, logits, d.v);
      ce_rows_kernel<<<static_cast<unsigned>(n), kRowBlock, 0, s>>>(
          logits, d.v, labels + t0, o.ignore_index, gs, row_loss + t0, row_state + t0);
      LONGSEQ_CUDA_LAUNCHED();
      gemm_f32(o.exec, false, false, n, d.c, d.v, 1.0f, logits, d.v, weight, d.c, 0.0f, dh, d.c);
      gemm_f32(o.exec, true, false, d.v, d.c, n, 1.0f, logits, d.v, h, d.c, 1.0f, dweight, d.c);
    }
  }
  ce_total_kernel<<<1, kRowBlock, 0, s>>>(row_loss, row_state, d.t, totals);
  LONGSEQ_CUDA_LAUNCHED();
  Totals host{};
  LONGSEQ_CUDA_CALL(cudaMemcpyAsync(&host, totals, sizeof(Totals), cudaMemcpyDeviceToHost, s));
  LONGSEQ_CUDA_CALL(cudaStreamSynchronize(s));
  if (host.first_bad < d.t) {
    int32_t label = 0;
    LONGSEQ_CUDA_CALL(
        cudaMemcpyAsync(&label, labels + host.first_bad, sizeof(label), cudaMemcpyDeviceToHost, s));
    LONGSEQ_CUDA_CALL(cudaStreamSynchronize(s));
    core::fail("model", "label ", label, " at row ", host.first_bad, " outside the vocabulary [0, ",
               d.v, ") and not the ignore index ", o.ignore_index);
  }
  out.sum = host.sum;
  out.count = host.count;
  return out;
}

}  // namespace longseq::kernels::cuda
