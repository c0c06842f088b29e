// longseq._core.plan_json: `longseq plan --json` as one call (plan/request.hpp). Keywords are the
// command's flags without "--", '-' as '_' (--gpus-per-node is gpus_per_node), with the values
// the flags take; the library parses and checks them with the command's own code, so the answer
// is the command's, byte for byte.
#include <pybind11/stl.h>

#include <functional>
#include <map>

#include "bindings.hpp"
#include "longseq/plan/request.hpp"

namespace longseq::python {

namespace {

using plan::PlanRequest;
using Setter = std::function<void(PlanRequest&, const py::handle&)>;

// A keyword's value as the flag's text: str as is, int as its digits ("--seq 65536").
std::string text(const char* key, const py::handle& v) {
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v))
    return py::str(v).cast<std::string>();
  type_error("longseq.plan: ", key, " takes a str (or an int), got ",
             py::str(py::type::of(v).attr("__name__")).cast<std::string>());
}
template <class T>
T number(const char* key, const py::handle& v) {
  const bool ok = std::is_floating_point_v<T>
                      ? (py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v))
                      : py::isinstance<py::int_>(v);
  if (!ok || py::isinstance<py::bool_>(v))
    type_error("longseq.plan: ", key, " takes ",
               std::is_floating_point_v<T> ? "a number" : "an int", ", got ",
               py::str(py::type::of(v).attr("__name__")).cast<std::string>());
  return v.cast<T>();
}
bool flag(const char* key, const py::handle& v) {
  if (!py::isinstance<py::bool_>(v)) type_error("longseq.plan: ", key, " takes a bool");
  return v.cast<bool>();
}

// Every field of PlanRequest by its keyword.
const std::map<std::string, Setter>& setters() {
#define LONGSEQ_TEXT(f)                                                 \
  {                                                                     \
#f, [](PlanRequest & r, const py::handle& v) { r.f = text(#f, v); } \
  }
#define LONGSEQ_NUM(f)                                                                   \
  {                                                                                      \
#f, [](PlanRequest & r, const py::handle& v) { r.f = number<decltype(r.f)>(#f, v); } \
  }
#define LONGSEQ_BOOL(f)                                                 \
  {                                                                     \
#f, [](PlanRequest & r, const py::handle& v) { r.f = flag(#f, v); } \
  }
  static const std::map<std::string, Setter> table = {
      LONGSEQ_TEXT(model),        LONGSEQ_TEXT(seq),      LONGSEQ_NUM(gpus),
      LONGSEQ_NUM(gpus_per_node), LONGSEQ_TEXT(hardware), LONGSEQ_NUM(memory_limit),
      LONGSEQ_TEXT(mask),         LONGSEQ_TEXT(balance),  LONGSEQ_TEXT(algo),
      LONGSEQ_TEXT(checkpoint),   LONGSEQ_TEXT(loss),     LONGSEQ_NUM(seq_selective_fraction),
      LONGSEQ_TEXT(dp),           LONGSEQ_TEXT(cp),       LONGSEQ_TEXT(global_batch),
      LONGSEQ_NUM(top),           LONGSEQ_NUM(prune_gap), LONGSEQ_BOOL(exhaustive),
      LONGSEQ_TEXT(train),        LONGSEQ_NUM(ffn_chunk), LONGSEQ_NUM(data_tokens),
      LONGSEQ_BOOL(longest),      LONGSEQ_TEXT(device),
  };
#undef LONGSEQ_TEXT
#undef LONGSEQ_NUM
#undef LONGSEQ_BOOL
  return table;
}

std::string plan_json(const py::dict& flags) {
  PlanRequest r;
  for (const auto& [k, v] : flags) {
    const std::string key = k.cast<std::string>();
    const auto it = setters().find(key);
    if (it == setters().end()) {
      std::string known;
      for (const auto& [name, s] : setters()) known += (known.empty() ? "" : ", ") + name;
      type_error("longseq.plan: no flag --", key, " (keywords: ", known, ")");
    }
    it->second(r, v);
    r.given.push_back(key);
  }
  nlohmann::json j;
  {
    py::gil_scoped_release nogil;
    j = plan::plan_request_json(r);
  }
  return j.dump();
}

}  // namespace

void bind_plan(py::module_& m) {
  m.def("plan_json", &plan_json, py::arg("flags"));
}

}  // namespace longseq::python
