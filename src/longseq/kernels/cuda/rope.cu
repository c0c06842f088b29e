// RoPE on a GPU (contracts in rope.hpp). The table is built on the host by the loop kernels/cpu
// uses too (kernels/rope_table.hpp: angles in fp64, cos and sin rounded to fp32), so both backends
// rotate by the same fp32 values; the rotation is the CPU kernel's expression.
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/launch.cuh"
#include "longseq/kernels/cuda/rope.hpp"
#include "longseq/kernels/rope_table.hpp"

namespace longseq::kernels::cuda {

namespace {

using detail::kBlock;

// One (token, head, pair i) per iteration: v[i], v[i + half] rotated by the token's angle i.
__global__ void rope_rotate_kernel(float* x, int64_t t, int64_t h, int64_t half,
                                   const float* cos_table, const float* sin_table,
                                   const uint8_t* pad, float sign) {
  const int64_t n = t * h * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += stride) {
    const int64_t i = idx % half;
    const int64_t th = idx / half;  // token * h + head
    const int64_t r = th / h;
    if (pad[r]) continue;
    float* v = x + th * 2 * half;
    const float cs = cos_table[r * half + i], s = sign * sin_table[r * half + i];
    const float a = v[i], b = v[i + half];
    v[i] = a * cs - b * s;
    v[i + half] = b * cs + a * s;
  }
}

}  // namespace

RopeTable::RopeTable(const int64_t* pos, int64_t t, int64_t d, double theta,
                     const core::Exec& exec) {
  const std::vector<double> inv = rope_plain_inv_freq(d, theta);
  *this = RopeTable(pos, t, inv.data(), d / 2, 1.0, exec);
}

RopeTable::RopeTable(const int64_t* pos, int64_t t, const double* inv_freq, int64_t half,
                     double attention_factor, const core::Exec& exec)
    : t_(t), d_(2 * half) {
  const cudaStream_t s = detail::stream(exec, "RopeTable");
  core::require(half > 0, "kernels", "rope head dim ", 2 * half, " must be even and positive");
  LONGSEQ_CHECK_MSG(t >= 0, "RopeTable t=", t);
  if (t == 0) return;
  // Host image of the table: cos [T, half], sin [T, half], then pad [T] bytes, filled by the
  // loop the CPU table uses.
  const size_t n = static_cast<size_t>(t * half);
  const size_t bytes = 2 * n * sizeof(float) + static_cast<size_t>(t);
  std::vector<float> host(2 * n + (static_cast<size_t>(t) + sizeof(float) - 1) / sizeof(float));
  rope_fill_table(pos, t, inv_freq, half, attention_factor, host.data(), host.data() + n,
                  reinterpret_cast<uint8_t*>(host.data() + 2 * n));
  void* dev = nullptr;
  LONGSEQ_CUDA_CALL(cudaMalloc(&dev, bytes));
  table_ = static_cast<float*>(dev);
  pad_ = static_cast<uint8_t*>(dev) + 2 * n * sizeof(float);
  LONGSEQ_CUDA_CALL(cudaMemcpyAsync(dev, host.data(), bytes, cudaMemcpyHostToDevice, s));
  // `host` is freed on return: wait until the copy has read it.
  LONGSEQ_CUDA_CALL(cudaStreamSynchronize(s));
}

RopeTable::~RopeTable() {
  if (table_) cudaFree(table_);  // not checked: a destructor must not throw
}

RopeTable::RopeTable(RopeTable&& o) noexcept
    : t_(o.t_),
      d_(o.d_),
      table_(std::exchange(o.table_, nullptr)),
      pad_(std::exchange(o.pad_, nullptr)) {}

RopeTable& RopeTable::operator=(RopeTable&& o) noexcept {
  if (this != &o) {
    if (table_) cudaFree(table_);
    t_ = o.t_;
    d_ = o.d_;
    table_ = std::exchange(o.table_, nullptr);
    pad_ = std::exchange(o.pad_, nullptr);
  }
  return *this;
}

void RopeTable::rotate(float* x, int64_t h, float sign, const core::Exec& exec,
                       const char* kernel) const {
  const cudaStream_t s = detail::stream(exec, kernel);
  LONGSEQ_CHECK_MSG(h >= 0, kernel, " h=", h);
  const int64_t half = d_ / 2;
  const int64_t n = t_ * h * half;
  if (n == 0) return;
  rope_rotate_kernel<<<detail::grid_for(n), kBlock, 0, s>>>(x, t_, h, half, table_,
                                                            table_ + t_ * half, pad_, sign);
  LONGSEQ_CUDA_LAUNCHED();
}

void RopeTable::forward(float* x, int64_t h, const core::Exec& exec) const {
  rotate(x, h, 1.0f, exec, "RopeTable::forward");
}
void RopeTable::backward(float* dx, int64_t h, const core::Exec& exec) const {
  rotate(dx, h, -1.0f, exec, "RopeTable::backward");
}

}  // namespace longseq::kernels::cuda
