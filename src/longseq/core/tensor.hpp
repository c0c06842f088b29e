#pragma once
// Shapes, non-owning strided views and owning aligned buffers.
//
// Legend: a view is (data pointer, shape, strides in elements). Row-major contiguous is the norm
// (design.md §2: a rank holds tokens as [T, H, D]); strides exist so a kernel can be handed a
// head slice or a token range without a copy. Views never own memory and are cheap to copy.
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/error.hpp"

namespace longseq::core {

inline constexpr int kMaxDims = 6;

/// Up to kMaxDims extents. Shape{} is a scalar (numel 1).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  template <class It>
  Shape(It begin, It end) {
    for (auto it = begin; it != end; ++it) push(static_cast<int64_t>(*it));
  }

  int rank() const { return rank_; }
  int64_t operator[](int i) const {
    LONGSEQ_CHECK_MSG(i >= 0 && i < rank_, "dim ", i, " of rank-", rank_, " shape");
    return dims_[i];
  }
  int64_t numel() const;
  void push(int64_t d);
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  /// "[4, 8, 128]"
  std::string str() const;

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

/// Row-major strides (in elements) of `s`.
std::array<int64_t, kMaxDims> contiguous_strides(const Shape& s);

/// Non-owning, strided view of T. Thread safety: as safe as the memory it points to.
template <class T>
class View {
 public:
  View() = default;
  View(T* data, Shape shape) : data_(data), shape_(shape), strides_(contiguous_strides(shape)) {}
  View(T* data, Shape shape, std::array<int64_t, kMaxDims> strides)
      : data_(data), shape_(shape), strides_(strides) {}
  /// A View<T> converts to a View<const T>.
  template <class U = T, class = std::enable_if_t<std::is_const_v<U>>>
  View(const View<std::remove_const_t<U>>& o)
      : data_(o.data()), shape_(o.shape()), strides_(o.strides()) {}

  T* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  const std::array<int64_t, kMaxDims>& strides() const { return strides_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t stride(int i) const { return strides_[i]; }
  int64_t numel() const { return shape_.numel(); }
  bool empty() const { return numel() == 0; }
  bool is_contiguous() const { return strides_ == contiguous_strides(shape_); }

  template <class... I>
  T& operator()(I... idx) const {
    static_assert(sizeof...(I) <= kMaxDims);
    LONGSEQ_CHECK_MSG(static_cast<int>(sizeof...(I)) == rank(), "indexing rank-", rank(),
                      " view with ", sizeof...(I), " indices");
    int64_t off = 0;
    int d = 0;
    ((off += static_cast<int64_t>(idx) * strides_[d++]), ...);
    return data_[off];
  }

  /// Elements [begin, end) along dimension `d`; same rank.
  View slice(int d, int64_t begin, int64_t end) const {
    LONGSEQ_CHECK_MSG(d >= 0 && d < rank() && begin >= 0 && begin <= end && end <= dim(d),
                      "slice dim ", d, " [", begin, ", ", end, ") of ", shape_.str());
    Shape s;
    for (int i = 0; i < rank(); ++i) s.push(i == d ? end - begin : dim(i));
    return View(data_ + begin * strides_[d], s, strides_);
  }

 private:
  T* data_ = nullptr;
  Shape shape_;
  std::array<int64_t, kMaxDims> strides_{};
};

namespace detail {
/// zero = false leaves the bytes as the allocator returned them.
void* aligned_alloc_bytes(size_t bytes, bool zero = true);
/// Host memory as aligned_alloc_bytes; elsewhere the device's registered allocator (device.hpp),
/// whose out-of-memory error names `name`. Host memory asked for this way (an explicit
/// Device::cpu()) is counted in cpu_device_memory_stats.
void* alloc_bytes(Device device, size_t bytes, bool zero, const char* name);
/// The bytes alloc_bytes counts for `bytes` on `device`: what the device's allocator is asked for
/// (an empty buffer still owns kAlignment bytes); 0 off the CPU, whose backend counts its own.
size_t counted_bytes(Device device, size_t bytes);
/// Frees what alloc_bytes returned on `device`; `counted` bytes leave cpu_device_memory_stats.
struct BufferFree {
  Device device;
  size_t counted = 0;
  void operator()(void* p) const noexcept;
};
}  // namespace detail

/// Bytes held by buffers made with an explicit device that is the CPU (Buffer(n, device, ...),
/// Tensor(shape, device, ...), Buffer::to): now, and the most at any moment since the process
/// started or reset_cpu_device_memory_peak. The host's counterpart of kernels::cuda::memory_stats:
/// the device path (model/kernels.hpp) run with the CPU as its device allocates exactly what it
/// allocates on a GPU through these constructors, so this count checks the planner's GPU memory
/// model (plan/memory.hpp device_trainer_memory) on a machine without a GPU. Host-only buffers
/// (Buffer(n), Tensor(shape): every CPU kernel's and the CPU attention's own) are not counted.
/// Thread-safe.
struct CpuDeviceMemoryStats {
  size_t current = 0;
  size_t peak = 0;
};
CpuDeviceMemoryStats cpu_device_memory_stats();
/// Sets the peak to the current holding.
void reset_cpu_device_memory_peak();

inline constexpr size_t kAlignment = 64;

/// Tag: allocate without zeroing, for a buffer the caller overwrites whole right away. A big
/// buffer's pages are then first touched by the (multi-threaded) kernel that writes it instead
/// of by one thread's memset (at world 1, L = 32K, the zeroing passes took ~1 s of a step).
struct Uninit {};

/// Owning, 64-byte aligned (on the host), zero-initialised array of trivially copyable T on one
/// device. Host buffers are what every CPU path uses; a buffer on a GPU hands out its device
/// pointer through data() and is read or written from the host only through copies (copy_from,
/// to): element access and iteration are for host buffers (checked by begin/end; operator[] is
/// on the hot path and checked only in debug builds).
template <class T>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  Buffer() = default;
  explicit Buffer(size_t n)
      : ptr_(static_cast<T*>(detail::aligned_alloc_bytes(n * sizeof(T))), detail::BufferFree{}),
        size_(n) {}
  /// Contents indeterminate (see Uninit).
  Buffer(size_t n, Uninit)
      : ptr_(static_cast<T*>(detail::aligned_alloc_bytes(n * sizeof(T), false)),
             detail::BufferFree{}),
        size_(n) {}
  /// `n` zeroed elements on `device`; `name` labels the tensor in an out-of-memory error.
  Buffer(size_t n, Device device, const char* name = "buffer")
      : ptr_(static_cast<T*>(detail::alloc_bytes(device, n * sizeof(T), true, name)),
             detail::BufferFree{device, detail::counted_bytes(device, n * sizeof(T))}),
        size_(n) {}
  /// `n` elements on `device`, contents indeterminate (see Uninit).
  Buffer(size_t n, Device device, Uninit, const char* name = "buffer")
      : ptr_(static_cast<T*>(detail::alloc_bytes(device, n * sizeof(T), false, name)),
             detail::BufferFree{device, detail::counted_bytes(device, n * sizeof(T))}),
        size_(n) {}

