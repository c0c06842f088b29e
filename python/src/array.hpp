#pragma once
// Tensors in from Python by DLPack (design.md §11): any object with __dlpack__ (torch tensors,
// numpy arrays, ...) is read where it lies, never copied. Outputs are the caller's tensors too
// (longseq/*.py allocates them with the caller's framework), written in place.
//
// The capsule is held for the whole call, so the producer keeps the memory alive; its destructor
// (the producer's) calls the DLPack deleter, since the capsule is never renamed "used_dltensor".
//
// Errors: a Python TypeError for an object without __dlpack__ or of another dtype, a ValueError
// naming the argument and the values for anything else that does not fit (shape, device,
// strides, alignment): nothing a caller passes reaches the engine unchecked.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/tensor.hpp"

namespace longseq::python {

namespace py = pybind11;

/// Raises ValueError / TypeError with the concatenation of `parts`.
template <class... A>
[[noreturn]] void value_error(const A&... parts) {
  throw py::value_error(core::cat(parts...));
}
template <class... A>
[[noreturn]] void type_error(const A&... parts) {
  throw py::type_error(core::cat(parts...));
}

/// One argument's tensor as the engine sees it.
struct Array {
  std::string name;  ///< the argument's name, for messages
  py::object capsule;
  void* data = nullptr;
  core::DType dtype = core::DType::f32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  ///< elements
  core::Device device;

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * core::dtype_size(dtype); }
  bool contiguous() const;
  /// "[2, 3]".
  std::string shape_str() const;
  core::Shape core_shape() const;
  template <class T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  template <class T>
  core::View<T> view() const {
    return core::View<T>(static_cast<T*>(data), core_shape());
  }

  /// ValueError unless contiguous (row-major).
  const Array& need_contiguous(const char* fn) const;
  /// TypeError unless the dtype is one of `allowed`.
  const Array& need_dtype(const char* fn, std::initializer_list<core::DType> allowed) const;
  /// ValueError unless the rank is `r`.
  const Array& need_rank(const char* fn, int r) const;
  /// ValueError unless the shape is `s`.
  const Array& need_shape(const char* fn, const std::vector<int64_t>& s) const;
  /// ValueError unless in host memory (what the host-only entry points read or write).
  const Array& need_host(const char* fn) const;
};

/// A dtype as torch and numpy name it (float32, bfloat16, int64, bool, ...): the words a Python
/// caller's errors use, where the engine's own say f32 or bf16.
const char* dtype_str(core::DType t);

/// The stream a consumer names to __dlpack__ on a GPU (the DLPack stream rule): the producer
/// makes the tensor's data ready on it. nullopt on the CPU.
using Stream = std::optional<intptr_t>;

/// Reads `obj` through __dlpack_device__ and __dlpack__(stream=...). Integer tensors come as i32
/// or i64, bool and uint8 as u8/boolean; any other dtype than f32, bf16, f64, i32, i64, u8 and
/// bool is a TypeError naming it. Errors name `fn` (the Python function) and `name` (the
/// argument).
Array from_python(const char* fn, py::handle obj, const std::string& name,
                  Stream stream = std::nullopt);

/// The device of `obj` from __dlpack_device__ without exporting it.
core::Device device_of(const char* fn, py::handle obj, const std::string& name);

/// ValueError unless every array is on `device`; names both arguments.
void same_device(const char* fn, const std::vector<const Array*>& arrays);
/// TypeError unless every array has the dtype of the first.
void same_dtype(const char* fn, const std::vector<const Array*>& arrays);
/// ValueError when an output's bytes overlap another output's or an input's (it would be read
/// after being written, or written twice). Inputs may share memory with each other (q, k and v
/// can be one tensor).
void no_overlap(const char* fn, const std::vector<const Array*>& outputs,
                const std::vector<const Array*>& inputs);

}  // namespace longseq::python
