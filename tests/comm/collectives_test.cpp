// Every collective against a single-process computation on the same seeded global data, for every
// element type, on every backend configuration.
#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>

#include "comm/comm_case.hpp"
#include "longseq/core/timer.hpp"

namespace longseq::comm::testing {
namespace {

class Collectives : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override { LONGSEQ_SKIP_UNLESS_RUNNABLE(GetParam()); }
  void run(const std::function<void(Group&)>& fn) { comm::run(options_for(GetParam()), fn); }
};

template <class T>
void check_all_gather(Group& g, size_t count) {
  const int p = g.size(), r = g.rank();
  const std::vector<T> in = rank_data<T>(11, r, count);
  std::vector<T> out(count * static_cast<size_t>(p));
  g.all_gather(in, out);
  std::vector<T> want;
  for (int q = 0; q < p; ++q) {
    const std::vector<T> d = rank_data<T>(11, q, count);
    want.insert(want.end(), d.begin(), d.end());
  }
  EXPECT_TRUE(bits_equal(out, want)) << "rank " << r << " count " << count;
  // In place: the input already sits in block r of the output.
  std::vector<T> inplace(count * static_cast<size_t>(p));
  std::copy(in.begin(), in.end(), inplace.begin() + static_cast<ptrdiff_t>(count * r));
  g.all_gather(inplace.data() + count * static_cast<size_t>(r), inplace.data(), count,
               core::dtype_of<T>());
  EXPECT_TRUE(bits_equal(inplace, want)) << "in place, rank " << r;
}

TEST_P(Collectives, AllGatherEveryType) {
  run([](Group& g) {
    for (size_t count : {size_t{1}, size_t{37}, size_t{1000}}) {
      check_all_gather<float>(g, count);
      check_all_gather<core::bf16>(g, count);
      check_all_gather<int32_t>(g, count);
      check_all_gather<int64_t>(g, count);
      check_all_gather<uint8_t>(g, count);
    }
  });
}

/// Single-process reference of `op` over ranks of element i of every rank's block, in double.
template <class T>
std::vector<double> reference(int p, size_t count, uint64_t seed, ReduceOp op) {
  std::vector<double> ref(count, op == ReduceOp::sum ? 0.0 : -INFINITY);
  for (int q = 0; q < p; ++q) {
    const std::vector<T> d = rank_data<T>(seed, q, count);
    for (size_t i = 0; i < count; ++i)
      ref[i] = op == ReduceOp::sum ? ref[i] + as_double(d[i]) : std::max(ref[i], as_double(d[i]));
  }
  return ref;
}

/// Root-mean-square error of `got` against `ref`.
template <class T>
double rms_error(const T* got, const std::vector<double>& ref, size_t off, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double e = as_double(got[i]) - ref[off + i];
    s += e * e;
  }
  return n ? std::sqrt(s / static_cast<double>(n)) : 0.0;
}

/// The naive bf16 sum (sequential in rank order, rounding after every add): the 2x rule's
/// yardstick.
std::vector<core::bf16> naive_bf16_sum(int p, size_t count, uint64_t seed) {
  std::vector<core::bf16> acc = rank_data<core::bf16>(seed, 0, count);
  for (int q = 1; q < p; ++q) {
    const auto d = rank_data<core::bf16>(seed, q, count);
    for (size_t i = 0; i < count; ++i)
      acc[i] = core::to_bf16(core::to_f32(acc[i]) + core::to_f32(d[i]));
  }
  return acc;
}

