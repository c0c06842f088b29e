// Transfers over 2 GiB (issue "Past a million tokens", item 3: a K/V block of a 4M-token shard is
// larger). Rank 0 sends 2.5 GiB to rank 1 in one grouped step, followed on the same tag by a
// 16-byte trailer with the checksum; rank 1 receives both with irecv and checks every word. Under
// MPI the transfer goes with the default 1 GiB chunk limit: 3 MPI messages (1 GiB, 1 GiB,
// 0.5 GiB) tracked by one Request. The local backend has no limit and is checked the same way.
//
// Each run needs ~5 GiB of memory (the send buffer plus the receive buffer), so these tests run
// only from their own CTest registrations (tests/comm/tests.cmake: comm_mpi_big_np2 and
// comm_local_big, one at a time), which set LONGSEQ_COMM_BIG=1; elsewhere they skip.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "comm/comm_case.hpp"
#include "longseq/core/timer.hpp"

namespace longseq::comm::testing {
namespace {

constexpr size_t kBytes = size_t{5} << 29;  // 2.5 GiB
constexpr size_t kWords = kBytes / sizeof(uint64_t);
static_assert(kBytes > size_t{1} << 31, "must exceed what one MPI message of MPI_BYTE can hold");
static_assert(kBytes % kMpiChunkBytes != 0, "the last chunk should be a partial one");

/// Word i of the pattern: distinct for every i (an odd multiplier is a bijection of uint64), so a
/// chunk landing at the wrong offset, twice, or not at all shows at its first word.
uint64_t word(size_t i) {
  return (static_cast<uint64_t>(i) + 1) * 0x9e3779b97f4a7c15ull;
}

bool big_tests_enabled() {
  const char* v = std::getenv("LONGSEQ_COMM_BIG");
  return v != nullptr && std::string(v) == "1";
}

void transfer_and_check(Group& g) {
  if (g.rank() > 1) return;
  const bool mpi = g.backend() == "mpi";
  g.reset_stats();
  if (g.rank() == 0) {
    core::Timer fill;
    // Not a std::vector: value-initialising 2.5 GiB would cost a pass of its own.
    const std::unique_ptr<uint64_t[]> buf(new uint64_t[kWords]);
    uint64_t sum = 0;
    for (size_t i = 0; i < kWords; ++i) {
      buf[i] = word(i);
      sum += buf[i];
    }
    const uint64_t trailer[2] = {sum, kBytes};
    std::printf("[big] rank 0 filled %zu bytes in %.2f s\n", kBytes, fill.elapsed());
    const uint64_t before = mpi ? mpi_data_messages_sent() : 0;
    core::Timer t;
    const SendSpec sends[] = {{1, buf.get(), kBytes, 4}, {1, trailer, sizeof trailer, 4}};
    g.exchange(sends, {});
    std::printf("[big] rank 0 sent in %.2f s\n", t.elapsed());
    const Stats s = g.stats();
    EXPECT_EQ(s.messages_sent(), 2u);
    EXPECT_EQ(s.bytes_sent(), kBytes + sizeof trailer);
    if (mpi) {
      EXPECT_EQ(mpi_data_messages_sent() - before, kBytes / kMpiChunkBytes + 1 + 1)
          << "2.5 GiB should be 3 MPI messages at the default chunk limit, plus the trailer";
    }
  } else {
    const std::unique_ptr<uint64_t[]> buf(new uint64_t[kWords]);
    uint64_t trailer[2] = {0, 0};
    core::Timer t;
    Request big = g.irecv(0, buf.get(), kBytes, 4);
    Request tail = g.irecv(0, trailer, sizeof trailer, 4);
    tail.wait();  // the trailer first: it cannot have overtaken the transfer posted before it
    big.wait();
    std::printf("[big] rank 1 received in %.2f s\n", t.elapsed());
    core::Timer check;
    uint64_t sum = 0;
    size_t first_bad = kWords, bad = 0;
    for (size_t i = 0; i < kWords; ++i) {
      sum += buf[i];
      if (buf[i] != word(i)) {
        if (bad++ == 0) first_bad = i;
      }
    }
    std::printf("[big] rank 1 checked in %.2f s\n", check.elapsed());
    EXPECT_EQ(bad, 0u) << "first wrong word at byte " << first_bad * sizeof(uint64_t) << " of "
                       << kBytes;
    EXPECT_EQ(trailer[1], kBytes);
    EXPECT_EQ(sum, trailer[0]) << "checksum";
    const Stats s = g.stats();
    EXPECT_EQ(s.bytes_received(), kBytes + sizeof trailer);
    EXPECT_EQ(s.recv_intra.messages + s.recv_inter.messages, 2u);
  }
}

TEST(BigMessage, TwoAndAHalfGiBThroughMpi) {
  if (!big_tests_enabled())
    GTEST_SKIP() << "5 GiB test: ctest -R comm_mpi_big (LONGSEQ_COMM_BIG=1)";
  if (!(mpi_available() && launched_by_mpirun())) GTEST_SKIP() << "runs under mpirun";
  ASSERT_EQ(mpi_chunk_bytes(), kMpiChunkBytes) << "the real limit, not a test's";
  Options o = options_for({"mpi", 0, 0}, 120.0);
  ASSERT_GE(world_size(o), 2);
  comm::run(o, transfer_and_check);
}

TEST(BigMessage, TwoAndAHalfGiBThroughLocalThreads) {
  if (!big_tests_enabled())
    GTEST_SKIP() << "5 GiB test: ctest -R comm_local_big (LONGSEQ_COMM_BIG=1)";
  comm::run(options_for({"local", 2, 1}, 120.0), transfer_and_check);
}

}  // namespace
}  // namespace longseq::comm::testing
