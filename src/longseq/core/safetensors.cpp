#include "longseq/core/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "longseq/core/checked.hpp"
#include "longseq/core/checksum.hpp"
#include "longseq/core/error.hpp"

namespace longseq::core {

namespace {

const char* st_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f64:
      return "F64";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
    case DType::boolean:
      return "BOOL";
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
  nlohmann::ordered_json sums = nlohmann::ordered_json::object();
  for (const SafeTensorRef& t : tensors) {
    require(!h.contains(t.name), "safetensors", path, ": duplicate tensor name '", t.name, "'");
    require(t.name != "__metadata__", "safetensors", path, ": reserved tensor name '", t.name, "'");
    int64_t b = 0;
    require(shape_bytes(t.shape, static_cast<int64_t>(dtype_size(t.dtype)), b), "safetensors", path,
            ": tensor '", t.name, "' has a negative or overflowing shape");
    const uint64_t bytes = static_cast<uint64_t>(b);
    h[t.name] = {
        {"dtype", st_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + bytes}}};
    sums[t.name] = crc32c_hex(crc32c(t.data, bytes));
    off += bytes;
  }
  if (!tensors.empty()) {
    // The checksums go into __metadata__ (string values only, per the format), which readers
    // that do not know the key ignore; read_safetensors verifies them.
    if (!h.contains("__metadata__")) {
      // Keep __metadata__ first, where the format's own writers put it.
      nlohmann::ordered_json h2 = {{"__metadata__", nlohmann::ordered_json::object()}};
      for (auto it = h.begin(); it != h.end(); ++it) h2[it.key()] = it.value();
      h = std::move(h2);
    }
    h["__metadata__"][kChecksumKey] = sums.dump();
  }
  std::string header = h.dump();
  while ((8 + header.size()) % 8 != 0) header.push_back(' ');  // spec: pad with spaces
  write_atomic(path, [&](int fd, const std::string& tmp) {
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
  return parse_safetensors(read_file(path), path);
}

SafeTensorsFile parse_safetensors(const std::string& all, const std::string& path) {
  SafeTensorsFile f;
  f.path = path;
  require(all.size() >= 8, "safetensors", path, ": file of ", all.size(),
          " bytes is shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(all[i])) << (8 * i);
  require(n <= all.size() - 8, "safetensors", path, ": header length ", n, " exceeds the file (",
          all.size(), " bytes)");
  require(n <= kMaxHeaderBytes, "safetensors", path, ": header length ", n,
          " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(all.begin() + 8, all.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const std::exception& e) {
    fail("safetensors", path, ": malformed header JSON: ", e.what());
  }
  require(h.is_object(), "safetensors", path, ": header is not a JSON object");
  const uint64_t data_size = all.size() - 8 - n;
  const char* data = all.data() + 8 + n;
  // (begin, end, name) of every tensor, to check that they tile the data section exactly.
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> spans;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& key = it.key();
    if (key == "__metadata__") {
      require(it->is_object(), "safetensors", path, ": __metadata__ is ", it->type_name(),
              ", expected an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m)
        f.metadata[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
      continue;
    }
    const nlohmann::json& e = *it;
    require(e.is_object(), "safetensors", path, ": entry '", key, "' is ", e.type_name(),
            ", expected an object with dtype, shape and data_offsets");
    require(e.contains("dtype") && e["dtype"].is_string(), "safetensors", path, ": tensor '", key,
            "': dtype missing or not a string");
    require(e.contains("shape") && e["shape"].is_array(), "safetensors", path, ": tensor '", key,
            "': shape missing or not an array");
    require(
        e.contains("data_offsets") && e["data_offsets"].is_array() && e["data_offsets"].size() == 2,
        "safetensors", path, ": tensor '", key, "': data_offsets missing or not [begin, end]");
    SafeTensor t;
    t.dtype = st_dtype(e["dtype"].get<std::string>(), path);
    require(e["shape"].size() <= 64, "safetensors", path, ": tensor '", key, "' has ",
            e["shape"].size(), " dimensions");
    for (const auto& d : e["shape"]) {
      require(d.is_number_integer() && (d.is_number_unsigned() || d.get<int64_t>() >= 0) &&
                  !(d.is_number_unsigned() && d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)),
              "safetensors", path, ": tensor '", key, "': shape entry ", d.dump(),
              " is not a non-negative integer");
      t.shape.push_back(d.get<int64_t>());
    }
    uint64_t offs[2];
    for (int i = 0; i < 2; ++i) {
      const auto& o = e["data_offsets"][i];
      require(o.is_number_unsigned() || (o.is_number_integer() && o.get<int64_t>() >= 0),
              "safetensors", path, ": tensor '", key, "': data_offsets entry ", o.dump(),
              " is not a non-negative integer");
      offs[i] = o.get<uint64_t>();
    }
    require(offs[0] <= offs[1] && offs[1] <= data_size, "safetensors", path, ": tensor '", key,
            "' data_offsets out of range: [", offs[0], ", ", offs[1], "] in ", data_size,
            " data bytes");
    int64_t need = 0;
    require(shape_bytes(t.shape, static_cast<int64_t>(dtype_size(t.dtype)), need), "safetensors",
            path, ": tensor '", key, "': shape ", e["shape"].dump(),
            " overflows the element count");
    require(offs[1] - offs[0] == static_cast<uint64_t>(need), "safetensors", path, ": tensor '",
            key, "' has ", offs[1] - offs[0], " bytes, its shape and dtype need ", need);
    t.bytes.assign(data + offs[0], data + offs[1]);
    spans.emplace_back(offs[0], offs[1], key);
    f.tensors.emplace(key, std::move(t));
  }
  // The format requires the tensors to cover the data section exactly: no overlaps (two tensors
  // sharing bytes), no holes (bytes no tensor owns), nothing after the last tensor.
  std::sort(spans.begin(), spans.end());
  uint64_t pos = 0;
  std::string prev;
  for (const auto& [b, e, name] : spans) {
    require(b >= pos, "safetensors", path, ": tensor '", name, "' [", b, ", ", e, ") overlaps '",
            prev, "' ending at ", pos);
    require(b == pos, "safetensors", path, ": hole of ", b - pos, " bytes before tensor '", name,
            "' (data offsets ", pos, " to ", b, " belong to no tensor)");
    pos = e;
    prev = name;
  }
  require(pos == data_size, "safetensors", path, ": ", data_size - pos,
          " bytes after the last tensor", prev.empty() ? std::string() : " '" + prev + "'",
          " belong to no tensor");
  verify_checksums(f);
  return f;
}

int verify_checksums(const SafeTensorsFile& f) {
  auto it = f.metadata.find(kChecksumKey);
  if (it == f.metadata.end()) return -1;
  nlohmann::json sums;
  try {
    sums = nlohmann::json::parse(it->second);
  } catch (const std::exception& e) {
    fail("safetensors", f.path, ": __metadata__ ", kChecksumKey, " is not JSON: ", e.what());
  }
  require(sums.is_object(), "safetensors", f.path, ": __metadata__ ", kChecksumKey,
          " is not an object of tensor checksums");
  for (auto s = sums.begin(); s != sums.end(); ++s) {
    uint32_t want = 0;
    require(s->is_string() && parse_crc32c_hex(s->get<std::string>(), want), "safetensors", f.path,
            ": checksum of tensor '", s.key(), "' is ", s->dump(), ", expected 8 hex digits");
    auto t = f.tensors.find(s.key());
    require(t != f.tensors.end(), "safetensors", f.path, ": a checksum names tensor '", s.key(),
            "', which the file does not hold");
    const uint32_t have = crc32c(t->second.bytes.data(), t->second.bytes.size());
    require(have == want, "safetensors", f.path, ": tensor '", s.key(),
            "' fails its CRC-32C check (", crc32c_hex(have), " read, ", crc32c_hex(want),
            " written): the file was corrupted after it was saved");
  }
  for (const auto& [name, t] : f.tensors)
    require(sums.contains(name), "safetensors", f.path, ": tensor '", name,
            "' has no checksum although the file records them (added after saving?)");
  return static_cast<int>(sums.size());
}

}  // namespace longseq::core