/// Checks `got[n]` (elements [off, off+n) of the reduction) against the reference.
template <class T>
void expect_reduced(const T* got, size_t off, size_t n, int p, size_t count, uint64_t seed,
                    ReduceOp op, const char* what) {
  const std::vector<double> ref = reference<T>(p, count, seed, op);
  if constexpr (std::is_integral_v<T>) {
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(static_cast<double>(got[i]), ref[off + i]) << what << " element " << off + i;
  } else if constexpr (std::is_same_v<T, core::bf16>) {
    if (op == ReduceOp::max) {
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(as_double(got[i]), ref[off + i]) << what;
    } else {
      // Worst case per element: P roundings (P-1 partial sums and the result), each at most
      // 2^-9 of a partial sum, itself at most sum_q |x_q|.
      std::vector<double> abs_sum(count, 0.0);
      for (int q = 0; q < p; ++q) {
        const auto d = rank_data<T>(seed, q, count);
        for (size_t i = 0; i < count; ++i) abs_sum[i] += std::abs(as_double(d[i]));
      }
      for (size_t i = 0; i < n; ++i)
        ASSERT_LE(std::abs(as_double(got[i]) - ref[off + i]), p * std::ldexp(abs_sum[off + i], -9))
            << what << " element " << off + i;
      // FlashAttention-3's rule, over enough elements for an RMS to mean something: error at
      // most 2x that of the naive bf16 sum (sequential, rounding after every add).
      if (n >= 64) {
        const auto naive = naive_bf16_sum(p, count, seed);
        const double ours = rms_error(got, ref, off, n);
        const double theirs = rms_error(naive.data() + off, ref, off, n);
        EXPECT_LE(ours, 2.0 * theirs + 1e-6) << what << " bf16 rms error vs naive";
      }
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      if (op == ReduceOp::max) {
        ASSERT_EQ(as_double(got[i]), ref[off + i]) << what;
      } else {
        // Sums of P standard normals in a different order: |err| <= P * eps * sum|x|.
        const double tol = 4.0 * p * 1.2e-7 * (std::abs(ref[off + i]) + p);
        ASSERT_NEAR(as_double(got[i]), ref[off + i], tol) << what << " element " << off + i;
      }
    }
  }
}

template <class T>
void check_reduce_scatter(Group& g, size_t count, ReduceOp op) {
  const int p = g.size(), r = g.rank();
  const uint64_t seed = 21 + static_cast<uint64_t>(op);
  const std::vector<T> in = rank_data<T>(seed, r, count * static_cast<size_t>(p));
  std::vector<T> out(count);
  g.reduce_scatter(in, out, op);
  expect_reduced(out.data(), count * static_cast<size_t>(r), count, p,
                 count * static_cast<size_t>(p), seed, op, "reduce_scatter");
}

template <class T>
void check_all_reduce(Group& g, size_t count, ReduceOp op) {
  const int p = g.size(), r = g.rank();
  const uint64_t seed = 31 + static_cast<uint64_t>(op);
  const std::vector<T> in = rank_data<T>(seed, r, count);
  std::vector<T> out(count);
  g.all_reduce(in, out, op);
  expect_reduced(out.data(), 0, count, p, count, seed, op, "all_reduce");
  // In place gives the same bits.
  std::vector<T> inplace = in;
  g.all_reduce(inplace, op);
  EXPECT_TRUE(bits_equal(inplace, out)) << "in-place all_reduce differs on rank " << r;
  // Every rank holds bit-identical results (training keeps replicas in sync on this).
  std::vector<T> every(count * static_cast<size_t>(p));
  g.all_gather(out, every);
  for (int q = 0; q < p; ++q)
    EXPECT_EQ(0, std::memcmp(every.data() + count * static_cast<size_t>(q), out.data(),
                             count * sizeof(T)))
        << "all_reduce result of rank " << q << " differs from rank " << r;
}

TEST_P(Collectives, ReduceScatterSumAndMax) {
  run([](Group& g) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
      for (size_t count : {size_t{1}, size_t{300}}) {
        check_reduce_scatter<float>(g, count, op);
        check_reduce_scatter<core::bf16>(g, count, op);
        check_reduce_scatter<int32_t>(g, count, op);
        check_reduce_scatter<int64_t>(g, count, op);
      }
  });
}

TEST_P(Collectives, AllReduceSumAndMax) {
  run([](Group& g) {
    // Counts below, at and above P, not multiples of P: blocks of unequal (and zero) size.
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
      for (size_t count : {size_t{1}, size_t{5}, size_t{1001}}) {
        check_all_reduce<float>(g, count, op);
        check_all_reduce<core::bf16>(g, count, op);
        check_all_reduce<int32_t>(g, count, op);
        check_all_reduce<int64_t>(g, count, op);
      }
  });
}

TEST_P(Collectives, ReductionOfRawBytesIsRejected) {
  run([](Group& g) {
    std::vector<uint8_t> x(4);
    try {
      g.all_reduce(x);
      ADD_FAILURE() << "all_reduce over u8 did not throw";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("u8"), std::string::npos) << e.what();
    }
  });
}

