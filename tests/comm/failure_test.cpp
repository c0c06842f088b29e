// Failure semantics: a throwing rank, a timeout and a size mismatch end every rank's waits with
// an error naming the failing rank, well within the timeout, instead of hanging.
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "comm/comm_case.hpp"
#include "longseq/core/timer.hpp"

namespace longseq::comm::testing {
namespace {

class Failure : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override { LONGSEQ_SKIP_UNLESS_RUNNABLE(GetParam()); }
};

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_P(Failure, ThrowingRankFailsEveryOtherRankQuickly) {
  const Options o = options_for(GetParam(), /*timeout_s=*/120.0);
  const int p = world_size(o);
  if (p < 2) GTEST_SKIP() << "needs two ranks";
  const int bad = p - 1;
  std::mutex mu;
  std::vector<std::string> seen;  // what each surviving rank's wait threw
  const double t0 = core::now_seconds();
  try {
    comm::run(o, [&](Group& g) {
      if (g.rank() == bad) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        throw std::runtime_error("boom in the attention kernel");
      }
      // Pending operation: a receive from the failing rank. Then a future one: a collective.
      float x = 0;
      try {
        g.irecv(bad, &x, 4).wait();
        ADD_FAILURE() << "receive from the failed rank completed";
      } catch (const RankFailed& e) {
        EXPECT_EQ(e.failed_rank(), bad);
        std::lock_guard<std::mutex> lk(mu);
        seen.push_back(e.what());
      }
      EXPECT_THROW(g.barrier(), RankFailed);
      throw std::runtime_error("secondary failure that must not replace the first");
    });
    ADD_FAILURE() << "run() returned normally";
  } catch (const RankFailed& e) {
    EXPECT_EQ(e.failed_rank(), bad);
    EXPECT_TRUE(contains(e.what(), "rank " + std::to_string(bad) + " failed")) << e.what();
    EXPECT_TRUE(contains(e.what(), "boom in the attention kernel")) << e.what();
  }
  // Propagated by the failure, not by the timeout: a margin that holds on a loaded 2-core machine.
  const double elapsed = core::now_seconds() - t0;
  EXPECT_LT(elapsed, 60.0) << "failure took " << elapsed << " s to propagate (timeout 120 s)";
  for (const std::string& s : seen) EXPECT_TRUE(contains(s, "boom")) << s;
}

TEST_P(Failure, TimeoutEndsAWaitThatCannotComplete) {
  const Options o = options_for(GetParam(), /*timeout_s=*/0.5);
  const int p = world_size(o);
  if (p < 2) GTEST_SKIP() << "needs two ranks";
  const double t0 = core::now_seconds();
  try {
    comm::run(o, [&](Group& g) {
      if (g.rank() == 0) {
        float x;
        g.irecv(1, &x, 4, 9).wait();  // rank 1 never sends
      } else if (g.rank() == 1) {
        // Busy "computing" (not returned, not communicating) for longer than the timeout.
        std::this_thread::sleep_for(std::chrono::milliseconds(1200));
      }
    });
    ADD_FAILURE() << "run() returned normally";
  } catch (const RankFailed& e) {
    EXPECT_EQ(e.failed_rank(), 0);
    EXPECT_TRUE(contains(e.what(), "timed out after 0.5 s")) << e.what();
    EXPECT_TRUE(contains(e.what(), "from rank 1 (tag 9)")) << e.what();
  }
  const double elapsed = core::now_seconds() - t0;
  EXPECT_GT(elapsed, 0.45);
  EXPECT_LT(elapsed, 60.0);  // the timeout, not a hang (margin for a loaded machine)
}

TEST_P(Failure, SizeMismatchNamesBothSizes) {
  const Options o = options_for(GetParam(), 30.0);
  if (world_size(o) < 2) GTEST_SKIP() << "needs two ranks";
  try {
    comm::run(o, [&](Group& g) {
      std::vector<uint8_t> buf(100);
      if (g.rank() == 0) g.isend(1, buf.data(), 100, 3).wait();
      if (g.rank() == 1) g.irecv(0, buf.data(), 96, 3).wait();
    });
    ADD_FAILURE() << "run() returned normally";
  } catch (const RankFailed& e) {
    EXPECT_TRUE(contains(e.what(), "sends 100 bytes")) << e.what();
    EXPECT_TRUE(contains(e.what(), "receive of 96 bytes")) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank 0")) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank 1")) << e.what();
  }
}

