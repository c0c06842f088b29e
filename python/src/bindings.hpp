#pragma once
// The rooms of longseq._core (module.cpp registers them). Each file binds one part of the
// libraries and converts arguments; the logic lives in the libraries (design.md §11).
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "array.hpp"
#include "longseq/attention/local.hpp"
#include "longseq/attention/mask_spec.hpp"

namespace longseq::python {

/// A mask of the project's grammar over n tokens, built once per call site: one MaskSpec for
/// every sequence of a batch, or one per sequence (document ids that differ per row).
struct PyMask {
  int64_t n = 0;
  std::string text;
  std::vector<std::shared_ptr<const attention::MaskSpec>> specs;
};

/// q, k, v of one call: [T, H, D] or [B, T, H, D] (T: the sequence, or a rank's local tokens),
/// one dtype (f32 | bf16), contiguous, one device. check_qkv raises naming the argument.
struct Qkv {
  attention::LocalDims dims;
  bool batched = false;
  std::vector<int64_t> q_shape, kv_shape, lse_shape;
};
Qkv check_qkv(const char* fn, const Array& q, const Array& k, const Array& v);
/// An output: `shape`, `dtype`, contiguous, on `like`'s device.
void check_out(const char* fn, const Array& a, const std::vector<int64_t>& shape, core::DType dtype,
               const Array& like);
/// The backward's optional lse gradient (None: nullopt): float32, q's lse shape, contiguous, on
/// q's device, sharing no memory with `grads`.
std::optional<Array> lse_grad(const char* fn, const py::object& dlse, const Qkv& d, const Array& q,
                              const std::vector<const Array*>& grads, Stream stream = std::nullopt);
/// The mask is over `tokens` and has 1 or `batch` rows.
void check_mask(const char* fn, const PyMask& m, int64_t tokens, int64_t batch);
/// A softmax scale: finite and >= 0 (0: 1/sqrt(D)).
void check_scale(const char* fn, double scale);

/// The most threads a call may ask for (compute threads of a rank, or the ranks of
/// attention.distributed, which are threads of this process).
inline constexpr int kMaxThreads = 1024;

/// The calling framework's threads for a rank: `threads` when > 0, else the host's hardware
/// threads shared by `ranks_on_host` ranks (core::default_threads).
int rank_threads(int threads, int ranks_on_host);

void bind_attention(py::module_& m);  // bind_attention.cpp: Mask, single-process, in-process P
void bind_comm(py::module_& m);       // bind_comm.cpp: open worlds, Group and its collectives
void bind_context_parallel(py::module_& m);  // bind_cp.cpp: ContextParallel's engine half
void bind_misc(py::module_& m);  // bind_misc.cpp: info, tokenizer, token files, safetensors
void bind_plan(py::module_& m);  // bind_plan.cpp: `longseq plan --json` as one call

}  // namespace longseq::python
