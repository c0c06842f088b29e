#pragma once
// What this build of longseq is and which machine it runs on: the report of `longseq info`, and
// of `longseq.info()` in the Python package (design.md §11), from one function so the two always
// agree.
#include <nlohmann/json.hpp>

namespace longseq::train {

/// The version of longseq (CMake's project version), e.g. "0.1.0".
const char* version();

/// {"version", "gemm": {"library", "isa"}, "mpi": "built" | "not built",
///  "nccl": "built" | "not built",
///  "cpu": {"brand", "vendor", "features"}, "kernel_variants_built": [..], "best_variant",
///  "kernel_variant", "kernel_variant_forced" (LONGSEQ_ISA chose a lower one),
///  "kernels": {"attention", "norms_rope_swiglu", "lm_head"}, "bf16",
///  "cuda": {"built", and when built: "archs", "runtime", "driver" (null without one), "status",
///           "gpus": [{"index", "name", "sm", "memory_gib", "multiprocessors"}]}}.
/// Throws core::Error when LONGSEQ_ISA names a variant this CPU cannot run (core::active_isa).
nlohmann::json build_info();

}  // namespace longseq::train
