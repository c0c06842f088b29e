// The fused LM head + cross-entropy on a GPU (contracts in lm_head.hpp): per token tile, a
// cuBLASLt product for the logits, ce_rows_kernel for the loss and dlogits in place, two products
// for the gradients; ce_total_kernel sums the per-row losses in token order at the end.
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

// One block per row of the tile. Pass 1: the row's logsumexp (each thread an online max/sum over
// its strided values, then a warp butterfly and the warps in index order through shared memory),
// and the loss read before the row is overwritten. Pass 2: dlogits = gs exp(x - lse) - gs onehot
// (the CPU kernel's expressions, the one-hot term subtracted: BurstEngine's Algorithm 3 prints
// "+ E"). An ignored or bad row is zeroed without a logsumexp. dl16 (nullable) receives a bf16
// copy of the row for the products.
__global__ void ce_rows_kernel(float* logits, int64_t v, const int32_t* labels, int32_t ignore,
                               float gs, double* row_loss, int32_t* row_state,
                               __nv_bfloat16* dl16) {
  __shared__ float sm[32];
  __shared__ double ss[32];
  const int64_t row = blockIdx.x;
  float* x = logits + row * v;
  const int32_t label = labels[row];
  const int32_t state =
      label == ignore ? kIgnored : (label >= 0 && label < v ? kCounted : kBadLabel);
  if (state != kCounted) {
    // No loss, no gradient (the state is the block's: every thread returns here or none does).
    if (threadIdx.x == 0) {
      row_state[row] = state;
      row_loss[row] = 0.0;
    }
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      x[j] = 0.0f;
      if (dl16) dl16[row * v + j] = __float2bfloat16_rn(0.0f);
    }
    return;
  }
  // Read before pass 2 overwrites it (the reductions below hold __syncthreads).
  const float x_label = threadIdx.x == 0 ? x[label] : 0.0f;

  float m = -INFINITY;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const float xj = x[j];
    if (xj > m) {
      s = s * exp(static_cast<double>(m) - xj) + 1.0;  // exp(-inf) = 0 for the first value
      m = xj;
    } else {
      s += static_cast<double>(expf(xj - m));
    }
  }
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
  // Every thread combines the warps' states in index order: the same bits everywhere.
  m = sm[0];
  s = ss[0];
  for (int w = 1; w < warps; ++w) lse_combine(m, s, sm[w], ss[w]);
  const float lse = static_cast<float>(static_cast<double>(m) + log(s));

  if (threadIdx.x == 0) {
    row_state[row] = kCounted;
    row_loss[row] = static_cast<double>(lse) - x_label;
  }
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    float g = gs * expf(x[j] - lse);
    if (j == label) g -= gs;
    x[j] = g;
    if (dl16) dl16[row * v + j] = __float2bfloat16_rn(g);
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
    bs = std::clamp<int64_t>((int64_t{1} << 26) / std::max<int64_t>(d.v, 1), 64, 4096);
    if (bs >= 128) bs = bs / 128 * 128;
  }
  return std::max<int64_t>(1, std::min(bs, std::max<int64_t>(d.t, 1)));
}

size_t lm_head_workspace_bytes(const LmHeadDims& d, const LmHeadOptions& o) {
  const auto a = [](size_t b) { return Scratch::aligned(b); };
  const size_t bs = static_cast<size_t>(cuda::lm_head_token_tile(d, o));
  const size_t v = static_cast<size_t>(d.v), c = static_cast<size_t>(d.c),
               t = static_cast<size_t>(d.t);
  size_t bytes = a(bs * v * sizeof(float)) + a(t * sizeof(double)) + a(t * sizeof(int32_t)) +
                 a(sizeof(Totals));
  if (o.compute == core::DType::bf16)
    bytes += a(bs * v * sizeof(__nv_bfloat16)) + a(v * c * sizeof(__nv_bfloat16)) +
             a(bs * c * sizeof(__nv_bfloat16));
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
  float* logits = ws.take<float>(static_cast<size_t>(bs * d.v));
  auto* row_loss = ws.take<double>(static_cast<size_t>(d.t));
  auto* row_state = ws.take<int32_t>(static_cast<size_t>(d.t));
  auto* totals = ws.take<Totals>(1);
  __nv_bfloat16 *dl16 = nullptr, *w16 = nullptr, *h16 = nullptr;
  if (bf16) {
    dl16 = ws.take<__nv_bfloat16>(static_cast<size_t>(bs * d.v));
    w16 = ws.take<__nv_bfloat16>(static_cast<size_t>(d.v * d.c));
    h16 = ws.take<__nv_bfloat16>(static_cast<size_t>(bs * d.c));
    // The weight is an operand of every tile's products: rounded once.
    round_to_bf16(weight, d.v * d.c, reinterpret_cast<core::bf16*>(w16), o.exec);
  }
  const auto* w16c = reinterpret_cast<const core::bf16*>(w16);
  const auto* h16c = reinterpret_cast<const core::bf16*>(h16);
  const auto* dl16c = reinterpret_cast<const core::bf16*>(dl16);
  const float gs = static_cast<float>(grad_scale);
  for (int64_t t0 = 0; t0 < d.t; t0 += bs) {
    const int64_t n = std::min(bs, d.t - t0);
    const float* h = hidden + t0 * d.c;
    float* dh = dhidden + t0 * d.c;
    // logits [n, V] = H_i W^T
    if (bf16) {
      round_to_bf16(h, n * d.c, reinterpret_cast<core::bf16*>(h16), o.exec);
      gemm_bf16(o.exec, false, true, n, d.v, d.c, 1.0f, h16c, d.c, w16c, d.c, 0.0f, logits, d.v);
    } else {
      gemm_f32(o.exec, false, true, n, d.v, d.c, 1.0f, h, d.c, weight, d.c, 0.0f, logits, d.v);
    }
    ce_rows_kernel<<<static_cast<unsigned>(n), kRowBlock, 0, s>>>(
        logits, d.v, labels + t0, o.ignore_index, gs, row_loss + t0, row_state + t0, dl16);
    LONGSEQ_CUDA_LAUNCHED();
    // dH_i = dLogits W [n, C]; dW += dLogits^T H_i [V, C]
    if (bf16) {
      gemm_bf16(o.exec, false, false, n, d.c, d.v, 1.0f, dl16c, d.v, w16c, d.c, 0.0f, dh, d.c);
      gemm_bf16(o.exec, true, false, d.v, d.c, n, 1.0f, dl16c, d.v, h16c, d.c, 1.0f, dweight, d.c);
    } else {
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
