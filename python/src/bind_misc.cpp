// longseq._core: the rest of the engine a Python user reaches for: the build report, the
// tokenizer (byte-level or a Hugging Face BPE, as `longseq tokenize`), token files, and
// safetensors files (the trainer's checkpoints) read into and written from the caller's tensors.
#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <optional>

#include "bindings.hpp"
#include "longseq/core/data_path.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/tokenizer/bpe.hpp"
#include "longseq/train/data.hpp"
#include "longseq/train/info.hpp"

namespace longseq::python {

namespace {

// `longseq tokenize`'s two encodings behind one object: byte-level without a tokenizer.json
// (ids 0-255 bytes, 256 end-of-text), else the BPE with its end-of-text token.
class PyTokenizer {
 public:
  PyTokenizer(const std::optional<std::string>& path, const std::string& eot) {
    if (!path) {
      if (!eot.empty())
        value_error("longseq.Tokenizer: eot '", eot, "' needs a tokenizer.json (the byte-level ",
                    "end-of-text is id ", train::kByteEot, ")");
      return;
    }
    bpe_.emplace(tokenizer::BpeTokenizer::load(*path));
    eot_ = static_cast<int32_t>(bpe_->eos_id(eot));
  }
  std::vector<uint32_t> encode(const std::string& text) const {
    py::gil_scoped_release nogil;
    if (!bpe_) {
      std::vector<uint32_t> ids = train::byte_tokenize({text});
      ids.pop_back();  // byte_tokenize ends each document with its end-of-text
      return ids;
    }
    return bpe_->encode(text);
  }
  // Each document's ids, then the end-of-text: the token file `longseq tokenize` writes.
  std::vector<uint32_t> encode_documents(const std::vector<std::string>& docs) const {
    py::gil_scoped_release nogil;
    if (!bpe_) return train::byte_tokenize(docs);
    std::vector<uint32_t> out;
    for (const std::string& d : docs) {
      const std::vector<uint32_t> t = bpe_->encode(d);
      out.insert(out.end(), t.begin(), t.end());
      out.push_back(static_cast<uint32_t>(eot_));
    }
    return out;
  }
  py::bytes decode_bytes(const std::vector<int64_t>& ids) const {
    std::vector<uint32_t> u;
    u.reserve(ids.size());
    for (int64_t id : ids) {
      if (id < 0 || id >= vocab_size())
        value_error("longseq.Tokenizer.decode: id ", id, " is outside the vocabulary of ",
                    vocab_size());
      u.push_back(static_cast<uint32_t>(id));
    }
    return py::bytes(bpe_ ? bpe_->decode(u) : train::byte_detokenize(u));
  }
  int64_t vocab_size() const { return bpe_ ? bpe_->vocab_size() : train::kByteVocab; }
  int32_t eot() const { return eot_; }
  std::optional<uint32_t> token_id(const std::string& token) const {
    if (!bpe_)
      value_error("longseq.Tokenizer.token_id: the byte-level tokenizer has no token names");
    return bpe_->token_id(token);
  }

 private:
  std::optional<tokenizer::BpeTokenizer> bpe_;
  int32_t eot_ = train::kByteEot;
};

// A safetensors file read whole (checksums verified); tensors are copied into the caller's.
class PySafeTensors {
 public:
  explicit PySafeTensors(const std::string& path) {
    py::gil_scoped_release nogil;
    f_ = core::read_safetensors(path);
  }
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& [name, t] : f_.tensors) n.push_back(name);
    return n;
  }
  std::pair<std::string, std::vector<int64_t>> info(const std::string& name) const {
    const core::SafeTensor& t = get(name);
    return {std::string(core::dtype_name(t.dtype)), t.shape};
  }
  const std::map<std::string, std::string>& metadata() const { return f_.metadata; }
  void read_into(const std::string& name, const py::object& out_) const {
    constexpr const char* fn = "longseq.load_safetensors";
    const core::SafeTensor& t = get(name);
    const Array out = from_python(fn, out_, "out");
    out.need_shape(fn, t.shape).need_contiguous(fn);
    const core::DType want = t.dtype == core::DType::boolean ? core::DType::u8 : t.dtype;
    const core::DType got = out.dtype == core::DType::boolean ? core::DType::u8 : out.dtype;
    if (got != want)
      type_error(fn, ": ", name, " is ", dtype_str(t.dtype), ", out is ", dtype_str(out.dtype));
    out.need_host(fn);
    if (t.dtype == core::DType::boolean) {
      // torch and numpy read a bool byte other than 0 or 1 as undefined: refuse it here.
      const auto bad = std::find_if(t.bytes.begin(), t.bytes.end(),
                                    [](auto b) { return static_cast<unsigned char>(b) > 1; });
      if (bad != t.bytes.end())
        value_error(fn, ": ", f_.path, ": BOOL tensor '", name, "' holds the byte ",
                    static_cast<int>(static_cast<unsigned char>(*bad)), " at element ",
                    bad - t.bytes.begin(), " (BOOL bytes are 0 or 1)");
    }
    std::copy(t.bytes.begin(), t.bytes.end(), static_cast<unsigned char*>(out.data));
  }

