// longseq._core: the compiled half of the longseq Python package (design.md §11). It links the
// engine's libraries and no PyTorch: tensors cross by DLPack (array.hpp), so one build serves
// every framework that speaks it.
//
// Errors: core::Error (bad input the engine caught) becomes ValueError with the engine's message
// ("[attention] ..."); comm::RankFailed (another rank failed, or a wait timed out) becomes
// longseq.RankFailed, a RuntimeError; the bindings raise TypeError and ValueError themselves for
// what they check before calling in. A broken invariant (LONGSEQ_CHECK) still aborts, as in C++.
#include <pybind11/pybind11.h>

#include "bindings.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/core/cpu.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  using namespace longseq;
  m.doc() = "longseq's engine (C++), bound for the longseq package";
  // Translators are tried newest first: RankFailed (a core::Error) before core::Error.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const core::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  // The module's attribute holds the exception type for the life of the process; the translator
  // keeps a bare handle to it. A static py::exception would release its reference at exit, after
  // the interpreter is gone, and its call operator is deprecated from pybind11 2.12 (a warning,
  // an error under -Werror) where py::set_error, which 2.10 lacks, replaces it.
  static const py::handle rank_failed =
      py::exception<comm::RankFailed>(m, "RankFailed", PyExc_RuntimeError).release();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const comm::RankFailed& e) {
      PyErr_SetString(rank_failed.ptr(), e.what());
    }
  });
  // A bad LONGSEQ_ISA is one error at import, not a failure inside the first kernel.
  core::active_isa();
  python::bind_attention(m);
  python::bind_comm(m);
  python::bind_context_parallel(m);
  python::bind_misc(m);
  python::bind_plan(m);
}
