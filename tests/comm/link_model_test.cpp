// The local backend's link model: parsing, and the delay it imposes as a ratio within tolerance.
#include "longseq/comm/link_model.hpp"

#include <time.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "comm/comm_case.hpp"
#include "longseq/core/timer.hpp"

namespace longseq::comm::testing {
namespace {

TEST(LinkModelParse, UnitsAndClasses) {
  const LinkModel m = LinkModel::parse("intra=2us,100GB/s:inter=1.5ms,12.5Gb/s");
  EXPECT_DOUBLE_EQ(m.intra.latency_s, 2e-6);
  EXPECT_DOUBLE_EQ(m.intra.bandwidth_Bps, 100e9);
  EXPECT_DOUBLE_EQ(m.inter.latency_s, 1.5e-3);
  EXPECT_DOUBLE_EQ(m.inter.bandwidth_Bps, 12.5e9 / 8);
  EXPECT_TRUE(m.enabled());
  EXPECT_DOUBLE_EQ(parse_bandwidth("1GiB/s"), 1073741824.0);
  EXPECT_DOUBLE_EQ(parse_bandwidth("inf"), 0.0);
  EXPECT_DOUBLE_EQ(parse_duration("250ns"), 250e-9);
  EXPECT_DOUBLE_EQ(parse_duration("0.5"), 0.5);
  const LinkModel only = LinkModel::parse("inter=10us,1GB/s");
  EXPECT_TRUE(only.intra.is_free());
  EXPECT_FALSE(LinkModel::parse("none").enabled());
  EXPECT_FALSE(LinkModel::parse("").enabled());
  // str() round-trips.
  const LinkModel again = LinkModel::parse(m.str());
  EXPECT_DOUBLE_EQ(again.inter.latency_s, m.inter.latency_s);
  EXPECT_NEAR(again.inter.bandwidth_Bps, m.inter.bandwidth_Bps, 1.0);
}

TEST(LinkModelParse, ErrorsNameTheText) {
  for (const char* bad : {"intra=5us", "inter=5parsecs,1GB/s", "intra=5us,10GB", "outer=1us,1GB/s",
                          "intra=1us,1GB/s:intra=2us,1GB/s", "intra=-1us,1GB/s"}) {
    try {
      LinkModel::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const core::Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[comm]", 0), 0u) << e.what();
    }
  }
}

/// Runs 2 local ranks on `nodes` nodes; rank 0 sends `msgs` messages of `bytes` to rank 1 at once;
/// returns the wall time from rank 0's first post to rank 1's completion (the model's clock starts
/// at the send), and rank 1's CPU time spent posting and waiting.
std::pair<double, double> timed_transfer(const LinkModel& link, int nodes, size_t bytes, int msgs) {
  Options o;
  o.backend = "local";
  o.world = 2;
  o.nodes = nodes;
  o.link = link;
  std::atomic<double> t_send{0.0};
  double t_done = 0.0, cpu = 0.0;
  comm::run(o, [&](Group& g) {
    std::vector<std::vector<uint8_t>> bufs(static_cast<size_t>(msgs), std::vector<uint8_t>(bytes));
    g.barrier();
    std::vector<Request> reqs;
    if (g.rank() == 0) t_send = core::now_seconds();
    const double c0 = core::thread_cpu_seconds();
    for (auto& b : bufs) reqs.push_back(g.rank() == 0 ? g.isend(1, b, 0) : g.irecv(0, b, 0));
    wait_all(reqs);
    if (g.rank() == 1) {
      t_done = core::now_seconds();
      cpu = core::thread_cpu_seconds() - c0;
    }
  });
  return {t_done - t_send.load(), cpu};
}

/// The measured time may exceed the model only by scheduling noise: 25% plus 20 ms (the tests
/// share two cores with the rest of the suite).
void expect_modelled(double wall, double expected) {
  EXPECT_GE(wall / expected, 1.0 - 1e-3) << "completed before the modelled time";
  EXPECT_LE(wall, 1.25 * expected + 0.020) << wall << " s for a modelled " << expected << " s";
}

TEST(LinkModelDelay, OneSendTakesLatencyPlusBytesOverBandwidth) {
  // inter: 40 ms + 1 MB / 16.7 MB/s = 100 ms. intra: free.
  const LinkModel m = LinkModel::parse("inter=40ms,16.666666MB/s");
  const double expected = 0.040 + 1e6 / 16.666666e6;
  const auto [wall, cpu] = timed_transfer(m, /*nodes=*/2, 1000000, 1);
  expect_modelled(wall, expected);
  // The model sleeps: the waiting rank burns a small fraction of the wall time.
  EXPECT_LT(cpu, 0.25 * wall) << "cpu " << cpu << " s while waiting " << wall << " s";
  // Same ranks on one node: the intra class is free, so no delay.
  const auto [wall_intra, cpu_intra] = timed_transfer(m, /*nodes=*/1, 1000000, 1);
  (void)cpu_intra;
  EXPECT_LT(wall_intra, 0.25 * expected);
}

TEST(LinkModelDelay, OneTransferAtATimePerLink) {
  // Four messages on one link are serialised: 4 x (10 ms + 20 ms).
  const LinkModel m = LinkModel::parse("intra=10ms,10MB/s");
  const double expected = 4 * (0.010 + 200000 / 10e6);
  const auto [wall, cpu] = timed_transfer(m, 1, 200000, 4);
  (void)cpu;
  expect_modelled(wall, expected);
}

TEST(LinkModelDelay, DifferentLinksRunConcurrently) {
  // Rank 0 sends to ranks 1 and 2 at once: two links, so both finish after one transfer time.
  Options o;
  o.backend = "local";
  o.world = 3;
  o.link = LinkModel::parse("intra=20ms,10MB/s");  // 20 ms + 0.5 MB / 10 MB/s = 70 ms
  const double expected = 0.020 + 500000 / 10e6;
  comm::run(o, [&](Group& g) {
    std::vector<uint8_t> a(500000), b(500000);
    g.barrier();
    const double t0 = core::now_seconds();
    if (g.rank() == 0) {
      std::vector<Request> reqs = {g.isend(1, a), g.isend(2, b)};
      wait_all(reqs);
      expect_modelled(core::now_seconds() - t0, expected);
    } else {
      g.irecv(0, a).wait();
    }
  });
}

TEST(LinkModelDelay, ComputeOverlapsTheModelledTransfer) {
  // Post, compute 150 ms, wait: the 100 ms transfer hides behind the compute.
  Options o;
  o.backend = "local";
  o.world = 2;
  o.nodes = 2;
  o.link = LinkModel::parse("inter=50ms,20MB/s");  // 50 ms + 1 MB / 20 MB/s = 100 ms
  comm::run(o, [&](Group& g) {
    std::vector<uint8_t> buf(1000000);
    g.barrier();
    const double t0 = core::now_seconds();
    Request r = g.rank() == 0 ? g.isend(1, buf) : g.irecv(0, buf);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    r.wait();
    const double total = core::now_seconds() - t0;
    EXPECT_LT(total, 0.150 + 0.040) << "rank " << g.rank() << ": the transfer did not overlap";
  });
}

}  // namespace
}  // namespace longseq::comm::testing
