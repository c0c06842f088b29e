#include "longseq/core/arena.hpp"

#include <algorithm>
#include <cstring>

namespace longseq::core {

Arena::Arena(size_t capacity_bytes, std::string name)
    : buf_(capacity_bytes), name_(std::move(name)) {}

void* Arena::alloc_bytes(size_t bytes) {
  const size_t start = ((used_ + kAlignment - 1) / kAlignment) * kAlignment;
  if (start > buf_.size() || bytes > buf_.size() - start)
    fail("core", "arena '", name_, "' cannot fit ", bytes,
         " bytes: ", buf_.size() - std::min(start, buf_.size()), " of ", buf_.size(), " left");
  used_ = start + bytes;
  peak_ = std::max(peak_, used_);
  std::byte* p = buf_.data() + start;
  std::memset(p, 0, bytes);
  return p;
}

void Arena::reset(size_t mark) {
  LONGSEQ_CHECK_MSG(mark <= used_, "arena '", name_, "' reset to ", mark, " above used ", used_);
  used_ = mark;
}

}  // namespace longseq::core
