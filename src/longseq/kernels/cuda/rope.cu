// RoPE on a GPU (contracts in rope.hpp). The table is kernels/cpu/rope.cpp's, built the same way
// on the host (angles in fp64, cos and sin rounded to fp32), so both backends rotate by the same
// fp32 values; the rotation is the CPU kernel's expression.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/launch.cuh"
#include "longseq/kernels/cuda/rope.hpp"

namespace longseq::kernels::cuda {

namespace {

using detail::kBlock;

std::vector<double> plain_inv_freq(int64_t d, double theta) {
  core::require(d > 0 && d % 2 == 0, "kernels", "rope head dim ", d, " must be even and positive");
  core::require(theta > 0, "kernels", "rope theta must be > 0, got ", theta);
  // The expression of kernels/cpu/rope.cpp (and model/rope_scaling.cpp): equal bits.
  std::vector<double> inv(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i)
    inv[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  return inv;
}

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
  const std::vector<double> inv = plain_inv_freq(d, theta);
  *this = RopeTable(pos, t, inv.data(), d / 2, 1.0, exec);
}

RopeTable::RopeTable(const int64_t* pos, int64_t t, const double* inv_freq, int64_t half,
                     double attention_factor, const core::Exec& exec)
    : t_(t), d_(2 * half) {
  const cudaStream_t s = detail::stream(exec, "RopeTable");
  core::require(half > 0, "kernels", "rope head dim ", 2 * half, " must be even and positive");
  LONGSEQ_CHECK_MSG(t >= 0, "RopeTable t=", t);
  if (t == 0) return;
  // Host image of the table: cos [T, half], sin [T, half], pad [T] bytes.
  const size_t n = static_cast<size_t>(t * half);
  const size_t bytes = 2 * n * sizeof(float) + static_cast<size_t>(t);
  std::vector<unsigned char> host(bytes);
  std::vector<float> cs(n, 1.0f), sn(n, 0.0f);
  std::vector<uint8_t> pad(static_cast<size_t>(t), 0);
  for (int64_t r = 0; r < t; ++r) {
    if (pos[r] < 0) {
      pad[r] = 1;
      continue;
    }
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(pos[r]) * inv_freq[i];
      cs[r * half + i] = static_cast<float>(std::cos(a) * attention_factor);
      sn[r * half + i] = static_cast<float>(std::sin(a) * attention_factor);
    }
  }
  std::copy(reinterpret_cast<const unsigned char*>(cs.data()),
            reinterpret_cast<const unsigned char*>(cs.data() + n), host.data());
  std::copy(reinterpret_cast<const unsigned char*>(sn.data()),
            reinterpret_cast<const unsigned char*>(sn.data() + n), host.data() + n * sizeof(float));
  std::copy(pad.begin(), pad.end(), host.data() + 2 * n * sizeof(float));
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
