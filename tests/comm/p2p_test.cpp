// Point to point, grouped exchanges, split and topology helpers, byte accounting.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <string>
#include <thread>

#include "comm/comm_case.hpp"
#include "longseq/comm/group_impl.hpp"
#include "longseq/core/timer.hpp"

namespace longseq::comm::testing {
namespace {

class PointToPoint : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override { LONGSEQ_SKIP_UNLESS_RUNNABLE(GetParam()); }
  void run(const std::function<void(Group&)>& fn, int nodes = -1) {
    Options o = options_for(GetParam());
    if (nodes >= 0) o.nodes = nodes;
    comm::run(o, fn);
  }
};

TEST_P(PointToPoint, RanksAreDistinctAndSizeIsTheWorld) {
  run([&](Group& g) {
    if (GetParam().world > 0) {
      EXPECT_EQ(g.size(), GetParam().world);
    }
    EXPECT_EQ(g.backend(), GetParam().name);
    std::vector<int32_t> ranks(static_cast<size_t>(g.size()));
    const int32_t mine = g.rank();
    g.all_gather(&mine, ranks.data(), 1, core::DType::i32);
    for (int q = 0; q < g.size(); ++q) EXPECT_EQ(ranks[static_cast<size_t>(q)], q);
  });
}

TEST_P(PointToPoint, TagsTellApartTransfersBetweenOnePair) {
  run([](Group& g) {
    const int p = g.size(), r = g.rank();
    const size_t n = 1000;
    // K (tag 0) and V (tag 1) to the next rank; the receives are posted in the opposite order
    // and a second K message with tag 0 checks the non-overtaking order within one tag.
    const auto k1 = rank_data<float>(71, r, n), v = rank_data<float>(72, r, n + 5);
    const auto k2 = rank_data<float>(73, r, n);
    std::vector<float> rk1(n), rv(n + 5), rk2(n);
    std::vector<Request> reqs;
    reqs.push_back(g.irecv(g.ring_prev(), rv, 1));
    reqs.push_back(g.irecv(g.ring_prev(), rk1, 0));
    reqs.push_back(g.irecv(g.ring_prev(), rk2, 0));
    reqs.push_back(g.isend(g.ring_next(), k1, 0));
    reqs.push_back(g.isend(g.ring_next(), v, 1));
    reqs.push_back(g.isend(g.ring_next(), k2, 0));
    wait_all(reqs);
    const int prev = (r + p - 1) % p;
    EXPECT_TRUE(bits_equal(rk1, rank_data<float>(71, prev, n)));
    EXPECT_TRUE(bits_equal(rv, rank_data<float>(72, prev, n + 5)));
    EXPECT_TRUE(bits_equal(rk2, rank_data<float>(73, prev, n)));
  });
}

TEST_P(PointToPoint, GroupedExchangeWithEveryPeerCannotDeadlock) {
  run([](Group& g) {
    // Every rank sends 64 KiB to every rank (itself included) in one step: with blocking sends
    // posted in this order every rank would wait on its first peer forever.
    const int p = g.size(), r = g.rank();
    const size_t n = 16384;
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(p)), in(static_cast<size_t>(p));
    std::vector<SendSpec> sends;
    std::vector<RecvSpec> recvs;
    for (int q = 0; q < p; ++q) {
      out[static_cast<size_t>(q)] = rank_data<int32_t>(81 + static_cast<uint64_t>(q), r, n);
      in[static_cast<size_t>(q)].resize(n);
      sends.push_back({q, out[static_cast<size_t>(q)].data(), n * 4, 7});
      recvs.push_back({q, in[static_cast<size_t>(q)].data(), n * 4, 7});
    }
    g.exchange(sends, recvs);
    for (int q = 0; q < p; ++q)
      EXPECT_TRUE(bits_equal(in[static_cast<size_t>(q)],
                             rank_data<int32_t>(81 + static_cast<uint64_t>(r), q, n)))
          << "from " << q << " on " << r;
  });
}

