#pragma once
// Shared helpers of the comm tests: backend parameters, seeded global data, reference results.
//
// Every rank builds the same seeded global data (rank q's contribution is a pure function of
// (seed, q)), runs a collective, and compares its own output with a single-process computation
// over the whole global data (design.md §9).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/comm/mpi_backend.hpp"
#include "longseq/core/rng.hpp"

namespace longseq::comm::testing {

/// One backend configuration. world/nodes 0 under MPI mean "as started by mpirun" / "real".
struct Backend {
  std::string name;
  int world;
  int nodes;
};

/// gtest prints parameters with this (instead of their bytes).
inline void PrintTo(const Backend& b, std::ostream* os) {
  *os << b.name << " world " << b.world << " nodes " << b.nodes;
}

inline std::string backend_label(const ::testing::TestParamInfo<Backend>& info) {
  return info.param.name + std::to_string(info.param.world) + "x" +
         std::to_string(info.param.nodes);
}

/// GTEST_SKIPs MPI parameters outside mpirun (the mpirun registrations in tests.cmake run them).
#define LONGSEQ_SKIP_UNLESS_RUNNABLE(p)                                               \
  do {                                                                                \
    if ((p).name == "mpi" &&                                                          \
        !(::longseq::comm::mpi_available() && ::longseq::comm::launched_by_mpirun())) \
      GTEST_SKIP() << "MPI cases run under mpirun (ctest -R comm_mpi)";               \
  } while (0)

/// For its scope, the MPI backend splits transfers above `bytes` (every process runs the same
/// test, so all set the same limit, as run() requires). Does nothing for the local backend, which
/// has no limit.
class ChunkLimitScope {
 public:
  ChunkLimitScope(const Backend& b, size_t bytes) : active_(b.name == "mpi") {
    if (!active_) return;
    old_ = mpi_chunk_bytes();
    mpi_set_chunk_bytes(bytes);
  }
  ~ChunkLimitScope() {
    if (active_) mpi_set_chunk_bytes(old_);
  }
  ChunkLimitScope(const ChunkLimitScope&) = delete;
  ChunkLimitScope& operator=(const ChunkLimitScope&) = delete;

 private:
  bool active_;
  size_t old_ = 0;
};

inline Options options_for(const Backend& b, double timeout_s = 60.0) {
  Options o;
  o.backend = b.name;
  o.world = b.world;
  o.nodes = b.nodes;
  o.timeout_s = timeout_s;
  return o;
}

/// Rank q's `count` values of stream `seed`, for each supported element type.
template <class T>
std::vector<T> rank_data(uint64_t seed, int q, size_t count) {
  std::vector<T> v(count);
  const uint64_t off = static_cast<uint64_t>(q) * count;
  if constexpr (std::is_same_v<T, float>) {
    core::fill_normal(v.data(), count, seed, off);
  } else if constexpr (std::is_same_v<T, double>) {
    core::fill_normal(v.data(), count, seed, off);
  } else if constexpr (std::is_same_v<T, core::bf16>) {
    core::fill_normal(v.data(), count, seed, off);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    core::fill_randint(v.data(), count, seed, 2001, off);
    for (auto& x : v) x -= 1000;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    // Large magnitudes so a 32-bit truncation anywhere would show.
    for (size_t i = 0; i < count; ++i)
      v[i] = static_cast<int64_t>(core::random_bits(seed, off + i) >> 24) - (int64_t{1} << 39);
  } else {
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<T>(core::random_bits(seed, off + i));
  }
  return v;
}

inline double as_double(float x) {
  return x;
}
inline double as_double(double x) {
  return x;
}
inline double as_double(core::bf16 x) {
  return core::to_f32(x);
}
inline double as_double(int32_t x) {
  return static_cast<double>(x);
}
inline double as_double(int64_t x) {
  return static_cast<double>(x);
}

template <class T>
bool bits_equal(const std::vector<T>& a, const std::vector<T>& b) {
  // Empty vectors may hold null data pointers, which memcmp must not be given (UBSan).
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace longseq::comm::testing

namespace longseq::comm::testing {

/// The local configurations of the issue (1, 2, 3, 4 and 8 ranks; several declared nodes).
inline std::vector<Backend> local_backends() {
  return {{"local", 1, 1}, {"local", 2, 2}, {"local", 3, 1}, {"local", 4, 2}, {"local", 8, 2}};
}
/// MPI: the world mpirun started (-np 3 and -np 4 in tests.cmake), real topology.
inline std::vector<Backend> mpi_backends() {
  return {{"mpi", 0, 0}};
}

}  // namespace longseq::comm::testing
