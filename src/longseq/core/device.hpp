#pragma once
// Where memory lives and where a kernel runs (design.md §10): `Device` names a processor, `Exec`
// is the one execution-context parameter every kernel takes (threads on a CPU, a stream on a
// GPU), and `DeviceMemory` is what a device backend supplies so that core::Buffer can own memory
// on its devices without core knowing any GPU API.
//
// Why a registry and not an #ifdef: core sits below kernels (design.md §1), and kernels/cuda is a
// separate library that exists only in CUDA builds. The CUDA backend registers its allocator when
// it is activated (kernels::cuda::activate); a CPU-only build, or a program that never activated
// it, gets an error naming the device instead of an allocation on the wrong side of the bus.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace longseq::core {

enum class DeviceKind : uint8_t { cpu, cuda };

/// A processor that owns memory and runs kernels: the host CPU, or GPU `index`.
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {DeviceKind::cuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  // Written out, not defaulted: kernels/cuda includes this header as C++17 (nvcc, design.md §10).
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  /// "cpu", "cuda:0".
  std::string str() const;
  /// Parses "cpu", "cuda" (= "cuda:0") or "cuda:N"; anything else throws core::Error naming
  /// `component` and the text.
  static Device parse(std::string_view text, std::string_view component = "device");
};

/// The execution context of a kernel call. On a CPU: at most `threads` OpenMP threads (<= 0 means
/// 1); on a GPU: the stream the work is queued on (a cudaStream_t, opaque here; null is the
/// legacy default stream). A kernel refuses a context for a device it does not run on.
struct Exec {
  Device device;
  int threads = 1;
  void* stream = nullptr;

  Exec() = default;
  /// A CPU context of `threads` threads. Implicit on purpose: until the execution context
  /// existed, the CPU kernels took their thread budget as an int, and a call site that passes a
  /// count still means exactly this.
  Exec(int threads) : threads(threads) {}  // NOLINT(google-explicit-constructor)
  static Exec cpu(int threads) { return Exec(threads); }
  static Exec gpu(Device device, void* stream) {
    Exec e;
    e.device = device;
    e.stream = stream;
    return e;
  }
  /// The CPU thread budget (>= 1). Throws core::Error naming `kernel` when the context is not a
  /// CPU's: a CPU kernel handed a GPU context would read device pointers on the host.
  int cpu_threads(std::string_view kernel) const;
};

/// Memory operations of one device kind, supplied by its backend. All calls are blocking.
struct DeviceMemory {
  /// Returns `bytes` (> 0) of memory on `device`; throws core::Error naming `name` and the sizes
  /// when it cannot.
  void* (*allocate)(Device device, size_t bytes, const char* name) = nullptr;
  void (*release)(Device device, void* ptr) noexcept = nullptr;
  /// Copies `bytes` between any two devices, either of which may be the host.
  void (*copy)(void* dst, Device dst_device, const void* src, Device src_device,
               size_t bytes) = nullptr;
  void (*zero)(Device device, void* ptr, size_t bytes) = nullptr;
  /// Whether `ptr` is memory of a device of this kind (then *device names it); false for host
  /// memory, pageable or pinned. Optional: a kind without it is never found by locate().
  bool (*owner)(const void* ptr, Device* device) = nullptr;
};

/// Installs the memory operations of `kind` (not cpu: the host's are core's own). Idempotent for
/// the same table; called by the backend's activation, before its first buffer.
void register_device_memory(DeviceKind kind, const DeviceMemory& ops);

/// The memory operations of `device`'s kind; throws core::Error naming the device when no backend
/// registered them (a build without that backend, or a program that never activated it).
const DeviceMemory& device_memory(Device device);

/// Blocking copy of `bytes` from `src` on `src_device` to `dst` on `dst_device`; host to host is a
/// memcpy, anything else goes through the device's registered operations.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
/// Blocking zeroing of `bytes` at `ptr` on `device` (host: memset).
void zero_bytes(Device device, void* ptr, size_t bytes);

/// The device whose memory `ptr` is: the first registered backend whose `owner` claims it, else
/// Device::cpu() (host memory, or no backend registered). A process that never registered an
/// `owner` pays one relaxed atomic load (comm's local backend asks once per message).
Device locate(const void* ptr);

/// Blocking copy of `bytes` from `src` to `dst`, each host or device memory as locate() finds
/// it: host to host is a memmove (the ranges may overlap), anything else copy_bytes with the
/// located devices. For callers handed bare pointers (comm's buffers), which cannot say where
/// they point.
void copy_any(void* dst, const void* src, size_t bytes);

}  // namespace longseq::core
