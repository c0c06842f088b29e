#pragma once
// A bump arena: one aligned block carved into sub-allocations that are released together by
// rewinding to a mark. Parameters, gradients and optimizer state live in one arena so that ZeRO-3
// sharding is slicing (design.md §6); per-step scratch uses mark()/reset().
#include <cstddef>
#include <string>

#include "longseq/core/tensor.hpp"

namespace longseq::core {

class Arena {
 public:
  /// Reserves `capacity_bytes` (zeroed). `name` appears in the out-of-memory message.
  explicit Arena(size_t capacity_bytes, std::string name = "arena");

  /// n elements of T, kAlignment-aligned, zeroed. Throws core::Error naming the arena, the request
  /// and the remaining space when it does not fit.
  template <class T>
  T* alloc(size_t n) {
    return static_cast<T*>(alloc_bytes(n * sizeof(T)));
  }
  void* alloc_bytes(size_t bytes);

  /// Offset of the next allocation; reset(mark) frees everything allocated after it.
  size_t mark() const { return used_; }
  void reset(size_t mark = 0);

  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t capacity() const { return buf_.size(); }
  std::byte* base() { return buf_.data(); }

 private:
  Buffer<std::byte> buf_;
  std::string name_;
  size_t used_ = 0;
  size_t peak_ = 0;
};

}  // namespace longseq::core
