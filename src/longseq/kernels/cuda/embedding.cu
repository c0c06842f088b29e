// The embedding on a GPU (contracts in embedding.hpp). Forward: one block per token row copying
// its weight row (or zeros), over float4 where C and the pointers allow. Backward: keys (id, or V
// for rows that contribute nothing) and values (positions) sorted by CUB's stable radix sort; then
// one block per sorted index, of which only the first index of each id's run works: it walks the
// run (positions ascending) adding dout rows into dweight, a thread per column.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/embedding.hpp"
#include "longseq/kernels/cuda/launch.cuh"

namespace longseq::kernels::cuda {

namespace {

using detail::kBlock;

constexpr unsigned long long kNoBadRow = ULLONG_MAX;

// One block per row. A bad id records its row (the smallest such row wins: integer atomicMin is
// order-independent) and leaves the row zero.
__global__ void embedding_forward_kernel(const int32_t* tokens, const int64_t* pos,
                                         const float* weight, int64_t c, int64_t v, float* out,
                                         unsigned long long* bad_row) {
  const int64_t row = blockIdx.x;
  float* o = out + row * c;
  const int32_t id = tokens[row];
  const bool valid = id >= 0 && id < v;
  if (pos[row] < 0 || !valid) {
    if (pos[row] >= 0 && threadIdx.x == 0) atomicMin(bad_row, static_cast<unsigned long long>(row));
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) o[j] = 0.0f;
    return;
  }
  const float* w = weight + static_cast<int64_t>(id) * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) o[j] = w[j];
}

// The same over float4 (C % 4 == 0, weight and out 16-byte aligned): each thread issues up to
// kChunk 16-byte loads before its first store (a store might alias a later load as far as the
// compiler knows, so a plain loop keeps one load in flight per thread).
constexpr int kChunk = 4;
__global__ void embedding_forward_vec_kernel(const int32_t* tokens, const int64_t* pos,
                                             const float* weight, int64_t c, int64_t v, float* out,
                                             unsigned long long* bad_row) {
  const int64_t row = blockIdx.x;
  const int64_t nv = c / 4;
  const int64_t step = blockDim.x;
  auto* o = reinterpret_cast<float4*>(out + row * c);
  const int32_t id = tokens[row];
  const bool valid = id >= 0 && id < v;
  if (pos[row] < 0 || !valid) {
    if (pos[row] >= 0 && threadIdx.x == 0) atomicMin(bad_row, static_cast<unsigned long long>(row));
    for (int64_t j = threadIdx.x; j < nv; j += step) o[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return;
  }
  const auto* w = reinterpret_cast<const float4*>(weight + static_cast<int64_t>(id) * c);
  for (int64_t j0 = threadIdx.x; j0 < nv; j0 += kChunk * step) {
    float4 r[kChunk];
#pragma unroll
    for (int u = 0; u < kChunk; ++u)
      if (j0 + u * step < nv) r[u] = w[j0 + u * step];
#pragma unroll
    for (int u = 0; u < kChunk; ++u)
      if (j0 + u * step < nv) o[j0 + u * step] = r[u];
  }
}

// keys[t] = id for a contributing row, V otherwise (sorted last, skipped); values[t] = t.
__global__ void embedding_keys_kernel(const int32_t* tokens, const int64_t* pos, int64_t t,
                                      int64_t v, uint32_t* keys, int32_t* values) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < t;
       i += stride) {
    const int32_t id = tokens[i];
    const bool use = pos[i] >= 0 && id >= 0 && id < v;
    keys[i] = use ? static_cast<uint32_t>(id) : static_cast<uint32_t>(v);
    values[i] = static_cast<int32_t>(i);
  }
}

// Block i works only when sorted index i starts a run of one id: dweight[id] += the run's dout
// rows, in the run's (ascending position) order.
__global__ void embedding_backward_kernel(const uint32_t* keys, const int32_t* rows, int64_t t,
                                          int64_t c, int64_t v, const float* dout, float* dweight) {
  const int64_t i = blockIdx.x;
  const uint32_t key = keys[i];
  if (static_cast<int64_t>(key) >= v) return;
  if (i > 0 && keys[i - 1] == key) return;
  float* dw = dweight + static_cast<int64_t>(key) * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    float acc = dw[j];
    for (int64_t p = i; p < t && keys[p] == key; ++p)
      acc += dout[static_cast<int64_t>(rows[p]) * c + j];
    dw[j] = acc;
  }
}

