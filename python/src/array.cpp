#include "array.hpp"

#include <dlpack/dlpack.h>

#include <algorithm>
#include <limits>
#include <sstream>

namespace longseq::python {

namespace {

// DLPack's bool code (kDLBool, DLPack 0.8); 0.6's header predates it, producers may send it.
constexpr uint8_t kDLBoolCode = 6;

std::string type_name(py::handle obj) {
  return py::str(py::type::of(obj).attr("__name__")).cast<std::string>();
}

core::DType dtype_of(const DLDataType& t, const char* fn, const std::string& name) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return core::DType::f32;
    if (t.code == kDLFloat && t.bits == 64) return core::DType::f64;
    if (t.code == kDLBfloat && t.bits == 16) return core::DType::bf16;
    if (t.code == kDLInt && t.bits == 32) return core::DType::i32;
    if (t.code == kDLInt && t.bits == 64) return core::DType::i64;
    if (t.code == kDLUInt && t.bits == 8) return core::DType::u8;
    if (t.code == kDLBoolCode && t.bits == 8) return core::DType::boolean;
  }
  static const char* codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  // Which of longseq's dtypes `fn` takes is its own check's to say (Array::need_dtype); this
  // one is none of them.
  type_error(fn, ": ", name, " has dtype ", t.code < 7 ? codes[t.code] : "code?",
             static_cast<int>(t.bits), t.lanes == 1 ? "" : core::cat(" x", t.lanes),
             ", which longseq takes nowhere (its tensors are float32, bfloat16, float64, int32, "
             "int64, uint8 or bool; attention takes float32 and bfloat16)");
}

}  // namespace

const char* dtype_str(core::DType t) {
  switch (t) {
    case core::DType::f32:
      return "float32";
    case core::DType::bf16:
      return "bfloat16";
    case core::DType::f64:
      return "float64";
    case core::DType::i32:
      return "int32";
    case core::DType::i64:
      return "int64";
    case core::DType::u8:
      return "uint8";
    case core::DType::boolean:
      return "bool";
  }
  LONGSEQ_CHECK_MSG(false, "unknown dtype ", static_cast<int>(t));
}

namespace {

core::Device device_from(int type, int id, const char* fn, const std::string& name) {
  if (type == kDLCPU || type == kDLCUDAHost) return core::Device::cpu();
  if (type == kDLCUDA || type == kDLCUDAManaged) return core::Device::cuda(id);
  value_error(fn, ": ", name, " lives on a DLPack device of type ", type,
              ": longseq takes CPU and CUDA tensors");
}

}  // namespace

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

