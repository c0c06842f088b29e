#pragma once
// Two tiers of errors (design.md §8).
//
// * LONGSEQ_CHECK(cond) / LONGSEQ_CHECK_MSG(cond, parts...): a broken internal invariant, i.e. a
//   bug in longseq. Prints file:line and the condition, then aborts. Never used for user input.
// * longseq::core::Error: bad user input or a failed external call (file, MPI, BLAS). The message
//   always starts with the component in brackets and names the offending values, e.g.
//   "[attention] --algo startrail:3 needs C*C to divide world 8". Thrown with `fail(...)` or
//   `require(...)`.
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace longseq::core {

/// Concatenates anything streamable into one string: cat("world ", 8, " nodes ", 3).
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

/// User-facing error. what() is "[component] message".
class Error : public std::runtime_error {
 public:
  Error(std::string_view component, const std::string& message);
  const std::string& component() const { return component_; }

 private:
  std::string component_;
};

/// Throws Error("[component] " + cat(parts...)).
template <class... Args>
[[noreturn]] void fail(std::string_view component, const Args&... parts) {
  throw Error(component, cat(parts...));
}

/// Throws Error when `ok` is false. The message parts are only formatted on failure.
template <class... Args>
void require(bool ok, std::string_view component, const Args&... parts) {
  if (!ok) fail(component, parts...);
}

[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& msg);

}  // namespace longseq::core

#define LONGSEQ_CHECK(cond)                                                    \
  do {                                                                         \
    if (!(cond)) ::longseq::core::check_failed(__FILE__, __LINE__, #cond, ""); \
  } while (0)

#define LONGSEQ_CHECK_MSG(cond, ...)                                                               \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      ::longseq::core::check_failed(__FILE__, __LINE__, #cond, ::longseq::core::cat(__VA_ARGS__)); \
  } while (0)
