#include "longseq/core/tensor.hpp"

#include <atomic>
#include <cstring>
#include <new>

namespace longseq::core {

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) push(d);
}

void Shape::push(int64_t d) {
  LONGSEQ_CHECK_MSG(rank_ < kMaxDims, "shape rank above ", kMaxDims);
  LONGSEQ_CHECK_MSG(d >= 0, "negative extent ", d);
  dims_[rank_++] = d;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

std::array<int64_t, kMaxDims> contiguous_strides(const Shape& s) {
  std::array<int64_t, kMaxDims> st{};
  int64_t acc = 1;
  for (int i = s.rank() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

namespace {
// cpu_device_memory_stats: one atomic each, so that ranks (threads) allocating at once count right.
std::atomic<size_t> cpu_device_current{0}, cpu_device_peak{0};

void count_cpu_device(size_t bytes) {
  const size_t now = cpu_device_current.fetch_add(bytes) + bytes;
  size_t peak = cpu_device_peak.load();
  while (now > peak && !cpu_device_peak.compare_exchange_weak(peak, now)) {
  }
}
}  // namespace

CpuDeviceMemoryStats cpu_device_memory_stats() {
  return {cpu_device_current.load(), cpu_device_peak.load()};
}

void reset_cpu_device_memory_peak() {
  cpu_device_peak.store(cpu_device_current.load());
}

namespace detail {
size_t counted_bytes(Device device, size_t bytes) {
  return device.is_cpu() ? (bytes ? bytes : kAlignment) : 0;
}

void* aligned_alloc_bytes(size_t bytes, bool zero) {
  // aligned_alloc needs a size that is a multiple of the alignment; zero-size gets one line so
  // data() is never null for an allocated buffer.
  const size_t rounded = ((bytes + kAlignment - 1) / kAlignment) * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded ? rounded : kAlignment);
  if (!p) fail("core", "out of memory allocating ", bytes, " bytes");
  if (zero) std::memset(p, 0, rounded ? rounded : kAlignment);
  return p;
}

void* alloc_bytes(Device device, size_t bytes, bool zero, const char* name) {
  if (device.is_cpu()) {
    void* p = aligned_alloc_bytes(bytes, zero);
    count_cpu_device(counted_bytes(device, bytes));
    return p;
  }
  const DeviceMemory& ops = device_memory(device);
  // As on the host, an empty buffer still owns a line so data() is never null.
  void* p = ops.allocate(device, bytes ? bytes : kAlignment, name);
  if (zero) ops.zero(device, p, bytes ? bytes : kAlignment);
  return p;
}

void BufferFree::operator()(void* p) const noexcept {
  if (!p) return;
  if (device.is_cpu()) {
    std::free(p);
    cpu_device_current.fetch_sub(counted);
    return;
  }
  // A buffer on a device exists only after its backend registered; the lookup cannot fail here.
  device_memory(device).release(device, p);
}
}  // namespace detail

}  // namespace longseq::core
