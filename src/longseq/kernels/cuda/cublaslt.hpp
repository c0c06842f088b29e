#pragma once
// cuBLASLt, loaded when the first GPU product needs it (dlopen), not when a process starts.
//
// Why: libcublasLt.so.13 is 540 MB; linked as a needed library, every process of a CUDA build
// paid for mapping and relocating it at start (0.12 s of each `longseq --help`, test process and
// `import longseq` on a quiet 2-core Xeon, bench/process_start.py), GPU or not, though only
// kernels/cuda/gemm.cu calls it.
//
// Contract:
// - api() opens the library on its first call (thread-safe, once per process) and resolves every
//   entry gemm.cu uses; the pointers' types are the header's own declarations (decltype), so a
//   mismatch with cublasLt.h is a compile error. It never unloads.
// - The library is `libcublasLt.so.<CUBLAS_VER_MAJOR>` of the headers this was compiled with,
//   searched as the dynamic loader searches (RPATH, LD_LIBRARY_PATH, ld.so.cache), then in the
//   toolkit's library directory found at build time. RTLD_LOCAL: its symbols stay out of the
//   process's global scope, so another cuBLASLt a host program loaded (PyTorch's) is not touched.
// - Failure (no library, a missing entry) throws core::Error naming the library, the paths tried
//   and dlerror(); it is not retried.
#include <cublasLt.h>

#include <string>
#include <vector>

namespace longseq::kernels::cuda::lt {

struct Api {
  decltype(&::cublasLtGetVersion) GetVersion;
  decltype(&::cublasLtGetStatusString) GetStatusString;
  decltype(&::cublasLtCreate) Create;
  decltype(&::cublasLtMatmul) Matmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&::cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&::cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  /// The file the loader opened (from dlinfo), for messages and tests.
  std::string path;
};

/// The loaded library (see the contract above); throws core::Error where it cannot be loaded.
const Api& api();

/// Where api() looks, in order: the soname, then the build's toolkit directory.
std::vector<std::string> library_candidates();
/// Opens the first of `candidates` that loads and resolves every entry (api()'s work, without
/// its once-per-process cache: tests hand it paths that fail). core::Error names each path tried
/// with dlerror(), or the missing entry.
Api load(const std::vector<std::string>& candidates);

}  // namespace longseq::kernels::cuda::lt
