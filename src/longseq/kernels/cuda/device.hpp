#pragma once
// The CUDA device layer under kernels/cuda/ (design.md §10, issue "GPU I"): what the runtime and
// driver report, RAII device memory, streams and events, and the one error path of every CUDA call.
// Built only where CMake found a CUDA toolkit (LONGSEQ_CUDA); nothing else in the tree includes it
// unless LONGSEQ_WITH_CUDA is defined.
//
// Errors: a failed CUDA call throws core::Error("[cuda] <call> failed: <cudaGetErrorString>
// (<code>) at file:line"); out of device memory names the tensor, its bytes and what the device
// had free. Never an abort: a user's oversized run must read as a message.
//
// Threads: a device buffer, Stream or Event belongs to the device that was current when it was
// made; using it from another thread is fine once that thread made the same device current
// (cudaSetDevice), as CUDA itself requires.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "longseq/core/device.hpp"

namespace longseq::kernels::cuda {

/// One visible GPU.
struct GpuInfo {
  int index = 0;
  std::string name;          ///< e.g. "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;  ///< compute capability
  size_t total_bytes = 0;    ///< device memory
  int multiprocessors = 0;
};

/// What the CUDA runtime and driver say about this machine. Never throws: without a driver or a
/// GPU, `gpus` is empty and `status` says why ("no CUDA-capable device is detected", ...).
struct RuntimeInfo {
  int runtime_version = 0;  ///< e.g. 13000 for CUDA 13.0 (cudaRuntimeGetVersion)
  int driver_version = 0;   ///< 0 when no driver is installed (cudaDriverGetVersion)
  std::vector<GpuInfo> gpus;
  std::string status;  ///< "ok", or the runtime's reason for seeing no GPU
  std::string archs;   ///< the GPU architectures this build carries code for, e.g. "80;90a"
};

RuntimeInfo runtime_info();

/// "13.0" from 13000.
std::string version_string(int cuda_version);

/// Throws core::Error for a failed call (see the header comment); `what` is the call as written.
void check(int status, const char* what, const char* file, int line);

#define LONGSEQ_CUDA_CALL(call) \
  ::longseq::kernels::cuda::check(static_cast<int>(call), #call, __FILE__, __LINE__)

/// Makes GPU `index` current on the calling thread and, on the first call, registers CUDA's
/// memory operations with core (core/device.hpp), so that core::Buffer<T>(n, device, name) owns
/// device memory from then on. Returns the device. Throws core::Error naming the index and what
/// the runtime sees when there is no such GPU.
///
/// Memory of a buffer on a device comes from the GPU's stream-ordered pool: cudaMallocAsync and
/// cudaFreeAsync on the legacy default stream, with the pool told to keep what it is given back,
/// so that once a training step has run, the next one's tensors reuse its blocks with no
/// cudaMalloc and no device-wide wait (a cudaFree waits for the whole GPU). Ordering, therefore:
/// a buffer is made and freed in the order of the legacy default stream, which the model's
/// kernels, the blocking copies and zeroing run on. Work on a non-blocking Stream that uses a
/// buffer must be finished (Stream::synchronize, or an event the legacy stream waits on) before
/// the buffer is destroyed, and a fresh buffer goes to a non-blocking stream only after a
/// blocking call (a copy into it, zeroing, or a synchronize): its block may be one that work
/// still queued on the legacy stream was reading. Environment LONGSEQ_CUDA_CACHING=0: plain
/// cudaMalloc / cudaFree instead (for compute-sanitizer, or to rule the pool out).
/// Out of memory: the pool's free blocks are given back to the device and the allocation is tried
/// once more; then core::Error names the tensor, its bytes and what the device had free.
/// Copies use cudaMemcpy with unified addressing (host <-> device, device <-> device). Copies and
/// zeroing run on the legacy default stream and are blocking (finished when the call returns), so
/// a kernel queued afterwards on any stream sees their result; work queued earlier on a
/// non-blocking Stream is not waited for: synchronise that stream before copying what it writes.
core::Device activate(int index);

/// Device memory on one GPU, in bytes. `current` / `peak`: what core::Buffer holds through
/// activate's allocator, now and the most at any moment since the process started or
/// reset_memory_peak (the trainer's measured peak, beside the planner's prediction); kernels' own
/// stream-ordered scratch (cudaMallocAsync: rmsnorm's and embedding's backward) and cuBLASLt's
/// workspace are not counted, being small against a model's tensors. `reserved` /
/// `reserved_peak`: what the pool has taken from the device (the held buffers, the kernels'
/// scratch, and freed blocks it keeps for reuse), now and at most: what cudaMemGetInfo sees
/// missing. Without the pool (LONGSEQ_CUDA_CACHING=0) reserved equals current.
struct MemoryStats {
  size_t current = 0;
  size_t peak = 0;
  size_t reserved = 0;
  size_t reserved_peak = 0;
};
MemoryStats memory_stats(int index);
/// Sets the peaks to the current holdings.
void reset_memory_peak(int index);
/// Whether core::Buffer's device memory comes from the stream-ordered pool (activate): true
/// unless the environment has LONGSEQ_CUDA_CACHING=0.
bool memory_caching();

/// The stream of a CUDA kernel's execution context (a cudaStream_t as an opaque pointer; null is
/// the legacy default stream). Every kernel under kernels/cuda/ calls it first, before it touches
/// a pointer: throws core::Error("[kernels] <kernel> is a CUDA kernel but was called with a cpu
/// context") for a CPU context (the mirror of core::Exec::cpu_threads), and names both devices
/// when the context's GPU is not the one current on the calling thread (activate makes it so).
void* stream_of(const core::Exec& exec, const char* kernel);

/// A CUDA stream (non-blocking with respect to the legacy default stream), destroyed with it.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  /// The cudaStream_t, as an opaque pointer (this header does not include CUDA's).
  void* get() const { return stream_; }
  /// Blocks until everything queued on the stream has run; throws on a failed kernel.
  void synchronize() const;

 private:
  void* stream_ = nullptr;
};

/// A CUDA event for ordering and timing.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& s);
  void synchronize() const;
  /// Milliseconds between two recorded and completed events.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  void* event_ = nullptr;
};

}  // namespace longseq::kernels::cuda