void check_dims(int64_t t, int64_t c, int64_t v) {
  // One block per row (grid x < 2^31); int32 positions in the sort; ids below 2^31.
  LONGSEQ_CHECK_MSG(t >= 0 && c >= 0 && v >= 0 && t < (int64_t{1} << 31) && v < (int64_t{1} << 31),
                    "embedding t=", t, " c=", c, " v=", v);
}

template <class T>
T* stream_alloc(size_t n, cudaStream_t s) {
  void* p = nullptr;
  LONGSEQ_CUDA_CALL(cudaMallocAsync(&p, n * sizeof(T), s));
  return static_cast<T*>(p);
}

}  // namespace

void embedding_forward(const int32_t* tokens, const int64_t* pos, const float* weight, int64_t t,
                       int64_t c, int64_t v, float* out, const core::Exec& exec) {
  const cudaStream_t s = detail::stream(exec, "embedding_forward");
  check_dims(t, c, v);
  if (t == 0) return;
  unsigned long long* bad = stream_alloc<unsigned long long>(1, s);
  LONGSEQ_CUDA_CALL(cudaMemsetAsync(bad, 0xff, sizeof(unsigned long long), s));  // kNoBadRow
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (c % 4 == 0 && aligned16(weight) && aligned16(out))
    embedding_forward_vec_kernel<<<static_cast<unsigned>(t), kBlock, 0, s>>>(tokens, pos, weight, c,
                                                                             v, out, bad);
  else
    embedding_forward_kernel<<<static_cast<unsigned>(t), kBlock, 0, s>>>(tokens, pos, weight, c, v,
                                                                         out, bad);
  LONGSEQ_CUDA_LAUNCHED();
  unsigned long long bad_row = kNoBadRow;
  LONGSEQ_CUDA_CALL(cudaMemcpyAsync(&bad_row, bad, sizeof(bad_row), cudaMemcpyDeviceToHost, s));
  LONGSEQ_CUDA_CALL(cudaFreeAsync(bad, s));
  LONGSEQ_CUDA_CALL(cudaStreamSynchronize(s));
  if (bad_row == kNoBadRow) return;
  // The error path: read the offending id and position back for the message.
  int32_t id = 0;
  int64_t p = 0;
  LONGSEQ_CUDA_CALL(cudaMemcpyAsync(&id, tokens + bad_row, sizeof(id), cudaMemcpyDeviceToHost, s));
  LONGSEQ_CUDA_CALL(cudaMemcpyAsync(&p, pos + bad_row, sizeof(p), cudaMemcpyDeviceToHost, s));
  LONGSEQ_CUDA_CALL(cudaStreamSynchronize(s));
  core::fail("kernels", "token id ", id, " at position ", p, " outside the vocabulary [0, ", v,
             ")");
}

void embedding_backward(const int32_t* tokens, const int64_t* pos, const float* dout, int64_t t,
                        int64_t c, int64_t v, float* dweight, const core::Exec& exec) {
  const cudaStream_t s = detail::stream(exec, "embedding_backward");
  check_dims(t, c, v);
  if (t == 0 || c == 0) return;
  const size_t n = static_cast<size_t>(t);
  uint32_t* keys_in = stream_alloc<uint32_t>(n, s);
  uint32_t* keys_out = stream_alloc<uint32_t>(n, s);
  int32_t* rows_in = stream_alloc<int32_t>(n, s);
  int32_t* rows_out = stream_alloc<int32_t>(n, s);
  embedding_keys_kernel<<<detail::grid_for(t), kBlock, 0, s>>>(tokens, pos, t, v, keys_in, rows_in);
  LONGSEQ_CUDA_LAUNCHED();
  // Keys are in [0, V]: sort only the bits that can be set.
  int end_bit = 1;
  while (end_bit < 32 && (int64_t{1} << end_bit) <= v) ++end_bit;
  const int items = static_cast<int>(t);
  size_t temp_bytes = 0;
  LONGSEQ_CUDA_CALL(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, rows_in,
                                                    rows_out, items, 0, end_bit, s));
  void* temp = stream_alloc<unsigned char>(temp_bytes > 0 ? temp_bytes : 1, s);
  LONGSEQ_CUDA_CALL(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, rows_in,
                                                    rows_out, items, 0, end_bit, s));
  embedding_backward_kernel<<<static_cast<unsigned>(t), kBlock, 0, s>>>(keys_out, rows_out, t, c, v,
                                                                        dout, dweight);
  LONGSEQ_CUDA_LAUNCHED();
  for (void* p : {static_cast<void*>(keys_in), static_cast<void*>(keys_out),
                  static_cast<void*>(rows_in), static_cast<void*>(rows_out), temp})
    LONGSEQ_CUDA_CALL(cudaFreeAsync(p, s));
}

}  // namespace longseq::kernels::cuda
