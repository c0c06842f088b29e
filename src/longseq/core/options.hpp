#pragma once
// Configuration tables: every field of a configuration struct is declared once, as a row of a
// table (JSON key, CLI flag, help, admissible values, where it appears), and the JSON writer,
// the JSON reader and the range checks are loops over that table (the CLI flags are the same
// loop in cli/table_flags.hpp). A row reaches its member through a plain function, so rows may
// name nested members (`c.model.layers`) of any scalar type FieldRef lists. A key with dots
// ("intra.latency_s") lives in nested JSON objects ({"intra": {"latency_s": ...}}).
//
// Messages name the component, the field (its flag, or its key when it has no flag) and the
// value: "[train] --steps 0 must be >= 1", "[train] presets/x.json: unknown key 'bogus'".
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "longseq/core/check.hpp"

namespace longseq::core {

/// Where a field appears: on the command line, in JSON (preset files, metrics.json's config), or
/// both.
enum class Scope : uint8_t { cli_json, cli, json };

/// The member a row names.
using FieldRef = std::variant<bool*, int*, int64_t*, uint64_t*, double*, std::string*>;

/// One row of a configuration table over struct C.
template <class C>
struct Field {
  const char* key;   ///< JSON key
  const char* flag;  ///< CLI flag, e.g. "--kv-heads"
  const char* help;  ///< one line for --help (the default is appended by the CLI)
  Scope scope;
  FieldRef (*ref)(C&);
  Check check;
  bool required = false;  ///< JSON: a source without the key is refused (fields_from_json)

  bool in_cli() const { return scope != Scope::json; }
  bool in_json() const { return scope != Scope::cli; }
  /// The name messages use: the flag when there is one, else the key.
  const char* name() const { return in_cli() ? flag : key; }
  FieldRef get(C& c) const { return ref(c); }
  /// Read-only access: rows only read through this, so the const_cast never writes.
  FieldRef get(const C& c) const { return ref(const_cast<C&>(c)); }
};

/// The value as JSON.
nlohmann::json field_json(const FieldRef& r);
/// The value as text ("6", "0.003", "burst", "true").
std::string field_text(const FieldRef& r);
/// Sets the member from `v`, refusing a value of the wrong JSON type (an integer field given 1.5
/// or "6", a negative value for an unsigned field): "[component] where: key 'k' must be ...".
void set_field(const FieldRef& r, const nlohmann::json& v, std::string_view component,
               std::string_view where, std::string_view key);
/// Throws "[component] NAME VALUE must be >= LO" (or in (LO, HI), ...) or what `check.parse`
/// throws.
void check_field(const FieldRef& r, const Check& check, std::string_view component,
                 std::string_view name);

/// The JSON pointer of a key: "intra.latency_s" -> /intra/latency_s.
nlohmann::json::json_pointer key_pointer(std::string_view key);

/// Every JSON-scoped field of `c`, by key.
template <class C>
nlohmann::json fields_to_json(const std::vector<Field<C>>& table, const C& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : table)
    if (f.in_json()) j[key_pointer(f.key)] = field_json(f.get(c));
  return j;
}

/// `j`'s leaves by dotted key ({"a": {"b": 1}} -> "a.b": 1), descending into an object only where
/// `is_prefix(key)` says rows live below it (other objects are leaves, e.g. a row of JSON type).
std::vector<std::pair<std::string, const nlohmann::json*>> json_leaves(
    const nlohmann::json& j, const std::function<bool(const std::string&)>& is_prefix);

/// Sets the fields `j` names. Keys in `ignored` are skipped (derived values a writer adds);
/// any other key without a JSON-scoped row is refused: "[component] where: unknown key 'k'".
template <class C>
void fields_from_json(const std::vector<Field<C>>& table, C& c, const nlohmann::json& j,
                      std::string_view component, std::string_view where,
                      const std::vector<std::string>& ignored = {});

/// Runs every row's check over `c`, in table order. `where` (e.g. "hardware profile x.json: ")
/// prefixes the field's name in messages.
template <class C>
void check_fields(const std::vector<Field<C>>& table, const C& c, std::string_view component,
                  std::string_view where = "") {
  for (const auto& f : table)
    check_field(f.get(c), f.check, component, std::string(where) + f.name());
}

/// The row whose key is `key`, or nullptr.
template <class C>
const Field<C>* find_field(const std::vector<Field<C>>& table, std::string_view key) {
  for (const auto& f : table)
    if (key == f.key) return &f;
  return nullptr;
}

[[noreturn]] void fail_unknown_key(std::string_view component, std::string_view where,
                                   std::string_view key);
[[noreturn]] void fail_not_object(std::string_view component, std::string_view where);
[[noreturn]] void fail_missing_key(std::string_view component, std::string_view where,
                                   std::string_view key);

template <class C>
void fields_from_json(const std::vector<Field<C>>& table, C& c, const nlohmann::json& j,
                      std::string_view component, std::string_view where,
                      const std::vector<std::string>& ignored) {
  if (!j.is_object()) fail_not_object(component, where);
  auto is_prefix = [&](const std::string& p) {
    for (const auto& f : table)
      if (std::string_view(f.key).substr(0, p.size() + 1) == p + ".") return true;
    return false;
  };
  for (const auto& [k, v] : json_leaves(j, is_prefix)) {
    if (std::find(ignored.begin(), ignored.end(), k) != ignored.end()) continue;
    const Field<C>* f = find_field(table, k);
    if (!f || !f->in_json()) fail_unknown_key(component, where, k);
    set_field(f->get(c), *v, component, where, k);
  }
  for (const auto& f : table)
    if (f.required && !j.contains(key_pointer(f.key))) fail_missing_key(component, where, f.key);
}

}  // namespace longseq::core
