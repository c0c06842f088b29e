#pragma once
// safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length n, n bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
// "__metadata__": {"k": "v"}}, then the raw little-endian tensor bytes. This is the checkpoint
// format of the trainer (Hugging Face LLaMA names), so `transformers` loads it unchanged.
//
// Supported dtypes: F32, BF16, F64, I32, I64, U8, BOOL. Writes are atomic: the file is written as
// `path.tmp`, fsync'ed, renamed over `path`, and the directory is fsync'ed, so a crash leaves
// either the old file or the new one, never a torn one.
//
// Errors: core::Error("[safetensors] <path>: <what>") for I/O failures, truncated files, malformed
// headers (a header over kMaxHeaderBytes, a non-object __metadata__, entries that are not objects,
// shapes that are not non-negative integers or whose byte count overflows), out-of-range data
// offsets, byte counts that disagree with shape and dtype, tensors that overlap or leave holes in
// the data section (the format requires them to tile it exactly), unknown dtypes, duplicate names.
//
// Checksums: write_safetensors records the CRC-32C of every tensor's bytes in __metadata__ under
// kChecksumKey (a JSON object {"name": "8 hex digits"} as a string, since metadata values are
// strings); read_safetensors verifies them when present, so a flipped byte in a file longseq wrote
// is refused naming the file and the tensor. Files without the key (other writers) are read as is.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "longseq/core/dtype.hpp"
// read_file, write_file_atomic, fsync_dir: generic file I/O, included for the callers that found
// them here before they moved.
#include "longseq/core/io.hpp"

namespace longseq::core {

/// One tensor to write: borrowed bytes (numel * dtype_size(dtype)).
struct SafeTensorRef {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

/// One tensor read back: owned bytes.
struct SafeTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
  int64_t numel() const;
};

struct SafeTensorsFile {
  std::map<std::string, SafeTensor> tensors;
  std::map<std::string, std::string> metadata;
  /// The tensor `name`; throws core::Error naming the file and the name when absent, when the
  /// dtype is not `want`, or (when `shape` is non-empty) when the shape differs.
  const SafeTensor& get(const std::string& name, DType want,
                        const std::vector<int64_t>& shape = {}) const;
  std::string path;
};

/// The __metadata__ key holding the per-tensor CRC-32C checksums.
inline constexpr const char* kChecksumKey = "longseq.crc32c";
/// The largest header read (the reference implementation's limit): a corrupted length cannot
/// make the reader parse gigabytes of tensor bytes as JSON.
inline constexpr uint64_t kMaxHeaderBytes = 100u << 20;

/// Writes atomically (see above). Tensors are laid out in the given order, 8-byte aligned header.
void write_safetensors(const std::string& path, const std::vector<SafeTensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

SafeTensorsFile read_safetensors(const std::string& path);
/// Parses a whole file's bytes (`path` only names it in messages); what read_safetensors does
/// after reading. Used by the fuzz harness.
SafeTensorsFile parse_safetensors(const std::string& bytes, const std::string& path);
/// Verifies the kChecksumKey checksums of `f` (read_safetensors already did): returns how many
/// tensors were checked, -1 when the file records none; throws core::Error naming the file and
/// the first tensor whose bytes do not match, or a tensor without a checksum.
int verify_checksums(const SafeTensorsFile& f);

}  // namespace longseq::core