TEST_P(PointToPoint, TestPollsToCompletion) {
  run([](Group& g) {
    if (g.size() < 2) return;
    const size_t n = 1 << 16;
    if (g.rank() == 0) {
      const auto d = rank_data<float>(91, 0, n);
      Request s = g.isend(1, d);
      while (!s.test()) std::this_thread::yield();
    } else if (g.rank() == 1) {
      std::vector<float> d(n);
      Request q = g.irecv(0, d);
      while (!q.test()) std::this_thread::yield();
      EXPECT_TRUE(q.test());  // stays complete
      EXPECT_TRUE(bits_equal(d, rank_data<float>(91, 0, n)));
    }
  });
}

TEST_P(PointToPoint, TransfersProgressWhileTheRankComputes) {
  run([](Group& g) {
    if (g.size() < 2 || g.rank() > 1) return;
    // 8 MiB (rendezvous size under MPI). Both ranks post, then "compute" without calling into
    // comm. Under MPI the progress threads move the data meanwhile (without them a rendezvous
    // needs both sides inside MPI calls, so it could never finish while both compute).
    //
    // No time bound decides it: the previous form asserted completion after a fixed 300 ms of
    // compute, and under load (ctest -j16 on 16 cores, or this machine's 2 cores oversubscribed
    // 4x) the processes are not scheduled within 300 ms, so it failed without any fault in
    // comm (issue 28: the comm_mpi_np4 flake, reproduced here 5 of 5 times beside 6 busy
    // loops). Now the receiver watches its own buffer (plain memory reads, no comm call) until
    // the data is there, then tells the sender through a file; the sender computes until it sees
    // the file. Both stop computing only once the data has moved, and only a stalled transfer
    // runs into the 120 s limit.
    const size_t n = 2u << 20;
    std::vector<float> buf(n);
    const std::vector<float> want = rank_data<float>(92, 0, n);
    if (g.rank() == 0) buf = want;
    if (g.backend() != "local") {
      // A marker path both ranks agree on (rank 0's pid, sent before the measured part).
      int64_t pid = g.rank() == 0 ? static_cast<int64_t>(::getpid()) : 0;
      if (g.rank() == 0)
        g.send(1, &pid, sizeof pid, 7);
      else
        g.recv(0, &pid, sizeof pid, 7);
      const std::string marker = "/tmp/longseq_p2p_progress_" + std::to_string(pid) + ".done";
      Request r = g.rank() == 0 ? g.isend(1, buf) : g.irecv(0, buf);
      const double t0 = core::now_seconds();
      bool moved = false;
      while (!moved && core::now_seconds() - t0 < 120.0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // "compute"
        if (g.rank() == 1) {
          // The progress thread writes buf concurrently; a relaxed element-wise read is enough
          // to see when it is complete (the request's wait below orders the final check).
          moved = true;
          for (size_t i = 0; i < n && moved; i += 997)
            moved = std::atomic_ref<float>(buf[i]).load(std::memory_order_relaxed) == want[i];
          moved = moved &&
                  std::atomic_ref<float>(buf[n - 1]).load(std::memory_order_relaxed) == want[n - 1];
          if (moved) std::ofstream(marker) << "done\n";
        } else {
          moved = std::filesystem::exists(marker);
        }
      }
      EXPECT_TRUE(moved) << "rank " << g.rank()
                         << ": 8 MiB not moved within 120 s while both ranks computed";
      r.wait();
      if (g.rank() == 0) std::filesystem::remove(marker);
    } else {
      // Local: the first waiter copies, so the wait is one memcpy; its bound is timed in this
      // build with a margin for a loaded 2-core machine, far below the 300 ms a stall would add.
      Request r = g.rank() == 0 ? g.isend(1, buf) : g.irecv(0, buf);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const double t0 = core::now_seconds();
      r.wait();
      const double waited = core::now_seconds() - t0;
      std::vector<float> scratch(n);
      core::Timer copy;
      std::memcpy(scratch.data(), buf.data(), n * sizeof(float));
      EXPECT_LT(waited, 3 * copy.elapsed() + 0.2)
          << "rank " << g.rank() << " waited " << waited << " s after compute";
    }
    if (g.rank() == 1) {
      EXPECT_TRUE(bits_equal(buf, want));
    }
  });
}

