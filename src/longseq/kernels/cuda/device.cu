// The CUDA device layer (contracts in device.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string_view>
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

// Where core::Buffer's device memory comes from. Default: the device's stream-ordered pool
// (cudaMallocAsync / cudaFreeAsync on the legacy default stream, the stream the model's kernels and
// the blocking copies run on), which keeps freed blocks and hands them out again. A training step
// makes and drops a few hundred tensors; straight cudaMalloc / cudaFree would map and unmap device
// memory each time, and every cudaFree waits for the whole device, so the host could never queue
// work ahead of the GPU. LONGSEQ_CUDA_CACHING=0 goes back to cudaMalloc / cudaFree: for
// compute-sanitizer runs, and to tell a stream-ordering bug from a kernel bug.
bool caching() {
  static const bool on = [] {
    const char* e = std::getenv("LONGSEQ_CUDA_CACHING");
    return !(e != nullptr && std::string_view(e) == "0");
  }();
  return on;
}

cudaMemPool_t pool_of(int index) {
  cudaMemPool_t pool = nullptr;
  LONGSEQ_CUDA_CALL(cudaDeviceGetMemPool(&pool, index));
  return pool;
}

// The pool keeps what it was given back (by default it returns freed memory to the device at
// every synchronisation, and the next step maps it again). Set once per device, at activation;
// the kernels' own stream-ordered scratch (rmsnorm, embedding, gemm) comes from the same pool and
// gains the same.
void keep_pool_memory(int index) {
  uint64_t keep = UINT64_MAX;
  LONGSEQ_CUDA_CALL(
      cudaMemPoolSetAttribute(pool_of(index), cudaMemPoolAttrReleaseThreshold, &keep));
}

[[noreturn]] void out_of_memory(core::Device device, size_t bytes, const char* name) {
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  core::fail("cuda", "out of device memory for ", name, " on ", device.str(), ": ", bytes,
             " bytes requested, ", free_b, " of ", total_b, " bytes free");
}

void* allocate(core::Device device, size_t bytes, const char* name) {
  LONGSEQ_CUDA_CALL(cudaSetDevice(device.index));
  void* p = nullptr;
  if (!caching()) {
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      out_of_memory(device, bytes, name);
    }
    check(e, "cudaMalloc", __FILE__, __LINE__);
  } else {
    cudaError_t e = cudaMallocAsync(&p, bytes, nullptr);
    if (e == cudaErrorMemoryAllocation) {
      // The pool may hold free blocks of other sizes that together would fit: wait until every
      // queued free has happened, give all of them back to the device, and ask once more.
      cudaGetLastError();
      LONGSEQ_CUDA_CALL(cudaDeviceSynchronize());
      LONGSEQ_CUDA_CALL(cudaMemPoolTrimTo(pool_of(device.index), 0));
      e = cudaMallocAsync(&p, bytes, nullptr);
      if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        out_of_memory(device, bytes, name);
      }
    }
    check(e, "cudaMallocAsync", __FILE__, __LINE__);
  }
  count_allocation(device.index, p, bytes);
  return p;
}

// Not checked: a destructor must not throw. The free is queued on the legacy default stream of
// the buffer's own device (made current for the call, then the caller's device restored), so the
// block is reused only after the work queued there before it.
void release(core::Device device, void* p) noexcept {
  count_release(p);
  if (!caching()) {
    cudaFree(p);
    return;
  }
  int current = -1;
  cudaGetDevice(&current);
  if (current != device.index) cudaSetDevice(device.index);
  cudaFreeAsync(p, nullptr);
  if (current != device.index && current >= 0) cudaSetDevice(current);
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

// Whether `p` is GPU memory, for core::locate (comm's local backend asks once per message, so
// the device-to-device copy of a message between GPU buffers goes through `copy` above).
// Managed memory counts as the device's: the host could read it, but a copy through the runtime
// is what keeps it on the GPU. Host memory, pageable (cudaMemoryTypeUnregistered) or pinned
// (cudaMemoryTypeHost), is the host's. Older runtimes failed the call on pointers they never
// allocated; the error is cleared so the next checked call does not report it.
bool owner(const void* p, core::Device* device) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) return false;
  *device = core::Device::cuda(attr.device);
  return true;
}

}  // namespace

MemoryStats memory_stats(int index) {
  MemoryStats m;
  {
    std::lock_guard<std::mutex> lk(accounting_mutex);
    if (index < 0 || index >= kMaxGpus) return {};
    m = accounting[static_cast<size_t>(index)];
  }
  if (caching()) {
    uint64_t now = 0, high = 0;
    const cudaMemPool_t pool = pool_of(index);
    LONGSEQ_CUDA_CALL(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &now));
    LONGSEQ_CUDA_CALL(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high));
    m.reserved = static_cast<size_t>(now);
    m.reserved_peak = static_cast<size_t>(high);
  } else {
    m.reserved = m.current;
    m.reserved_peak = m.peak;
  }
  return m;
}

void reset_memory_peak(int index) {
  {
    std::lock_guard<std::mutex> lk(accounting_mutex);
    if (index < 0 || index >= kMaxGpus) return;
    MemoryStats& m = accounting[static_cast<size_t>(index)];
    m.peak = m.current;
  }
  // Writing 0 to a pool's high-water mark resets it to what the pool holds now.
  if (caching()) {
    uint64_t zero = 0;
    LONGSEQ_CUDA_CALL(
        cudaMemPoolSetAttribute(pool_of(index), cudaMemPoolAttrReservedMemHigh, &zero));
  }
}

bool memory_caching() {
  return caching();
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
  if (caching()) keep_pool_memory(index);
  core::DeviceMemory ops;
  ops.allocate = allocate;
  ops.release = release;
  ops.copy = copy;
  ops.zero = zero;
  ops.owner = owner;
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
