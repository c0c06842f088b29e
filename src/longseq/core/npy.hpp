#pragma once
// NumPy .npy files (format versions 1.0, 2.0 and 3.0): the interchange format of the CLI and of the
// PyTorch conformance tests.
//
// Supported: float32 '<f4', float64 '<f8', int32 '<i4', int64 '<i8', uint8 '|u1', bool '|b1';
// C order; little-endian. Everything else is refused with a core::Error that names the file and
// what is wrong (Fortran order, big-endian, truncated data, a malformed header, an unsupported or
// unexpected dtype).
#include <cstdint>
#include <string>
#include <vector>

#include "longseq/core/dtype.hpp"
#include "longseq/core/tensor.hpp"

namespace longseq::core {

/// A whole .npy file in memory: raw little-endian bytes in C order.
struct NpyArray {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
  int64_t numel() const;
};

/// Reads `path`. Throws core::Error("[npy] <path>: <what is wrong>").
NpyArray read_npy(const std::string& path);

/// Reads `path` and requires dtype `want`; a different dtype is refused naming both.
/// `expect_rank` >= 0 also requires that many dimensions. `what` names the use in messages
/// ("--q", "document ids").
NpyArray read_npy_expect(const std::string& path, DType want, int expect_rank = -1,
                         const std::string& what = "");

/// Convenience: read a float32 array into a Tensor<float> (refusing other dtypes).
Tensor<float> read_npy_f32(const std::string& path, int expect_rank = -1,
                           const std::string& what = "");

/// Writes a C-order little-endian .npy (version 1.0, or 2.0 when the header needs it).
/// dtype must be f32, f64, i32, i64, u8 or bool. Throws core::Error naming the file on I/O failure.
void write_npy(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
               const void* data);

template <class T>
void write_npy(const std::string& path, const Tensor<T>& t) {
  std::vector<int64_t> shape;
  for (int i = 0; i < t.shape().rank(); ++i) shape.push_back(t.shape()[i]);
  write_npy(path, dtype_of<T>(), shape, t.data());
}

}  // namespace longseq::core
