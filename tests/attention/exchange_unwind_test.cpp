// A rank that throws while another rank's attention has transfers posted: the waiting rank's
// waits fail because the world failed, it unwinds through the executor with requests pending
// (issue 20: failures escaping destructors during unwinding ended the process in
// std::terminate), and run() reports the world's first failure.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "longseq/attention/distributed.hpp"
#include "longseq/comm/launch.hpp"

namespace {

namespace at = longseq::attention;
namespace comm = longseq::comm;
namespace core = longseq::core;

TEST(ExchangeUnwind, FailedWaitsInTheExecutorDoNotTerminateAndTheFirstErrorIsReported) {
  for (const char* algo : {"burst", "startrail:2", "ulysses"}) {
    SCOPED_TRACE(algo);
    comm::Options o;
    o.backend = "local";
    o.world = 4;
    o.timeout_s = 60;
    std::string what = "run() returned normally";
    try {
      comm::run_local(o, [&](comm::Group& g) {
        if (g.rank() == 1) throw std::runtime_error("first failure on rank 1");
        const at::Layout layout(at::Balance::zigzag, 16, 4);
        std::vector<float> x(4 * 4 * 8, 1.0f);
        const core::View<const float> v(x.data(), core::Shape{4, 4, 8});
        at::AttentionSpec spec;
        spec.algo = at::Algorithm::parse(algo);
        at::distributed_attention_forward(v, v, v, spec, layout, g);  // rank 1 never takes part
      });
    } catch (const comm::RankFailed& e) {
      what = e.what();
      EXPECT_EQ(e.failed_rank(), 1) << what;
    }
    EXPECT_NE(what.find("first failure on rank 1"), std::string::npos) << what;
  }
}

}  // namespace