TEST_P(Failure, SplitTransferOfTheWrongSizeNamesBothTotalsAndKeepsTheTagInOrder) {
  // Under MPI the transfers are split at 4 KiB. Rank 1 posts receives that disagree with rank 0's
  // sends, longer and shorter by whole chunks: the error must name both totals, and the tag's
  // next message must still land in the next receive (every chunk of the wrong-sized transfer is
  // drained, none is left for it). The ranks catch the mismatch, so the run succeeds.
  constexpr size_t kChunk = 4096;
  const ChunkLimitScope limit(GetParam(), kChunk);
  const Options o = options_for(GetParam(), 30.0);
  if (world_size(o) < 2) GTEST_SKIP() << "needs two ranks";
  comm::run(o, [&](Group& g) {
    const size_t cases[][2] = {{3 * kChunk + 7, 2 * kChunk}, {kChunk + 1, 3 * kChunk}};
    for (const auto& [sent, posted] : cases) {
      const int32_t next = static_cast<int32_t>(sent);
      if (g.rank() == 0) {
        const std::vector<uint8_t> buf(sent, 1);
        try {
          g.isend(1, buf.data(), sent, 3).wait();
          // The MPI sender completes (its message was drained); the local one shares the error.
          EXPECT_EQ(g.backend(), "mpi");
        } catch (const RankFailed&) {
          throw;
        } catch (const core::Error& e) {
          EXPECT_EQ(g.backend(), "local") << e.what();
        }
        g.send(1, &next, sizeof next, 3);
      } else if (g.rank() == 1) {
        std::vector<uint8_t> buf(posted);
        try {
          g.irecv(0, buf.data(), posted, 3).wait();
          ADD_FAILURE() << "a receive of " << posted << " bytes took " << sent;
        } catch (const RankFailed&) {
          throw;
        } catch (const core::Error& e) {
          EXPECT_TRUE(contains(e.what(), core::cat("sends ", sent, " bytes"))) << e.what();
          EXPECT_TRUE(contains(e.what(), core::cat("receive of ", posted, " bytes"))) << e.what();
        }
        int32_t got = -1;
        g.recv(0, &got, sizeof got, 3);
        EXPECT_EQ(got, next) << "the message after the mismatch";
      }
    }
  });
}

TEST_P(Failure, RequestsDroppedWhileUnwindingAreWithdrawn) {
  // Rank 0 posts a 1 MiB receive and throws before waiting: its buffer is freed while unwinding.
  // The request must be withdrawn first, so rank 1's late send never lands in freed memory (the
  // address sanitizer build checks this), and everyone gets rank 0's failure.
  const Options o = options_for(GetParam(), 30.0);
  if (world_size(o) < 2) GTEST_SKIP() << "needs two ranks";
  try {
    comm::run(o, [&](Group& g) {
      const size_t n = 1 << 18;
      if (g.rank() == 0) {
        std::vector<float> buf(n);
        Request r = g.irecv(1, buf, 6);
        throw std::runtime_error("rank 0 gives up");
      }
      if (g.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        const std::vector<float> data(n, 1.f);
        g.isend(0, data, 6).wait();
      }
    });
    ADD_FAILURE() << "run() returned normally";
  } catch (const RankFailed& e) {
    EXPECT_EQ(e.failed_rank(), 0);
    EXPECT_TRUE(contains(e.what(), "rank 0 gives up")) << e.what();
  }
}

TEST_P(Failure, NextRunAfterAFailureIsClean) {
  const Options o = options_for(GetParam(), 30.0);
  EXPECT_THROW(comm::run(o,
                         [](Group& g) {
                           if (g.rank() == 0) throw std::runtime_error("first run fails");
                           g.barrier();
                         }),
               RankFailed);
  comm::run(o, [](Group& g) {
    int64_t x = 1;
    g.all_reduce(&x, &x, 1, core::DType::i64);
    EXPECT_EQ(x, g.size());
  });
}