TEST_P(Collectives, AllToAllEqualCounts) {
  run([](Group& g) {
    const int p = g.size(), r = g.rank();
    const size_t count = 13;
    const auto in = rank_data<float>(41, r, count * static_cast<size_t>(p));
    std::vector<float> out(in.size());
    g.all_to_all(in, out);
    for (int q = 0; q < p; ++q) {
      const auto theirs = rank_data<float>(41, q, count * static_cast<size_t>(p));
      EXPECT_EQ(0, std::memcmp(out.data() + count * static_cast<size_t>(q),
                               theirs.data() + count * static_cast<size_t>(r), count * 4))
          << "block from rank " << q << " on rank " << r;
    }
  });
}

/// Variable counts: rank a sends (a + 2b) % 5 int64 elements to rank b (zero included).
size_t vcount(int a, int b) {
  return static_cast<size_t>((a + 2 * b) % 5);
}

TEST_P(Collectives, AllToAllVariableCounts) {
  run([](Group& g) {
    const int p = g.size(), r = g.rank();
    std::vector<size_t> sc, sd, rc, rd;
    size_t stot = 0, rtot = 0;
    for (int q = 0; q < p; ++q) {
      sc.push_back(vcount(r, q));
      sd.push_back(stot);
      stot += sc.back() + 1;  // a gap between blocks, to check displacements are honoured
      rc.push_back(vcount(q, r));
      rd.push_back(rtot);
      rtot += rc.back() + 2;
    }
    const auto in = rank_data<int64_t>(51, r, stot);
    std::vector<int64_t> out(rtot, -7);
    g.all_to_all_v(in.data(), sc, sd, out.data(), rc, rd, core::DType::i64);
    for (int q = 0; q < p; ++q) {
      // What rank q sent to r: its block r.
      size_t qd = 0;
      for (int b = 0; b < r; ++b) qd += vcount(q, b) + 1;
      size_t qtot = 0;
      for (int b = 0; b < p; ++b) qtot += vcount(q, b) + 1;
      const auto theirs = rank_data<int64_t>(51, q, qtot);
      for (size_t i = 0; i < rc[static_cast<size_t>(q)]; ++i)
        ASSERT_EQ(out[rd[static_cast<size_t>(q)] + i], theirs[qd + i]) << "from " << q;
      for (size_t i = rc[static_cast<size_t>(q)]; i < rc[static_cast<size_t>(q)] + 2; ++i)
        ASSERT_EQ(out[rd[static_cast<size_t>(q)] + i], -7) << "gap written, from " << q;
    }
  });
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  run([](Group& g) {
    for (int root = 0; root < g.size(); ++root) {
      std::vector<core::bf16> data(777);
      if (g.rank() == root) data = rank_data<core::bf16>(61, root, data.size());
      g.broadcast(data, root);
      EXPECT_TRUE(bits_equal(data, rank_data<core::bf16>(61, root, data.size())))
          << "root " << root << " rank " << g.rank();
    }
  });
}

TEST_P(Collectives, BarrierWaitsForTheLastRank) {
  run([](Group& g) {
    // Rank q enters after q * 15 ms; nobody may leave before the last one has entered.
    // steady_clock is CLOCK_MONOTONIC, shared by the threads and processes of one machine.
    std::this_thread::sleep_for(std::chrono::milliseconds(15 * g.rank()));
    const double enter = core::now_seconds();
    g.barrier();
    const double leave = core::now_seconds();
    const double mine[2] = {enter, leave};
    std::vector<double> all(2 * static_cast<size_t>(g.size()));
    g.all_gather(mine, all.data(), 2, core::DType::f64);
    double last_enter = 0.0;
    for (int q = 0; q < g.size(); ++q)
      last_enter = std::max(last_enter, all[2 * static_cast<size_t>(q)]);
    EXPECT_GE(leave, last_enter) << "rank " << g.rank() << " left the barrier early";
  });
}

TEST_P(Collectives, SizeMismatchOfTypedCallsIsReported) {
  run([](Group& g) {
    std::vector<float> in(3), out(3 * static_cast<size_t>(g.size()) + 1);
    EXPECT_THROW(g.all_gather(in, out), core::Error);
  });
}

INSTANTIATE_TEST_SUITE_P(Local, Collectives, ::testing::ValuesIn(local_backends()), backend_label);
INSTANTIATE_TEST_SUITE_P(Mpi, Collectives, ::testing::ValuesIn(mpi_backends()), backend_label);

}  // namespace
}  // namespace longseq::comm::testing
