#include "longseq/core/options.hpp"

#include <cmath>

#include "longseq/core/error.hpp"

namespace longseq::core {

using nlohmann::json;

json field_json(const FieldRef& r) {
  return std::visit([](auto* p) { return json(*p); }, r);
}

std::string field_text(const FieldRef& r) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>)
          return *p ? "true" : "false";
        else
          return cat(*p);
      },
      r);
}

namespace {

const char* kind_of(const FieldRef& r) {
  switch (r.index()) {
    case 0:
      return "a boolean";
    case 1:
    case 2:
      return "an integer";
    case 3:
      return "a non-negative integer";
    case 4:
      return "a number";
    default:
      return "a string";
  }
}

bool fits(const FieldRef& r, const json& v) {
  switch (r.index()) {
    case 0:
      return v.is_boolean();
    case 1:
      return v.is_number_integer() && v.get<int64_t>() >= std::numeric_limits<int>::min() &&
             v.get<int64_t>() <= std::numeric_limits<int>::max();
    case 2:
      return v.is_number_integer();
    case 3:
      return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
    case 4:
      return v.is_number();
    default:
      return v.is_string();
  }
}

}  // namespace

void set_field(const FieldRef& r, const json& v, std::string_view component, std::string_view where,
               std::string_view key) {
  require(fits(r, v), component, where, ": key '", key, "' must be ", kind_of(r), ", got ",
          v.dump());
  std::visit([&](auto* p) { *p = v.get<std::remove_pointer_t<decltype(p)>>(); }, r);
}

void check_field(const FieldRef& r, const Check& c, std::string_view component,
                 std::string_view name) {
  if (const auto* s = std::get_if<std::string*>(&r)) {
    if (c.parse) c.parse(**s);
    return;
  }
  if (std::holds_alternative<bool*>(r)) return;
  const double v = std::visit(
      [](auto* p) -> double {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>)
          return 0;
        else
          return static_cast<double>(*p);
      },
      r);
  check_number(v, field_text(r), c, component, name);
}

void check_number(double v, std::string_view text, const Check& c, std::string_view component,
                  std::string_view name) {
  const bool lo_ok = c.lo_open ? v > c.lo : v >= c.lo;
  const bool hi_ok = c.hi_open ? v < c.hi : v <= c.hi;
  if (lo_ok && hi_ok) return;
  if (std::isinf(c.hi))
    fail(component, name, " ", text, " must be ", c.lo_open ? "> " : ">= ", c.lo, c.note);
  fail(component, name, " ", text, " must be in ", c.lo_open ? "(" : "[", c.lo, ", ", c.hi,
       c.hi_open ? ")" : "]", c.note);
}

void fail_unknown_key(std::string_view component, std::string_view where, std::string_view key) {
  fail(component, where, ": unknown key '", key, "'");
}

void fail_missing_key(std::string_view component, std::string_view where, std::string_view key) {
  fail(component, where, ": missing field '", key, "'");
}

json::json_pointer key_pointer(std::string_view key) {
  std::string p = "/";
  for (char ch : key) p += ch == '.' ? '/' : ch;
  return json::json_pointer(p);
}

namespace {

void leaves(const json& j, const std::string& prefix,
            const std::function<bool(const std::string&)>& is_prefix,
            std::vector<std::pair<std::string, const json*>>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string k = prefix + it.key();
    if (it.value().is_object() && is_prefix(k))
      leaves(it.value(), k + ".", is_prefix, out);
    else
      out.emplace_back(k, &it.value());
  }
}

}  // namespace

std::vector<std::pair<std::string, const json*>> json_leaves(
    const json& j, const std::function<bool(const std::string&)>& is_prefix) {
  std::vector<std::pair<std::string, const json*>> out;
  leaves(j, "", is_prefix, out);
  return out;
}

void fail_not_object(std::string_view component, std::string_view where) {
  fail(component, where, ": expected a JSON object of configuration keys");
}

}  // namespace longseq::core