 private:
  const core::SafeTensor& get(const std::string& name) const {
    const auto it = f_.tensors.find(name);
    if (it == f_.tensors.end())
      value_error("longseq.load_safetensors: ", f_.path, " has no tensor '", name, "'");
    return it->second;
  }
  core::SafeTensorsFile f_;
};

// `bools[i]`: tensor i is the uint8 view of a bool tensor (longseq/_files.py: DLPack in torch
// 1.13 and numpy 1.24 has no bool), written as BOOL.
void save_safetensors(const std::string& path, const std::vector<std::string>& names,
                      const std::vector<py::object>& tensors,
                      const std::map<std::string, std::string>& metadata,
                      const std::vector<bool>& bools) {
  constexpr const char* fn = "longseq.save_safetensors";
  if (names.size() != tensors.size() || (!bools.empty() && bools.size() != names.size()))
    value_error(fn, ": ", names.size(), " names for ", tensors.size(), " tensors and ",
                bools.size(), " bool flags");
  std::vector<Array> arrays;
  arrays.reserve(tensors.size());
  std::vector<core::SafeTensorRef> refs;
  for (size_t i = 0; i < names.size(); ++i) {
    arrays.push_back(from_python(fn, tensors[i], names[i]));
    const Array& a = arrays.back();
    a.need_contiguous(fn).need_host(fn);
    const bool as_bool = !bools.empty() && bools[i];
    if (as_bool) a.need_dtype(fn, {core::DType::u8, core::DType::boolean});
    refs.push_back({names[i], as_bool ? core::DType::boolean : a.dtype, a.shape, a.data});
  }
  py::gil_scoped_release nogil;
  core::write_safetensors(path, refs, metadata);
}

// A token file (train/data.hpp): ids copied into the caller's int64 tensor.
class PyTokenFile {
 public:
  explicit PyTokenFile(const std::string& path) {
    py::gil_scoped_release nogil;
    f_ = train::read_token_file(path);
  }
  int64_t size() const { return static_cast<int64_t>(f_.tokens.size()); }
  int64_t vocab() const { return f_.vocab; }
  int32_t eot() const { return f_.eot; }
  void read_into(const py::object& out_) const {
    constexpr const char* fn = "longseq.read_tokens";
    const Array out = from_python(fn, out_, "out");
    out.need_dtype(fn, {core::DType::i64}).need_shape(fn, {size()}).need_contiguous(fn);
    out.need_host(fn);
    std::copy(f_.tokens.begin(), f_.tokens.end(), out.ptr<int64_t>());
  }

 private:
  train::TokenFile f_;
};

}  // namespace

void bind_misc(py::module_& m) {
  m.def("info", [] { return train::build_info().dump(); });
  m.def("version", [] { return std::string(train::version()); });
  m.def("data_dir", &core::data_dir);
  // The address longseq reads or writes for a tensor: tests compare it with the framework's own
  // (torch's data_ptr(), numpy's ctypes.data) to show that nothing was copied on the way in.
  m.def(
      "data_pointer",
      [](const py::object& x) {
        return reinterpret_cast<uintptr_t>(from_python("longseq._core.data_pointer", x, "x").data);
      },
      py::arg("x"));

  py::class_<PyTokenizer>(m, "Tokenizer")
      .def(py::init<std::optional<std::string>, std::string>(), py::arg("path") = py::none(),
           py::arg("eot") = "")
      .def("encode", &PyTokenizer::encode, py::arg("text"))
      .def("encode_documents", &PyTokenizer::encode_documents, py::arg("documents"))
      .def("decode_bytes", &PyTokenizer::decode_bytes, py::arg("ids"))
      .def_property_readonly("vocab_size", &PyTokenizer::vocab_size)
      .def_property_readonly("eot", &PyTokenizer::eot)
      .def("token_id", &PyTokenizer::token_id, py::arg("token"));

  py::class_<PySafeTensors>(m, "SafeTensors")
      .def(py::init<std::string>(), py::arg("path"))
      .def("names", &PySafeTensors::names)
      .def("info", &PySafeTensors::info, py::arg("name"))
      .def_property_readonly("metadata", &PySafeTensors::metadata)
      .def("read_into", &PySafeTensors::read_into, py::arg("name"), py::arg("out"));
  m.def("save_safetensors", &save_safetensors, py::arg("path"), py::arg("names"),
        py::arg("tensors"), py::arg("metadata"), py::arg("bools") = std::vector<bool>{});

  py::class_<PyTokenFile>(m, "TokenFile")
      .def(py::init<std::string>(), py::arg("path"))
      .def_property_readonly("size", &PyTokenFile::size)
      .def_property_readonly("vocab", &PyTokenFile::vocab)
      .def_property_readonly("eot", &PyTokenFile::eot)
      .def("read_into", &PyTokenFile::read_into, py::arg("out"));
}

}  // namespace longseq::python
