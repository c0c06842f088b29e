// cuBLASLt loaded on first use (contract in cublaslt.hpp).
#include "longseq/kernels/cuda/cublaslt.hpp"

#include <dlfcn.h>
#include <link.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"

#define LONGSEQ_STR2(x) #x
#define LONGSEQ_STR(x) LONGSEQ_STR2(x)

namespace longseq::kernels::cuda::lt {

namespace {

constexpr const char* kSoname = "libcublasLt.so." LONGSEQ_STR(CUBLAS_VER_MAJOR);

template <typename Fn>
void resolve(void* lib, const char* name, Fn& out) {
  dlerror();
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    const char* err = dlerror();
    core::fail("cuda", kSoname, " has no entry ", name, " (", err ? err : "null symbol",
               "): the library is older than the cuBLASLt ", CUBLAS_VER_MAJOR, ".",
               CUBLAS_VER_MINOR, " headers longseq was built with");
  }
  out = reinterpret_cast<Fn>(sym);
}

}  // namespace

std::vector<std::string> library_candidates() {
  std::vector<std::string> names{kSoname};
#ifdef LONGSEQ_CUBLASLT_DIR
  names.push_back(std::string(LONGSEQ_CUBLASLT_DIR) + "/" + kSoname);
#endif
  return names;
}

Api load(const std::vector<std::string>& candidates) {
  std::vector<std::string> tried;
  void* lib = nullptr;
  for (const std::string& name : candidates) {
    if ((lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    const char* err = dlerror();
    tried.push_back(name + " (" + (err ? err : "unknown error") + ")");
  }
  if (lib == nullptr) {
    std::string list;
    for (const std::string& t : tried) list += (list.empty() ? "" : "; ") + t;
    core::fail("cuda", "cuBLASLt could not be loaded for the GPU's matrix products: tried ", list,
               ". Install the CUDA ", CUBLAS_VER_MAJOR,
               " toolkit's cuBLASLt or put its directory on LD_LIBRARY_PATH");
  }
  Api a;
  resolve(lib, "cublasLtGetVersion", a.GetVersion);
  resolve(lib, "cublasLtGetStatusString", a.GetStatusString);
  resolve(lib, "cublasLtCreate", a.Create);
  resolve(lib, "cublasLtMatmul", a.Matmul);
  resolve(lib, "cublasLtMatmulAlgoGetHeuristic", a.MatmulAlgoGetHeuristic);
  resolve(lib, "cublasLtMatmulDescCreate", a.MatmulDescCreate);
  resolve(lib, "cublasLtMatmulDescSetAttribute", a.MatmulDescSetAttribute);
  resolve(lib, "cublasLtMatmulPreferenceCreate", a.MatmulPreferenceCreate);
  resolve(lib, "cublasLtMatmulPreferenceDestroy", a.MatmulPreferenceDestroy);
  resolve(lib, "cublasLtMatmulPreferenceSetAttribute", a.MatmulPreferenceSetAttribute);
  resolve(lib, "cublasLtMatrixLayoutCreate", a.MatrixLayoutCreate);
  const link_map* map = nullptr;
  a.path = dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr
               ? std::string(map->l_name)
               : std::string(kSoname);
  return a;
}

const Api& api() {
  // A failed load is not retried: the same error is thrown to every caller.
  static std::once_flag once;
  static std::unique_ptr<Api> loaded;
  static std::unique_ptr<core::Error> error;
  std::call_once(once, [] {
    try {
      loaded = std::make_unique<Api>(load(library_candidates()));
    } catch (const core::Error& e) {
      error = std::make_unique<core::Error>(e);
    }
  });
  if (!loaded) throw *error;
  return *loaded;
}

}  // namespace longseq::kernels::cuda::lt
