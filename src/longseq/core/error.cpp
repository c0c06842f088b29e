#include "longseq/core/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace longseq::core {

// Out of line: GCC 12 reports a spurious -Wrestrict on inlined string concatenation here.
Error::Error(std::string_view component, const std::string& message)
    : std::runtime_error(cat("[", component, "] ", message)), component_(component) {}

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "longseq: internal check failed at %s:%d: %s%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace longseq::core
