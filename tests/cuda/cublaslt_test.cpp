// kernels/cuda/cublaslt: cuBLASLt opened on first use, not at process start. Both run without a
// GPU (opening the library and asking its version need none), so every CUDA build checks them.
#include "longseq/kernels/cuda/cublaslt.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"

namespace {

namespace lt = longseq::kernels::cuda::lt;

// `readelf -d` of a file: its dynamic section (empty where readelf is missing).
std::string dynamic_section(const std::string& path) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> p(
      popen(("readelf -d '" + path + "' 2>/dev/null").c_str(), "r"), pclose);
  if (!p) return out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), p.get())) out.append(buf.data(), n);
  return out;
}

TEST(CublasLtLoader, OpensTheLibraryOfItsHeadersAndResolvesEveryEntry) {
  const lt::Api& api = lt::api();
  EXPECT_NE(api.path.find("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR)), std::string::npos)
      << api.path;
  // cublasLtGetVersion: major * 10000 + minor * 100 + patch, the headers' major.
  EXPECT_EQ(static_cast<int>(api.GetVersion() / 10000), CUBLAS_VER_MAJOR) << api.GetVersion();
  // The words gemm.cu's errors quote ("the requested functionality is not supported" in 13.0).
  EXPECT_NE(std::string(api.GetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)).find("not supported"),
            std::string::npos);
  EXPECT_EQ(&lt::api(), &api);  // loaded once
  std::cout << "[cublaslt] " << api.path << ", version " << api.GetVersion() << "\n";
}

TEST(CublasLtLoader, RefusesNamingEveryPathTriedOrTheMissingEntry) {
  EXPECT_EQ(lt::library_candidates().front(), "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  try {
    lt::load({"/nonexistent/libcublasLt.so.13", "/nonexistent2/libcublasLt.so.13"});
    FAIL() << "loaded a library that does not exist";
  } catch (const longseq::core::Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.component(), "cuda");
    EXPECT_NE(m.find("cuBLASLt could not be loaded"), std::string::npos) << m;
    EXPECT_NE(m.find("tried /nonexistent/libcublasLt.so.13 ("), std::string::npos) << m;
    EXPECT_NE(m.find("; /nonexistent2/libcublasLt.so.13 ("), std::string::npos) << m;
    EXPECT_NE(m.find("LD_LIBRARY_PATH"), std::string::npos) << m;
  }
  // A library that loads but is not cuBLASLt: the first entry it lacks is named.
  try {
    lt::load({"libm.so.6"});
    FAIL() << "took libm for cuBLASLt";
  } catch (const longseq::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no entry cublasLtGetVersion"), std::string::npos)
        << e.what();
  }
}

// The point of the loader: no binary lists cuBLASLt as needed, so no process maps its 540 MB at
// start (0.12 s each on a quiet 2-core Xeon, GPU or not). A NEEDED entry would come back with a
// CMake link of CUDA::cublasLt.
TEST(CublasLtLoader, NoBinaryNeedsItAtStart) {
  std::vector<std::string> binaries{"/proc/self/exe"};
#ifdef LONGSEQ_CLI
  binaries.emplace_back(LONGSEQ_CLI);
#endif
  for (const std::string& path : binaries) {
    const std::string dyn = dynamic_section(path);
    if (dyn.empty()) GTEST_SKIP() << "readelf is missing or could not read " << path;
    EXPECT_NE(dyn.find("(NEEDED)"), std::string::npos) << path << ":\n" << dyn;
    EXPECT_EQ(dyn.find("libcublasLt"), std::string::npos) << path << ":\n" << dyn;
  }
}

}  // namespace
