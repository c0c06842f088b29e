// The CUDA device layer (contracts in device.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/device.hpp"

namespace longseq::kernels::cuda {

void check(int status, const char* what, const char* file, int line) {
  if (status == cudaSuccess) return;
  const auto e = static_cast<cudaError_t>(status);
  // A sticky error (a faulted kernel) poisons the context; clearing the last error keeps the next
  // check from reporting this one twice.
  cudaGetLastError();
  core::fail("cuda", what, " failed: ", cudaGetErrorString(e), " (", status, ") at ", file, ":",
             line);
}

std::string version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

RuntimeInfo runtime_info() {
  RuntimeInfo r;
#if defined(LONGSEQ_CUDA_ARCHS)
  r.archs = LONGSEQ_CUDA_ARCHS;
#endif
  cudaRuntimeGetVersion(&r.runtime_version);
  if (cudaDriverGetVersion(&r.driver_version) != cudaSuccess) r.driver_version = 0;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    r.status = cudaGetErrorString(e);
    cudaGetLastError();
    return r;
  }
  r.status = "ok";
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    r.gpus.push_back({i, p.name, p.major, p.minor, p.totalGlobalMem, p.multiProcessorCount});
  }
  return r;
}

namespace {

// What core::Buffer holds per GPU (memory_stats): sizes by pointer, since release gets only the
// pointer. One map and lock for all GPUs; an allocation is a cudaMalloc, far slower than this.
constexpr int kMaxGpus = 64;
std::mutex accounting_mutex;
std::unordered_map<void*, std::pair<int, size_t>> live_allocations;
std::array<MemoryStats, kMaxGpus> accounting{};

void count_allocation(int index, void* p, size_t bytes) {
  std::lock_guard<std::mutex> lk(accounting_mutex);
  live_allocations[p] = {index, bytes};
  if (index < 0 || index >= kMaxGpus) return;
  MemoryStats& m = accounting[static_cast<size_t>(index)];
  m.current += bytes;
  m.peak = std::max(m.peak, m.current);
}

void count_release(void* p) noexcept {
  std::lock_guard<std::mutex> lk(accounting_mutex);
  const auto it = live_allocations.find(p);
  if (it == live_allocations.end()) return;
  const auto [index, bytes] = it->second;
  if (index >= 0 && index < kMaxGpus) accounting[static_cast<size_t>(index)].current -= bytes;
  live_allocations.erase(it);
}

void* allocate(core::Device device, size_t bytes, const char* name) {
  LONGSEQ_CUDA_CALL(cudaSetDevice(device.index));
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    core::fail("cuda", "out of device memory for ", name, " on ", device.str(), ": ", bytes,
               " bytes requested, ", free_b, " of ", total_b, " bytes free");
  }
  check(e, "cudaMalloc", __FILE__, __LINE__);
  count_allocation(device.index, p, bytes);
  return p;
}

void release(core::Device, void* p) noexcept {
  count_release(p);
  cudaFree(p);  // not checked: a destructor must not throw
}

// cudaMemcpyDefault: with unified virtual addressing (every 64-bit platform CUDA 13 supports) the
// runtime reads the direction from the pointers, host or device, so one call serves every pair.
// Blocking, as core::DeviceMemory promises: cudaMemcpy may return before a device-to-device copy
// (or the DMA of a pageable host-to-device one) has finished, and cudaMemset is asynchronous; a
// kernel queued next on a non-blocking stream would not wait for either. Synchronising the legacy
// stream they ran on makes "returned" mean "done".
void copy(void* dst, core::Device, const void* src, core::Device, size_t bytes) {
  LONGSEQ_CUDA_CALL(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  LONGSEQ_CUDA_CALL(cudaStreamSynchronize(nullptr));
}

void zero(core::Device device, void* p, size_t bytes) {
  LONGSEQ_CUDA_CALL(cudaSetDevice(device.index));
  LONGSEQ_CUDA_CALL(cudaMemset(p, 0, bytes));
  LONGSEQ_CUDA_CALL(cudaStreamSynchronize(nullptr));
}

}  // namespace

MemoryStats memory_stats(int index) {
  std::lock_guard<std::mutex> lk(accounting_mutex);
  if (index < 0 || index >= kMaxGpus) return {};
  return accounting[static_cast<size_t>(index)];
}

void reset_memory_peak(int index) {
  std::lock_guard<std::mutex> lk(accounting_mutex);
  if (index < 0 || index >= kMaxGpus) return;
  MemoryStats& m = accounting[static_cast<size_t>(index)];
  m.peak = m.current;
}

core::Device activate(int index) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    core::fail("cuda", "no GPU ", index, ": ", cudaGetErrorString(e));
  }
  core::require(index >= 0 && index < n, "cuda", "no GPU ", index, ": this machine shows ", n,
                " (indices 0..", n - 1, ")");
  LONGSEQ_CUDA_CALL(cudaSetDevice(index));
  core::DeviceMemory ops;
  ops.allocate = allocate;
  ops.release = release;
  ops.copy = copy;
  ops.zero = zero;
  core::register_device_memory(core::DeviceKind::cuda, ops);
  return core::Device::cuda(index);
}

void* stream_of(const core::Exec& exec, const char* kernel) {
  core::require(exec.device.kind == core::DeviceKind::cuda, "kernels", kernel,
                " is a CUDA kernel but was called with a ", exec.device.str(), " context");
  int current = -1;
  LONGSEQ_CUDA_CALL(cudaGetDevice(&current));
  core::require(current == exec.device.index, "kernels", kernel, " was called with a ",
                exec.device.str(), " context but cuda:", current,
                " is current on this thread (kernels::cuda::activate makes a GPU current)");
  return exec.stream;
}

Stream::Stream() {
  cudaStream_t s = nullptr;
  LONGSEQ_CUDA_CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}
Stream::~Stream() {
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}
void Stream::synchronize() const {
  LONGSEQ_CUDA_CALL(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

Event::Event() {
  cudaEvent_t e = nullptr;
  LONGSEQ_CUDA_CALL(cudaEventCreate(&e));
  event_ = e;
}
Event::~Event() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}
void Event::record(const Stream& s) {
  LONGSEQ_CUDA_CALL(
      cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(s.get())));
}
void Event::synchronize() const {
  LONGSEQ_CUDA_CALL(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
}
float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.0f;
  LONGSEQ_CUDA_CALL(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.event_),
                                         static_cast<cudaEvent_t>(end.event_)));
  return ms;
}

}  // namespace longseq::kernels::cuda