// The flake of docs/comm.md (a 4-byte message never matched in the first world after the failure
// tests): a failed world leaves messages in flight (sends of the failed run); had its communicator
// been freed, the next world's dup could get the same context id and those stale messages would
// land in it, ahead of the real ones in MPI's per-peer sequence. Failed worlds keep their
// communicator, so each round here is a failed run with traffic still in flight, then a clean
// run of 4-byte messages between every pair, checked by value.
TEST_P(Failure, CleanRunsAfterManyFailedRunsWithTrafficInFlight) {
  const Options o = options_for(GetParam(), 30.0);
  const int p = world_size(o);
  if (p < 2) GTEST_SKIP() << "needs two ranks";
  for (int round = 0; round < 25; ++round) {
    EXPECT_THROW(comm::run(o,
                           [&](Group& g) {
                             // Every rank sends 4 bytes to every other rank on the tag the clean
                             // run uses; nobody receives them; the last rank fails.
                             const int32_t v = -1;
                             std::vector<Request> sends;
                             for (int q = 0; q < g.size(); ++q)
                               if (q != g.rank()) sends.push_back(g.isend(q, &v, 4, 0));
                             if (g.rank() == g.size() - 1) throw std::runtime_error("failed run");
                             g.barrier();
                           }),
                 RankFailed);
    comm::run(o, [&](Group& g) {
      const int me = g.rank();
      std::vector<int32_t> got(static_cast<size_t>(g.size()), -7);
      std::vector<Request> reqs;
      const int32_t mine = 1000 * round + me;
      for (int q = 0; q < g.size(); ++q) {
        if (q == me) continue;
        reqs.push_back(g.isend(q, &mine, 4, 0));
        reqs.push_back(g.irecv(q, &got[static_cast<size_t>(q)], 4, 0));
      }
      wait_all(reqs);
      for (int q = 0; q < g.size(); ++q) {
        if (q == me) continue;
        EXPECT_EQ(got[static_cast<size_t>(q)], 1000 * round + q) << "round " << round;
      }
    });
  }
}

// ---- the failure injected at each point (issue 20), both backends
// -------------------------------- Event-based: the failing rank throws only once its peers are
// inside the operation (they say so by a message to it, or by entering a collective it then never
// joins). Every rank must report the injected error, never a consequence of it (a dropped receive,
// a timed-out wait).

TEST_P(Failure, ThrowDuringACollectiveIsTheErrorEveryRankReports) {
  const Options o = options_for(GetParam(), 120.0);
  const int p = world_size(o);
  if (p < 2) GTEST_SKIP() << "needs two ranks";
  try {
    comm::run(o, [&](Group& g) {
      std::vector<double> x(1 << 14, 1.0);
      g.all_reduce(x.data(), x.data(), x.size(), core::DType::f64);  // one that completes
      if (g.rank() == p - 1) {
        // Wait until every peer is past the first collective, then fail instead of joining the
        // second, which the others are (or will be) blocked in.
        int32_t ready = 0;
        for (int q = 0; q < p - 1; ++q) g.irecv(q, &ready, 4, 31).wait();
        throw std::runtime_error("injected failure during the collective");
      }
      const int32_t ready = 1;
      g.isend(p - 1, &ready, 4, 31).wait();
      g.all_reduce(x.data(), x.data(), x.size(), core::DType::f64);
      ADD_FAILURE() << "the collective completed without rank " << p - 1;
    });
    ADD_FAILURE() << "run() returned normally";
  } catch (const RankFailed& e) {
    EXPECT_EQ(e.failed_rank(), p - 1) << e.what();
    EXPECT_TRUE(contains(e.what(), "injected failure during the collective")) << e.what();
  }
}

TEST_P(Failure, ThrowDuringAMatchedTransferIsTheErrorEveryRankReports) {
  // Rank 1 posts a large receive, tells rank 0, and throws once rank 0's matching send is posted
  // (rank 0 says so); the request is withdrawn while unwinding, with the transfer matched or in
  // flight. Rank 0's send then fails: it must report rank 1's error.
  const Options o = options_for(GetParam(), 120.0);
  const int p = world_size(o);
  if (p < 2) GTEST_SKIP() << "needs two ranks";
  for (int round = 0; round < 5; ++round) {
    try {
      comm::run(o, [&](Group& g) {
        const size_t n = 1 << 20;
        int32_t flag = 0;
        if (g.rank() == 1) {
          std::vector<float> buf(n);
          Request r = g.irecv(0, buf, 21);
          g.isend(0, &flag, 4, 22).wait();  // posted
          g.irecv(0, &flag, 4, 23).wait();  // rank 0's send is posted too
          throw std::runtime_error("injected failure during the transfer");
        }
        if (g.rank() == 0) {
          const std::vector<float> data(n, 2.f);
          g.irecv(1, &flag, 4, 22).wait();
          Request s = g.isend(1, data, 21);
          g.isend(1, &flag, 4, 23).wait();
          s.wait();
        }
        g.barrier();
      });
      ADD_FAILURE() << "run() returned normally";
    } catch (const RankFailed& e) {
      EXPECT_EQ(e.failed_rank(), 1) << e.what();
      EXPECT_TRUE(contains(e.what(), "injected failure during the transfer")) << e.what();
    }
  }
}