TEST_P(PointToPoint, ThreadsOfOneRankPostAndWaitAtOnce) {
  // Several threads of each rank exchange around the ring at once, on their own tags, with
  // sizes from eager to rendezvous under MPI, while one more thread streams 64 messages on a
  // single tag without waiting in between (10 rounds). Under MPI the threads take turns making MPI
  // calls (posting directly, or queueing for whoever polls next, and driving their own waits), so
  // this checks that no message is lost or mixed up between threads and that one thread's
  // messages on one tag still arrive in the order it posted them.
  run([](Group& g) {
    const int p = g.size(), r = g.rank();
    if (p < 2) return;
    const int prev = (r + p - 1) % p;
    constexpr int kThreads = 3, kIters = 40, kStream = 64, kRounds = 10;
    std::vector<std::string> errors(kThreads + 1);
    auto exchanger = [&](int t) {
      try {
        for (int it = 0; it < kIters; ++it) {
          const size_t n = size_t{256} << ((it + t) % 11);  // 1 KiB .. 1 MiB of floats
          const uint64_t seed = 1000 + static_cast<uint64_t>(t * kIters + it);
          const auto mine = rank_data<float>(seed, r, n);
          std::vector<float> got(n);
          const SendSpec s{g.ring_next(), mine.data(), n * sizeof(float), t};
          const RecvSpec rv{prev, got.data(), n * sizeof(float), t};
          g.exchange({&s, 1}, {&rv, 1});
          if (!bits_equal(got, rank_data<float>(seed, prev, n))) {
            errors[static_cast<size_t>(t)] =
                core::cat("thread ", t, " iteration ", it, ": wrong data from rank ", prev);
            return;
          }
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    };
    auto stream_once = [&](int round) {
      std::vector<std::vector<int32_t>> out(kStream), in(kStream);
      std::vector<Request> reqs;
      for (int k = 0; k < kStream; ++k) {
        const size_t n = size_t{16} << (k % 8);
        out[static_cast<size_t>(k)].assign(n, r * 100000 + round * 1000 + k);
        in[static_cast<size_t>(k)].assign(n, -1);
        reqs.push_back(g.irecv(prev, in[static_cast<size_t>(k)], kThreads));
      }
      for (int k = 0; k < kStream; ++k)
        reqs.push_back(g.isend(g.ring_next(), out[static_cast<size_t>(k)], kThreads));
      wait_all(reqs);
      for (int k = 0; k < kStream; ++k)
        for (int32_t v : in[static_cast<size_t>(k)])
          if (v != prev * 100000 + round * 1000 + k) {
            errors[kThreads] = core::cat("round ", round, ": stream message ", k, " holds ", v,
                                         " (want ", prev * 100000 + round * 1000 + k, ")");
            return;
          }
    };
    auto streamer = [&] {
      try {
        for (int round = 0; round < kRounds && errors[kThreads].empty(); ++round)
          stream_once(round);
      } catch (const std::exception& e) {
        errors[kThreads] = e.what();
      }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(exchanger, t);
    threads.emplace_back(streamer);
    for (auto& th : threads) th.join();
    for (size_t t = 0; t < errors.size(); ++t)
      EXPECT_EQ(errors[t], "") << "rank " << r << " thread " << t;
  });
}

TEST_P(PointToPoint, SplitFollowsMpiCommSplit) {
  run([](Group& g) {
    const int p = g.size(), r = g.rank();
    // Two colors by parity, keys reverse the order; rank 2 opts out (kUndefined).
    const int color = r == 2 ? Group::kUndefined : r % 2;
    Group sub = g.split(color, -r);
    if (r == 2) {
      EXPECT_FALSE(sub.valid());
    } else {
      ASSERT_TRUE(sub.valid());
      std::vector<int> members;
      for (int q = p - 1; q >= 0; --q)
        if (q != 2 && q % 2 == r % 2) members.push_back(q);
      ASSERT_EQ(sub.size(), static_cast<int>(members.size()));
      EXPECT_EQ(members[static_cast<size_t>(sub.rank())], r);
      // The sub-group talks only to its members: sum of parent ranks.
      int64_t x = r;
      sub.all_reduce(&x, &x, 1, core::DType::i64);
      EXPECT_EQ(x, std::accumulate(members.begin(), members.end(), int64_t{0}));
      // Same tag, same pair on parent and child: the messages do not mix.
      if (sub.size() >= 2) {
        const int32_t a = 1000 + r, b = 2000 + r;
        int32_t ra = 0, rb = 0;
        const int sub_next = sub.ring_next(), sub_prev = sub.ring_prev();
        const int parent_next = members[static_cast<size_t>(sub_next)];
        const int parent_prev = members[static_cast<size_t>(sub_prev)];
        std::vector<Request> reqs;
        reqs.push_back(g.irecv(parent_prev, &ra, 4, 5));
        reqs.push_back(sub.irecv(sub_prev, &rb, 4, 5));
        reqs.push_back(sub.isend(sub_next, &b, 4, 5));
        reqs.push_back(g.isend(parent_next, &a, 4, 5));
        wait_all(reqs);
        EXPECT_EQ(ra, 1000 + parent_prev);
        EXPECT_EQ(rb, 2000 + parent_prev);
      }
      // Nested split: halves of the sub-group.
      Group half = sub.split(sub.rank() < sub.size() / 2 ? 0 : 1, sub.rank());
      int64_t one = 1;
      half.all_reduce(&one, &one, 1, core::DType::i64);
      EXPECT_EQ(one, half.size());
    }
    g.barrier();
  });
}

TEST_P(PointToPoint, TopologyHelpers) {
  // Declared nodes (local: the parameter; MPI: 2 when they divide the world, else real).
  const Backend b = GetParam();
  const int world = b.name == "mpi" ? world_size(options_for(b)) : b.world;
  const int nodes = b.name == "mpi" ? (world % 2 == 0 ? 2 : 0) : b.nodes;
  run(
      [&](Group& g) {
        const Topology& t = g.topology();
        const int p = g.size(), r = g.rank();
        ASSERT_EQ(t.size(), p);
        if (nodes > 0) {
          ASSERT_EQ(t.num_nodes(), nodes);
          for (int q = 0; q < p; ++q) EXPECT_EQ(t.node(q), q / (p / nodes));
        }
        EXPECT_EQ(g.ring_next(), (r + 1) % p);
        EXPECT_EQ(g.ring_prev(), (r + p - 1) % p);
        EXPECT_EQ(g.ring_next(p + 2), (r + 2) % p);
        Group intra = g.intra_group();
        Group inter = g.inter_group();
        EXPECT_EQ(intra.size(), t.local_size(r));
        EXPECT_EQ(intra.rank(), t.local_rank(r));
        EXPECT_EQ(intra.topology().num_nodes(), 1);
        EXPECT_EQ(inter.size(), t.num_nodes());
        EXPECT_EQ(inter.rank(), t.node(r));
        EXPECT_EQ(inter.topology().num_nodes(), t.num_nodes());
        // Cached: a second call returns the same communicator without a collective.
        EXPECT_EQ(&g.intra_group().impl(), &intra.impl());
        // Members: sum of parent ranks over each sub-group.
        int64_t x = r, y = r;
        intra.all_reduce(&x, &x, 1, core::DType::i64);
        inter.all_reduce(&y, &y, 1, core::DType::i64);
        int64_t want_x = 0, want_y = 0;
        for (int q = 0; q < p; ++q) {
          if (t.same_node(q, r)) want_x += q;
          if (t.local_rank(q) == t.local_rank(r)) want_y += q;
        }
        EXPECT_EQ(x, want_x);
        EXPECT_EQ(y, want_y);
      },
      nodes);
}

// ---- byte accounting ---------------------------------------------------------------------------

TEST_P(PointToPoint, ByteCountsAreExact) {
  const Backend b = GetParam();
  const int world = b.name == "mpi" ? world_size(options_for(b)) : b.world;
  const int nodes = b.name == "mpi" ? (world % 2 == 0 ? 2 : 0) : b.nodes;
  run(
      [&](Group& g) {
        const int p = g.size(), r = g.rank();
        const Topology& t = g.topology();
        const int next = g.ring_next(), prev = g.ring_prev();
        const bool next_intra = t.same_node(r, next), prev_intra = t.same_node(r, prev);
        Stats s = g.stats();
        EXPECT_EQ(s.bytes_sent(), 0u);
        EXPECT_EQ(s.rank, r);
        EXPECT_EQ(s.node, t.node(r));

        // 1. p2p: 1000 bytes + 24 bytes to next (two messages), a self-send (not counted).
        std::vector<uint8_t> a(1000), b2(24), ra(1000), rb(24), self(8), rself(8);
        std::vector<Request> reqs;
        reqs.push_back(g.irecv(prev, ra, 0));
        reqs.push_back(g.irecv(prev, rb, 1));
        reqs.push_back(g.irecv(r, rself, 2));
        reqs.push_back(g.isend(next, a, 0));
        reqs.push_back(g.isend(next, b2, 1));
        reqs.push_back(g.isend(r, self, 2));
        wait_all(reqs);
        s = g.stats();
        const uint64_t p2p = p > 1 ? 1024 : 0, msgs = p > 1 ? 2 : 0;
        EXPECT_EQ(s.sent_intra.bytes, next_intra ? p2p : 0);
        EXPECT_EQ(s.sent_inter.bytes, next_intra ? 0 : p2p);
        EXPECT_EQ(s.sent_intra.messages + s.sent_inter.messages, msgs);
        EXPECT_EQ(s.recv_intra.bytes, prev_intra ? p2p : 0);
        EXPECT_EQ(s.recv_inter.bytes, prev_intra ? 0 : p2p);

        // 2. all_gather of 100 floats: ring, P-1 messages of 400 bytes to next.
        g.reset_stats();
        std::vector<float> in(100, 1.f), out(100 * static_cast<size_t>(p));
        g.all_gather(in, out);
        s = g.stats();
        const uint64_t ag = 400ull * static_cast<uint64_t>(p - 1);
        EXPECT_EQ(s.sent_intra.bytes, next_intra ? ag : 0);
        EXPECT_EQ(s.sent_inter.bytes, next_intra ? 0 : ag);
        EXPECT_EQ(s.messages_sent(), static_cast<uint64_t>(p - 1));

        // 3. all_reduce of 1003 i64: blocks of floor/ceil(1003/P); RS sends every block but
        // block r+1... exactly: rank r sends blocks r-s-1 (RS) and r-s (AG), s = 0..P-2.
        g.reset_stats();
        std::vector<int64_t> x(1003, 1);
        g.all_reduce(x);
        EXPECT_EQ(x[0], p);
        s = g.stats();
        uint64_t want = 0, want_msgs = 0;
        auto block = [&](int q) {
          const auto qq = static_cast<uint64_t>((q % p + p) % p);
          return (1003 * (qq + 1) / static_cast<uint64_t>(p) -
                  1003 * qq / static_cast<uint64_t>(p)) *
                 8;
        };
        for (int st = 0; st < p - 1; ++st) {
          want += block(r - st - 1) + block(r - st);
          want_msgs += (block(r - st - 1) > 0) + (block(r - st) > 0);
        }
        EXPECT_EQ(s.bytes_sent(), want);
        EXPECT_EQ(s.messages_sent(), want_msgs);
        EXPECT_EQ(next_intra ? s.sent_inter.bytes : s.sent_intra.bytes, 0u);

        // 4. rank_stats sums every group of the rank (here the world and its intra group);
        // gather_stats does not count its own traffic.
        g.reset_stats();
        g.reset_rank_stats();
        Group intra = g.intra_group();  // the split itself: an all_gather of 24 bytes
        const Stats after_split = g.stats();
        intra.reset_stats();
        std::vector<float> iv(10, 2.f), io(10 * static_cast<size_t>(intra.size()));
        intra.all_gather(iv, io);
        const Stats si = intra.stats();
        EXPECT_EQ(si.sent_inter.bytes, 0u);
        EXPECT_EQ(si.sent_intra.bytes, 40ull * static_cast<uint64_t>(intra.size() - 1));
        const Stats total = g.rank_stats();
        EXPECT_EQ(total.bytes_sent(), after_split.bytes_sent() + si.bytes_sent());
        const std::vector<Stats> all = g.gather_stats();
        ASSERT_EQ(all.size(), static_cast<size_t>(p));
        EXPECT_EQ(all[static_cast<size_t>(r)].bytes_sent(), after_split.bytes_sent());
        EXPECT_EQ(g.stats().bytes_sent(), after_split.bytes_sent())
            << "gather_stats counted itself";
        const nlohmann::json j = stats_to_json(all);
        EXPECT_EQ(j["ranks"].size(), static_cast<size_t>(p));
        uint64_t sum = 0;
        for (const Stats& st : all) sum += st.bytes_sent();
        EXPECT_EQ(j["total"]["bytes"].get<uint64_t>(), sum);
        EXPECT_EQ(all[0].to_json()["sent"]["intra"]["bytes"].get<uint64_t>(),
                  all[0].sent_intra.bytes);
      },
      nodes);
}

TEST_P(PointToPoint, TransfersAboveTheChunkLimitAreSplitInOrderAndCountedOnce) {
  // The MPI backend splits at 4 KiB here (1 GiB by default; the 2.5 GiB transfer is
  // BigMessage.*). Sizes around the limit: chunks and a remainder, an exact multiple (an empty
  // final message), just below, empty, small; all on one tag, so any chunk taken by the wrong
  // receive shows as a size mismatch or wrong bytes. The local backend has no limit and must
  // pass the same checks.
  constexpr size_t kChunk = 4096;
  const ChunkLimitScope limit(GetParam(), kChunk);
  run([&](Group& g) {
    const int p = g.size(), r = g.rank(), prev = g.ring_prev();
    const std::vector<size_t> sizes = {3 * kChunk + 100, 2 * kChunk, kChunk - 1, 0, 7};
    const bool mpi = g.backend() == "mpi";
    g.reset_stats();
    const uint64_t mpi_before = mpi ? mpi_data_messages_sent() : 0;

    // 1. isend/irecv: posted in order, waited for in reverse order.
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<Request> reqs;
    for (size_t i = 0; i < sizes.size(); ++i) {
      out.push_back(rank_data<uint8_t>(101 + i, r, sizes[i]));
      in.emplace_back(sizes[i]);
      reqs.push_back(g.irecv(prev, in[i], 5));
    }
    for (size_t i = 0; i < sizes.size(); ++i) reqs.push_back(g.isend(g.ring_next(), out[i], 5));
    std::reverse(reqs.begin(), reqs.end());
    wait_all(reqs);
    uint64_t total = 0, mpi_messages = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_TRUE(bits_equal(in[i], rank_data<uint8_t>(101 + i, prev, sizes[i])))
          << "message " << i << " of " << sizes[i] << " bytes on rank " << r;
      total += sizes[i];
      mpi_messages += sizes[i] / kChunk + 1;
    }
    // Stats count each transfer once, whatever it took on the wire.
    const Stats s = g.stats();
    EXPECT_EQ(s.messages_sent(), p > 1 ? sizes.size() : 0u);
    EXPECT_EQ(s.bytes_sent(), p > 1 ? total : 0u);
    EXPECT_EQ(s.bytes_received(), p > 1 ? total : 0u);
    if (mpi) {
      EXPECT_EQ(mpi_data_messages_sent() - mpi_before, mpi_messages)
          << "the transfers were not split at " << kChunk << " bytes";
    }

    // 2. A grouped step with sends and receives both ways (posted as one batch under MPI).
    const size_t n = 2 * kChunk + 1;
    const auto to_next = rank_data<uint8_t>(111, r, n), to_prev = rank_data<uint8_t>(112, r, n);
    std::vector<uint8_t> from_prev(n), from_next(n);
    const SendSpec sends[] = {{g.ring_next(), to_next.data(), n, 6}, {prev, to_prev.data(), n, 7}};
    const RecvSpec recvs[] = {{prev, from_prev.data(), n, 6},
                              {g.ring_next(), from_next.data(), n, 7}};
    g.exchange(sends, recvs);
    EXPECT_TRUE(bits_equal(from_prev, rank_data<uint8_t>(111, prev, n)));
    EXPECT_TRUE(bits_equal(from_next, rank_data<uint8_t>(112, g.ring_next(), n)));

    // 3. A collective whose ring messages are split.
    const size_t m = 3 * kChunk + 5;
    const auto mine = rank_data<uint8_t>(113, r, m);
    std::vector<uint8_t> all(m * static_cast<size_t>(p));
    g.all_gather(mine.data(), all.data(), m, core::DType::u8);
    for (int q = 0; q < p; ++q) {
      const std::vector<uint8_t> block(all.begin() + static_cast<ptrdiff_t>(m) * q,
                                       all.begin() + static_cast<ptrdiff_t>(m) * (q + 1));
      EXPECT_TRUE(bits_equal(block, rank_data<uint8_t>(113, q, m))) << "block " << q;
    }
  });
}

TEST_P(PointToPoint, GroupOfOneDoesNoCommunication) {
  run([](Group& g) {
    Group solo = g.split(g.rank(), 0);
    ASSERT_EQ(solo.size(), 1);
    solo.reset_stats();
    std::vector<float> x = rank_data<float>(5, g.rank(), 64), y(64);
    const std::vector<float> orig = x;
    solo.all_reduce(x);  // in place: nothing at all to do
    EXPECT_TRUE(bits_equal(x, orig));
    solo.all_gather(x, y);
    EXPECT_TRUE(bits_equal(y, orig));
    solo.reduce_scatter(x, y);
    solo.broadcast(x, 0);
    solo.barrier();
    std::vector<float> z(64);
    solo.all_to_all(x, z);
    EXPECT_TRUE(bits_equal(z, orig));
    EXPECT_EQ(solo.stats().messages_sent(), 0u);
    EXPECT_EQ(solo.stats().bytes_received(), 0u);
  });
}

TEST_P(PointToPoint, InvalidArgumentsNameTheValues) {
  run([](Group& g) {
    float x = 0;
    try {
      g.isend(g.size(), &x, 4);
      ADD_FAILURE() << "no throw";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(g.size())), std::string::npos);
    }
    EXPECT_THROW(g.irecv(0, &x, 4, kMaxTag), core::Error);
    EXPECT_THROW(g.irecv(0, &x, 4, -1), core::Error);
    EXPECT_THROW(g.broadcast(&x, 1, core::DType::f32, g.size()), core::Error);
  });
}

INSTANTIATE_TEST_SUITE_P(Local, PointToPoint, ::testing::ValuesIn(local_backends()), backend_label);
INSTANTIATE_TEST_SUITE_P(Mpi, PointToPoint, ::testing::ValuesIn(mpi_backends()), backend_label);

}  // namespace
}  // namespace longseq::comm::testing
