#include "longseq/core/device.hpp"

#include <array>
#include <atomic>
#include <charconv>
#include <cstring>
#include <mutex>

#include "longseq/core/error.hpp"

namespace longseq::core {

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  return cat("cuda:", index);
}

Device Device::parse(std::string_view text, std::string_view component) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  constexpr std::string_view prefix = "cuda:";
  if (text.substr(0, prefix.size()) == prefix) {
    const std::string_view digits = text.substr(prefix.size());
    int index = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && index >= 0)
      return cuda(index);
  }
  fail(component, "device '", text, "': expected cpu, cuda or cuda:N (N >= 0)");
}

int Exec::cpu_threads(std::string_view kernel) const {
  require(device.is_cpu(), "kernels", kernel, " is a CPU kernel but was called with a ",
          device.str(), " context");
  return threads > 0 ? threads : 1;
}

namespace {
// One slot per non-host kind. Registration happens once per backend, long before the hot path,
// but a lookup may race with it from another thread: the mutex keeps the table whole.
std::mutex registry_mutex;
std::array<DeviceMemory, 2> registry{};

// locate() runs once per message of comm's local backend, so it takes no lock: the `owner`
// functions are copied out of the table into atomics, and a flag says whether any was ever
// registered. A CPU-only process (none registered) pays the flag's relaxed load and nothing else.
using OwnerFn = bool (*)(const void*, Device*);
std::array<std::atomic<OwnerFn>, 2> owners{};
std::atomic<bool> any_owner{false};
}  // namespace

void register_device_memory(DeviceKind kind, const DeviceMemory& ops) {
  LONGSEQ_CHECK_MSG(kind != DeviceKind::cpu, "host memory is core's own");
  LONGSEQ_CHECK_MSG(ops.allocate && ops.release && ops.copy && ops.zero,
                    "incomplete DeviceMemory table");
  std::lock_guard lock(registry_mutex);
  registry[static_cast<size_t>(kind)] = ops;
  owners[static_cast<size_t>(kind)].store(ops.owner, std::memory_order_release);
  if (ops.owner) any_owner.store(true, std::memory_order_release);
}

const DeviceMemory& device_memory(Device device) {
  LONGSEQ_CHECK_MSG(!device.is_cpu(), "host memory has no registered table");
  std::lock_guard lock(registry_mutex);
  const DeviceMemory& ops = registry[static_cast<size_t>(device.kind)];
  require(ops.allocate != nullptr, "core", "no memory backend for ", device.str(),
          ": this build has no CUDA backend (configure with -DLONGSEQ_CUDA=ON) or the program "
          "did not activate it (kernels::cuda::activate)");
  return ops;
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const Device gpu = dst_device.is_cpu() ? src_device : dst_device;
  device_memory(gpu).copy(dst, dst_device, src, src_device, bytes);
}

Device locate(const void* ptr) {
  if (!any_owner.load(std::memory_order_relaxed)) return Device::cpu();
  for (size_t kind = 1; kind < owners.size(); ++kind) {
    const OwnerFn owner = owners[kind].load(std::memory_order_acquire);
    Device device;
    if (owner && owner(ptr, &device)) return device;
  }
  return Device::cpu();
}

void copy_any(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const Device dst_device = locate(dst), src_device = locate(src);
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, bytes);
    return;
  }
  copy_bytes(dst, dst_device, src, src_device, bytes);
}

void zero_bytes(Device device, void* ptr, size_t bytes) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    std::memset(ptr, 0, bytes);
    return;
  }
  device_memory(device).zero(device, ptr, bytes);
}

}  // namespace longseq::core
