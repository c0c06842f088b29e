#pragma once
// A value's admissible range, declared beside the value (a configuration table's row,
// core/options.hpp; a shared flag's row, core/flag_rows.hpp) and checked by one function, so a
// range reads the same words wherever it is enforced: "[train] --world 0 must be >= 1".
#include <limits>
#include <string>
#include <string_view>

namespace longseq::core {

/// A field's admissible values, checked by check_fields(): a numeric interval (bounds open or
/// closed, with a note for the message), and for strings the parser of the typed value (it
/// throws core::Error naming the value, e.g. model::parse_checkpoint_policy).
struct Check {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  const char* note = "";  ///< appended to a range message, e.g. " (0: all tokens)"
  void (*parse)(const std::string&) = nullptr;
};
/// Any value of the type.
constexpr Check any() {
  return {};
}
/// value > lo.
constexpr Check above(double lo) {
  Check c;
  c.lo = lo;
  c.lo_open = true;
  return c;
}
/// lo < value <= hi.
constexpr Check above_at_most(double lo, double hi, const char* note = "") {
  Check c;
  c.lo = lo;
  c.hi = hi;
  c.lo_open = true;
  c.note = note;
  return c;
}
/// value >= lo.
constexpr Check at_least(double lo, const char* note = "") {
  Check c;
  c.lo = lo;
  c.note = note;
  return c;
}
/// lo < value < hi.
constexpr Check open_interval(double lo, double hi) {
  Check c;
  c.lo = lo;
  c.hi = hi;
  c.lo_open = c.hi_open = true;
  return c;
}
/// A string that `parse` accepts.
constexpr Check parsed_by(void (*parse)(const std::string&)) {
  Check c;
  c.parse = parse;
  return c;
}

/// Throws core::Error "[component] NAME TEXT must be >= LO" (or "must be in (LO, HI]", ..., with
/// check.note appended) when `value` is outside `check`'s interval. `text` is the value as given.
void check_number(double value, std::string_view text, const Check& check,
                  std::string_view component, std::string_view name);

}  // namespace longseq::core