  T* data() { return ptr_.get(); }
  const T* data() const { return ptr_.get(); }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  Device device() const { return ptr_.get_deleter().device; }
  T& operator[](size_t i) {
    assert(device().is_cpu());
    return ptr_.get()[i];
  }
  const T& operator[](size_t i) const {
    assert(device().is_cpu());
    return ptr_.get()[i];
  }
  T* begin() { return host_data(); }
  T* end() { return host_data() + size_; }
  const T* begin() const { return host_data(); }
  const T* end() const { return host_data() + size_; }

  /// Copies all of `src` (same size, any device) into this buffer; blocking.
  void copy_from(const Buffer& src) {
    LONGSEQ_CHECK_MSG(src.size_ == size_, "copy of ", src.size_, " elements into ", size_);
    copy_bytes(data(), device(), src.data(), src.device(), bytes());
  }
  /// A copy of this buffer on `device`; blocking.
  Buffer to(Device device, const char* name = "buffer") const {
    Buffer out(size_, device, Uninit{}, name);
    out.copy_from(*this);
    return out;
  }

 private:
  T* host_data() const {
    LONGSEQ_CHECK_MSG(device().is_cpu(), "host access to a buffer on ", device().str());
    return ptr_.get();
  }
  std::unique_ptr<T, detail::BufferFree> ptr_{nullptr, detail::BufferFree{}};
  size_t size_ = 0;
};

/// An owning contiguous tensor: a Buffer plus its Shape. Used by tests, the CLI and I/O.
template <class T>
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape) : shape_(shape), buf_(static_cast<size_t>(shape.numel())) {}
  /// Contents indeterminate: for a tensor the caller overwrites whole right away (see Uninit).
  Tensor(Shape shape, Uninit u) : shape_(shape), buf_(static_cast<size_t>(shape.numel()), u) {}
  /// Zeroed, on `device` (`name` labels it in an out-of-memory error). A tensor on a GPU hands
  /// out its device pointer through data() and view(); element access and iteration are for host
  /// tensors (checked, see Buffer).
  Tensor(Shape shape, Device device, const char* name)
      : shape_(shape), buf_(static_cast<size_t>(shape.numel()), device, name) {}
  /// On `device`, contents indeterminate (see Uninit).
  Tensor(Shape shape, Device device, Uninit u, const char* name)
      : shape_(shape), buf_(static_cast<size_t>(shape.numel()), device, u, name) {}
  const Shape& shape() const { return shape_; }
  Device device() const { return buf_.device(); }
  int64_t numel() const { return shape_.numel(); }
  int64_t dim(int i) const { return shape_[i]; }
  T* data() { return buf_.data(); }
  const T* data() const { return buf_.data(); }
  T& operator[](size_t i) { return buf_[i]; }
  const T& operator[](size_t i) const { return buf_[i]; }
  View<T> view() { return View<T>(data(), shape_); }
  View<const T> view() const { return View<const T>(data(), shape_); }
  T* begin() { return buf_.begin(); }
  T* end() { return buf_.end(); }
  const T* begin() const { return buf_.begin(); }
  const T* end() const { return buf_.end(); }

 private:
  Shape shape_;
  Buffer<T> buf_;
};

}  // namespace longseq::core