TEST_P(Failure, ASecondThrowWhileUnwindingDoesNotReplaceTheFirst) {
  // Rank 0 fails; rank 1, unwinding from the RankFailed its wait threw, throws again from a
  // destructor-time cleanup path (a wait on a request of the failed world) and then rethrows its
  // own error: the world's first failure stays rank 0's.
  const Options o = options_for(GetParam(), 120.0);
  const int p = world_size(o);
  if (p < 2) GTEST_SKIP() << "needs two ranks";
  try {
    comm::run(o, [&](Group& g) {
      int32_t x = 0;
      if (g.rank() == 0) {
        g.irecv(1, &x, 4, 41).wait();  // rank 1 has posted its receive
        throw std::runtime_error("the first failure, on rank 0");
      }
      if (g.rank() == 1) {
        Request r = g.irecv(0, &x, 4, 42);
        g.isend(0, &x, 4, 41).wait();
        try {
          r.wait();
        } catch (const RankFailed&) {
          throw std::runtime_error("rank 1's consequence while unwinding");
        }
      }
      g.barrier();
    });
    ADD_FAILURE() << "run() returned normally";
  } catch (const RankFailed& e) {
    EXPECT_EQ(e.failed_rank(), 0) << e.what();
    EXPECT_TRUE(contains(e.what(), "the first failure, on rank 0")) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Local, Failure, ::testing::ValuesIn(local_backends()), backend_label);
INSTANTIATE_TEST_SUITE_P(Mpi, Failure, ::testing::ValuesIn(mpi_backends()), backend_label);

// ---- local only: a peer that returned without posting its side --------------------------------

TEST(LocalFailure, PeerThatReturnedIsReportedAtOnce) {
  Options o;
  o.backend = "local";
  o.world = 2;
  o.timeout_s = 120;
  const double t0 = core::now_seconds();
  try {
    comm::run(o, [](Group& g) {
      if (g.rank() == 0) {
        float x;
        g.irecv(1, &x, 4, 4).wait();
      }
    });
    ADD_FAILURE() << "run() returned normally";
  } catch (const RankFailed& e) {
    EXPECT_EQ(e.failed_rank(), 0);
    EXPECT_TRUE(contains(e.what(), "rank 1 (tag 4), but that rank returned")) << e.what();
  }
  EXPECT_LT(core::now_seconds() - t0, 60.0);  // at once, not at the 120 s timeout
}

// A rank that unwinds an exception while its receive is matched but not yet copied: its peer
// must report that exception (the first failure), not "rank 1 dropped its receive", which is
// only its consequence (issue 20).
TEST(LocalFailure, DropWhileUnwindingReportsTheRealFailure) {
  Options o;
  o.backend = "local";
  o.world = 2;
  o.timeout_s = 30;
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> stage{0};
    try {
      comm::run(o, [&](Group& g) {
        float x = 0;
        if (g.rank() == 1) {
          struct Signal {  // destroyed after the request: the drop has happened by then
            std::atomic<int>& s;
            ~Signal() { s = 3; }
          } signal{stage};
          Request r = g.irecv(0, &x, 4, 9);
          stage = 1;
          while (stage.load() < 2) std::this_thread::yield();  // rank 0 has posted: matched
          throw std::runtime_error("the real failure");
        }
        while (stage.load() < 1) std::this_thread::yield();
        Request s = g.isend(1, &x, 4, 9);
        stage = 2;
        while (stage.load() < 3) std::this_thread::yield();
        s.wait();
      });
      ADD_FAILURE() << "run() returned normally";
    } catch (const RankFailed& e) {
      EXPECT_EQ(e.failed_rank(), 1) << e.what();
      EXPECT_TRUE(contains(e.what(), "the real failure")) << e.what();
    }
  }
}

TEST(LocalFailure, NonStandardExceptionIsReported) {
  Options o;
  o.backend = "local";
  o.world = 3;
  try {
    comm::run(o, [](Group& g) {
      if (g.rank() == 1) throw 42;
      g.barrier();
    });
    ADD_FAILURE() << "run() returned normally";
  } catch (const RankFailed& e) {
    EXPECT_EQ(e.failed_rank(), 1);
    EXPECT_TRUE(contains(e.what(), "unknown exception")) << e.what();
  }
}

TEST(LocalFailure, BadWorldAndNodesAreUserErrors) {
  Options o;
  o.backend = "local";
  o.world = 8;
  o.nodes = 3;
  try {
    comm::run(o, [](Group&) {});
    ADD_FAILURE() << "no throw";
  } catch (const core::Error& e) {
    EXPECT_TRUE(contains(e.what(), "--nodes 3 must divide world 8")) << e.what();
  }
  o.nodes = 0;
  o.world = -2;
  EXPECT_THROW(comm::run(o, [](Group&) {}), core::Error);
}

}  // namespace
}  // namespace longseq::comm::testing
