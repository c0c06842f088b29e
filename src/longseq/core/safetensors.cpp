#include "longseq/core/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "longseq/core/error.hpp"

namespace longseq::core {

namespace {

const char* st_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f64: return "F64";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

DType st_dtype(const std::string& s, const std::string& path) {
  if (s == "F32") return DType::f32;
  if (s == "BF16") return DType::bf16;
  if (s == "F64") return DType::f64;
  if (s == "I32") return DType::i32;
  if (s == "I64") return DType::i64;
  if (s == "U8") return DType::u8;
  if (s == "BOOL") return DType::boolean;
  fail("safetensors", path, ": unsupported dtype '", s, "'");
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("io", path, ": write failed: ", std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void fsync_dir(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some filesystems refuse directory fds
  ::fsync(fd);
  ::close(fd);
}

// Writes chunks to path.tmp, fsyncs, renames.
template <class F>
void atomic_write(const std::string& path, F&& body) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("io", tmp, ": cannot create: ", std::strerror(errno));
  try {
    body(fd, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    fail("io", tmp, ": fsync failed: ", std::strerror(e));
  }
  if (::close(fd) != 0) fail("io", tmp, ": close failed: ", std::strerror(errno));
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    fail("io", path, ": rename from ", tmp, " failed: ", std::strerror(errno));
  fsync_dir(path);
}

}  // namespace

int64_t SafeTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const SafeTensor& SafeTensorsFile::get(const std::string& name, DType want,
                                       const std::vector<int64_t>& shape) const {
  auto it = tensors.find(name);
  require(it != tensors.end(), "safetensors", path, ": no tensor '", name, "'");
  require(it->second.dtype == want, "safetensors", path, ": tensor '", name, "' is ",
          st_name(it->second.dtype), ", expected ", st_name(want));
  if (!shape.empty() && it->second.shape != shape) {
    std::ostringstream a, b;
    for (int64_t d : it->second.shape) a << d << ",";
    for (int64_t d : shape) b << d << ",";
    fail("safetensors", path, ": tensor '", name, "' has shape [", a.str(), "], expected [",
         b.str(), "]");
  }
  return it->second;
}

void write_safetensors(const std::string& path, const std::vector<SafeTensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  uint64_t off = 0;
  for (const SafeTensorRef& t : tensors) {
    require(!h.contains(t.name), "safetensors", path, ": duplicate tensor name '", t.name, "'");
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const uint64_t bytes = static_cast<uint64_t>(n) * dtype_size(t.dtype);
    h[t.name] = {{"dtype", st_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string header = h.dump();
  while ((8 + header.size()) % 8 != 0) header.push_back(' ');  // spec: pad with spaces
  atomic_write(path, [&](int fd, const std::string& tmp) {
    unsigned char len[8];
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    write_all(fd, len, 8, tmp);
    write_all(fd, header.data(), header.size(), tmp);
    for (const SafeTensorRef& t : tensors) {
      int64_t e = 1;
      for (int64_t d : t.shape) e *= d;
      write_all(fd, t.data, static_cast<size_t>(e) * dtype_size(t.dtype), tmp);
    }
  });
}

SafeTensorsFile read_safetensors(const std::string& path) {
  SafeTensorsFile f;
  f.path = path;
  const std::string all = read_file(path);
  require(all.size() >= 8, "safetensors", path, ": file of ", all.size(),
          " bytes is shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(all[i])) << (8 * i);
  require(n <= all.size() - 8, "safetensors", path, ": header length ", n, " exceeds the file (",
          all.size(), " bytes)");
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(all.substr(8, n));
  } catch (const std::exception& e) {
    fail("safetensors", path, ": malformed header JSON: ", e.what());
  }
  require(h.is_object(), "safetensors", path, ": header is not a JSON object");
  const uint64_t data_size = all.size() - 8 - n;
  const char* data = all.data() + 8 + n;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it->begin(); m != it->end(); ++m)
        f.metadata[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
      continue;
    }
    try {
      SafeTensor t;
      t.dtype = st_dtype(it->at("dtype").get<std::string>(), path);
      t.shape = it->at("shape").get<std::vector<int64_t>>();
      const auto offs = it->at("data_offsets").get<std::vector<uint64_t>>();
      require(offs.size() == 2 && offs[0] <= offs[1] && offs[1] <= data_size, "safetensors", path,
              ": tensor '", it.key(), "' data_offsets out of range of ", data_size, " data bytes");
      for (int64_t d : t.shape) require(d >= 0, "safetensors", path, ": negative dim in '", it.key(), "'");
      require(offs[1] - offs[0] == static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype),
              "safetensors", path, ": tensor '", it.key(), "' has ", offs[1] - offs[0],
              " bytes, its shape and dtype need ", t.numel() * dtype_size(t.dtype));
      t.bytes.assign(data + offs[0], data + offs[1]);
      f.tensors.emplace(it.key(), std::move(t));
    } catch (const nlohmann::json::exception& e) {
      fail("safetensors", path, ": malformed entry '", it.key(), "': ", e.what());
    }
  }
  return f;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  atomic_write(path, [&](int fd, const std::string& tmp) { write_all(fd, text.data(), text.size(), tmp); });
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  require(static_cast<bool>(in), "io", path, ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  require(!in.bad(), "io", path, ": read failed");
  return ss.str();
}

}  // namespace longseq::core
