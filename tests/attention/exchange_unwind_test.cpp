// attention/subring Exchange: a rank that throws while transfers are posted unwinds through
// ~Exchange, whose waits then fail because the world failed. Those failures must stay inside the
// destructor (issue 20: they escaped it during unwinding and ended the process in std::terminate)
// and run() must report the world's first failure.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "longseq/attention/subring.hpp"
#include "longseq/comm/launch.hpp"

namespace {

namespace at = longseq::attention;
namespace comm = longseq::comm;

TEST(ExchangeUnwind, FailedWaitsInTheDestructorDoNotTerminateAndTheFirstErrorIsReported) {
  comm::Options o;
  o.backend = "local";
  o.world = 2;
  o.timeout_s = 60;
  std::string what = "run() returned normally";
  try {
    comm::run_local(o, [&](comm::Group& g) {
      if (g.rank() == 1) throw std::runtime_error("first failure on rank 1");
      float x[4] = {};
      at::detail::Exchange ex(g);
      ex.recv(x, 4, 1, 7);  // rank 1 never sends: this wait can only end by the world failing
      throw std::runtime_error("rank 0 unwinds with a receive posted");
    });
  } catch (const comm::RankFailed& e) {
    what = e.what();
    EXPECT_EQ(e.failed_rank(), 1) << what;
  }
  EXPECT_NE(what.find("first failure on rank 1"), std::string::npos) << what;
}

}  // namespace