bool Array::contiguous() const {
  int64_t expect = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    // A dimension of extent 1 may carry any stride: it is never stepped over.
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

std::string Array::shape_str() const {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < rank(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

core::Shape Array::core_shape() const {
  return core::Shape(shape.begin(), shape.end());
}

const Array& Array::need_host(const char* fn) const {
  if (!device.is_cpu())
    value_error(fn, ": ", name, " must be in host memory, not on ", device.str());
  return *this;
}

const Array& Array::need_contiguous(const char* fn) const {
  if (!contiguous()) {
    std::ostringstream st;
    for (int i = 0; i < rank(); ++i) st << (i ? ", " : "") << strides[i];
    value_error(fn, ": ", name, " ", shape_str(), " is not contiguous (strides [", st.str(),
                "] elements); longseq reads tensors where they lie, never copies them: pass ", name,
                ".contiguous()");
  }
  return *this;
}

const Array& Array::need_dtype(const char* fn, std::initializer_list<core::DType> allowed) const {
  if (std::find(allowed.begin(), allowed.end(), dtype) != allowed.end()) return *this;
  std::string names;
  for (core::DType d : allowed) names += (names.empty() ? "" : " or ") + std::string(dtype_str(d));
  type_error(fn, ": ", name, " has dtype ", dtype_str(dtype), ", expected ", names);
}

const Array& Array::need_rank(const char* fn, int r) const {
  if (rank() != r)
    value_error(fn, ": ", name, " has shape ", shape_str(), ", expected ", r, " dims");
  return *this;
}

const Array& Array::need_shape(const char* fn, const std::vector<int64_t>& s) const {
  if (shape != s) {
    Array want;
    want.shape = s;
    value_error(fn, ": ", name, " has shape ", shape_str(), ", expected ", want.shape_str());
  }
  return *this;
}

core::Device device_of(const char* fn, py::handle obj, const std::string& name) {
  if (!py::hasattr(obj, "__dlpack_device__"))
    type_error(fn, ": ", name, " is a ", type_name(obj),
               ", not a tensor (longseq takes objects with __dlpack__: torch tensors, numpy "
               "arrays)");
  py::tuple dev;
  try {
    dev = obj.attr("__dlpack_device__")();
  } catch (py::error_already_set& e) {  // torch's meta tensors: "Unknown device type meta"
    value_error(fn, ": ", name,
                ": its __dlpack_device__ failed: ", py::str(e.value()).cast<std::string>());
  }
  return device_from(dev[0].cast<int>(), dev[1].cast<int>(), fn, name);
}

namespace {

// torch's public to_dlpack (torch.utils.dlpack.to_dlpack) when obj is a plain torch.Tensor on the
// CPU that does not require grad, else None. Such a tensor's __dlpack_device__ and __dlpack__ are
// Python methods (an import and an enum per call in torch 1.13), a good part of a small attention
// call's overhead at five tensors a call; to_dlpack is the C function they end in, and the capsule
// carries the device. Tensors that require grad take the general path, where __dlpack__ refuses
// them in torch's words; CUDA tensors too, for the stream rule. torch is looked up, never
// imported: numpy users need none.
py::handle torch_cpu_exporter(py::handle obj) {
  static PyObject* tensor_type = nullptr;
  static PyObject* to_dlpack = nullptr;
  static bool unavailable = false;
  if (tensor_type == nullptr && !unavailable) {
    static PyObject* const name = PyUnicode_InternFromString("torch");  // once, not per call
    PyObject* torch = PyImport_GetModule(name);
    if (torch == nullptr) {
      PyErr_Clear();
      return py::none();  // not imported (yet): so obj is no torch tensor
    }
    try {
      const py::object mod = py::reinterpret_steal<py::object>(torch);
      py::object type = mod.attr("Tensor");
      py::object fn = mod.attr("utils").attr("dlpack").attr("to_dlpack");
      // Held for the life of the process (no release at interpreter exit).
      tensor_type = type.release().ptr();
      to_dlpack = fn.release().ptr();
    } catch (py::error_already_set&) {
      unavailable = true;  // a torch without them: every tensor takes the general path
    }
  }
  if (tensor_type == nullptr || Py_TYPE(obj.ptr()) != reinterpret_cast<PyTypeObject*>(tensor_type))
    return py::none();
  if (!obj.attr("is_cpu").cast<bool>() || obj.attr("requires_grad").cast<bool>()) return py::none();
  return to_dlpack;
}

}  // namespace

Array from_python(const char* fn, py::handle obj, const std::string& name, Stream stream) {
  Array a;
  a.name = name;
  const py::handle to_dlpack = torch_cpu_exporter(obj);
  const bool from_torch = !to_dlpack.is_none();  // then the device is read from the capsule
  if (!from_torch) {
    a.device = device_of(fn, obj, name);
    if (!py::hasattr(obj, "__dlpack__"))
      type_error(fn, ": ", name, " is a ", type_name(obj), " without __dlpack__");
  }
  try {
    // The DLPack stream rule: on a GPU the consumer names its stream and the producer makes the
    // data ready there; on the CPU no stream is passed (numpy's __dlpack__ takes none but None).
    a.capsule = from_torch ? to_dlpack(obj)
                : a.device.is_cpu() || !stream
                    ? obj.attr("__dlpack__")()
                    : obj.attr("__dlpack__")(py::arg("stream") = *stream);
  } catch (py::error_already_set& e) {
    // torch refuses tensors that require grad and dtypes DLPack lacks (bool in 1.13), numpy
    // read-only arrays: say which argument, whichever way the export went.
    value_error(fn, ": ", name,
                ": its __dlpack__ failed: ", py::str(e.value()).cast<std::string>());
  }
  if (!PyCapsule_IsValid(a.capsule.ptr(), "dltensor"))
    type_error(fn, ": ", name, ": __dlpack__ returned no unused 'dltensor' capsule");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(a.capsule.ptr(), "dltensor"));
  const DLTensor& t = m->dl_tensor;
  if (from_torch) a.device = device_from(t.device.device_type, t.device.device_id, fn, name);
  a.dtype = dtype_of(t.dtype, fn, name);
  if (t.ndim < 0 || t.ndim > core::kMaxDims)
    value_error(fn, ": ", name, " has ", t.ndim, " dims; longseq takes at most ", core::kMaxDims);
  a.shape.assign(t.shape, t.shape + t.ndim);
  for (int64_t s : a.shape)
    if (s < 0) value_error(fn, ": ", name, " has a negative extent ", s);
  if (t.strides != nullptr) {
    a.strides.assign(t.strides, t.strides + t.ndim);
  } else {  // NULL strides: compact row-major (DLPack before 0.8)
    a.strides.assign(t.ndim, 1);
    for (int i = t.ndim - 2; i >= 0; --i) a.strides[i] = a.strides[i + 1] * a.shape[i + 1];
  }
  a.data = static_cast<char*>(t.data) + t.byte_offset;
  const size_t es = core::dtype_size(a.dtype);
  if (reinterpret_cast<uintptr_t>(a.data) % es != 0)
    value_error(fn, ": ", name, " starts at an address that is no multiple of its ", es,
                "-byte elements: pass a copy");
  // Element counts beyond 2^62 would overflow the byte arithmetic below.
  int64_t n = 1;
  for (int64_t s : a.shape) {
    if (s != 0 && n > std::numeric_limits<int64_t>::max() / 8 / s)
      value_error(fn, ": ", name, " ", a.shape_str(), " has too many elements");
    n *= s;
  }
  return a;
}

void same_device(const char* fn, const std::vector<const Array*>& arrays) {
  for (const Array* a : arrays)
    if (a->device != arrays.front()->device)
      value_error(fn, ": ", a->name, " is on ", a->device.str(), " but ", arrays.front()->name,
                  " is on ", arrays.front()->device.str());
}

void same_dtype(const char* fn, const std::vector<const Array*>& arrays) {
  for (const Array* a : arrays)
    if (a->dtype != arrays.front()->dtype)
      type_error(fn, ": ", a->name, " has dtype ", dtype_str(a->dtype), " but ",
                 arrays.front()->name, " has ", dtype_str(arrays.front()->dtype));
}

namespace {

bool overlap(const Array& a, const Array& b) {
  if (a.bytes() == 0 || b.bytes() == 0 || a.device != b.device) return false;
  const auto a0 = reinterpret_cast<uintptr_t>(a.data), b0 = reinterpret_cast<uintptr_t>(b.data);
  return a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
}

}  // namespace

void no_overlap(const char* fn, const std::vector<const Array*>& outputs,
                const std::vector<const Array*>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (overlap(*outputs[i], *outputs[j]))
        value_error(fn, ": ", outputs[i]->name, " and ", outputs[j]->name,
                    " share memory; pass separate tensors");
    for (const Array* in : inputs)
      if (overlap(*outputs[i], *in))
        value_error(fn, ": ", outputs[i]->name, " and ", in->name,
                    " share memory; pass separate tensors");
  }
}

}  // namespace longseq::python
