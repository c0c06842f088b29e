// The posted collectives (iall_gather, ireduce_scatter, iall_to_all) against the blocking ones:
// the same bits and the same byte counts, several in flight at once and waited in a different
// order on every rank, progress while the caller computes, and the limit on collectives in
// flight. Odd world sizes and counts that do not divide evenly come from the backend list.
#include <algorithm>
#include <numeric>

#include "comm/comm_case.hpp"
#include "longseq/core/timer.hpp"

namespace longseq::comm::testing {
namespace {

class PostedCollectives : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override { LONGSEQ_SKIP_UNLESS_RUNNABLE(GetParam()); }
  void run(const std::function<void(Group&)>& fn) { comm::run(options_for(GetParam()), fn); }
};

/// Inputs and outputs of one collective: posted and blocking runs of it.
template <class T>
struct Case {
  enum Kind { gather, reduce, to_all } kind;
  std::vector<T> in, out;
  Case(Kind k, Group& g, size_t count, uint64_t seed) : kind(k) {
    const size_t p = static_cast<size_t>(g.size());
    in = rank_data<T>(seed, g.rank(), k == gather ? count : count * p);
    out.assign(k == reduce ? count : count * p, T{});
  }
  size_t count(const Group& g) const {
    return kind == gather ? in.size() : in.size() / static_cast<size_t>(g.size());
  }
  Request post(Group& g) {
    const core::DType dt = core::dtype_of<T>();
    switch (kind) {
      case gather:
        return g.iall_gather(in.data(), out.data(), count(g), dt);
      case reduce:
        return g.ireduce_scatter(in.data(), out.data(), count(g), dt);
      default:
        return g.iall_to_all(in.data(), out.data(), count(g), dt);
    }
  }
  std::vector<T> blocking(Group& g) {
    std::vector<T> o(out.size());
    const core::DType dt = core::dtype_of<T>();
    switch (kind) {
      case gather:
        g.all_gather(in.data(), o.data(), count(g), dt);
        break;
      case reduce:
        g.reduce_scatter(in.data(), o.data(), count(g), dt);
        break;
      default:
        g.all_to_all(in.data(), o.data(), count(g), dt);
    }
    return o;
  }
};

template <class T>
void check_one(Group& g, typename Case<T>::Kind kind, size_t count) {
  Case<T> c(kind, g, count, 70 + static_cast<uint64_t>(kind));
  g.reset_stats();
  c.post(g).wait();
  const Stats posted = g.stats();
  g.reset_stats();
  const std::vector<T> want = c.blocking(g);
  const Stats blocking = g.stats();
  EXPECT_TRUE(bits_equal(c.out, want)) << "kind " << kind << " count " << count;
  EXPECT_EQ(posted.sent_intra.bytes, blocking.sent_intra.bytes);
  EXPECT_EQ(posted.sent_inter.bytes, blocking.sent_inter.bytes);
  EXPECT_EQ(posted.messages_sent(), blocking.messages_sent());
}

TEST_P(PostedCollectives, SameBitsAndBytesAsBlocking) {
  run([](Group& g) {
    for (size_t count : {size_t{1}, size_t{37}, size_t{1001}})
      for (auto kind : {Case<float>::gather, Case<float>::reduce, Case<float>::to_all}) {
        check_one<float>(g, kind, count);
        check_one<core::bf16>(g, static_cast<Case<core::bf16>::Kind>(kind), count);
        check_one<int64_t>(g, static_cast<Case<int64_t>::Kind>(kind), count);
      }
  });
}

TEST_P(PostedCollectives, EightInFlightWaitedInAnyOrder) {
  run([](Group& g) {
    // Eight collectives (the limit) of different kinds and sizes in flight together; each rank
    // waits for them in its own rotated order and drives them with test() in reverse first, so
    // ranks advance the rings in different orders.
    std::vector<Case<float>> cases;
    for (int i = 0; i < 8; ++i)
      cases.emplace_back(static_cast<Case<float>::Kind>(i % 3), g, 5 + 97 * static_cast<size_t>(i),
                         100 + static_cast<uint64_t>(i));
    std::vector<Request> reqs;
    for (auto& c : cases) reqs.push_back(c.post(g));
    for (size_t i = reqs.size(); i-- > 0;) reqs[i].test();
    for (size_t k = 0; k < reqs.size(); ++k)
      reqs[(k + static_cast<size_t>(g.rank())) % reqs.size()].wait();
    for (size_t i = 0; i < cases.size(); ++i)
      EXPECT_TRUE(bits_equal(cases[i].out, cases[i].blocking(g))) << "collective " << i;
  });
}

TEST_P(PostedCollectives, NinthInFlightIsRefused) {
  run([](Group& g) {
    if (g.size() == 1) return;  // nothing is ever in flight
    std::vector<Case<float>> cases;
    for (int i = 0; i < 9; ++i) cases.emplace_back(Case<float>::gather, g, 3, 7);
    std::vector<Request> reqs;
    for (int i = 0; i < 8; ++i) reqs.push_back(cases[static_cast<size_t>(i)].post(g));
    try {
      cases[8].post(g);
      ADD_FAILURE() << "a ninth collective in flight was accepted";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("in flight"), std::string::npos) << e.what();
    }
    wait_all(reqs);
    // The refused one took no slot: the group goes on.
    cases[8].post(g).wait();
    EXPECT_TRUE(bits_equal(cases[8].out, cases[8].blocking(g)));
  });
}

TEST_P(PostedCollectives, CompletesWhileTheCallerComputes) {
  run([](Group& g) {
    // Every rank computes between post and wait and only calls test() in between: each
    // collective must complete there, before any wait. The compute reads the posted inputs
    // (they stay unchanged) and writes elsewhere.
    const size_t count = 4099;
    for (auto kind : {Case<float>::gather, Case<float>::reduce, Case<float>::to_all}) {
      Case<float> c(kind, g, count, 90);
      Request r = c.post(g);
      double work = 0.0;
      long rounds = 0;
      const double deadline = core::now_seconds() + 30.0;
      bool done = false;
      while (!done && core::now_seconds() < deadline) {
        for (float x : c.in) work += static_cast<double>(x) * x;  // the caller's own compute
        ++rounds;
        done = r.test();
      }
      EXPECT_TRUE(done) << "kind " << kind << " did not complete through test() in 30 s";
      EXPECT_GT(work, 0.0);
      EXPECT_GE(rounds, 1);
      r.wait();
      EXPECT_TRUE(bits_equal(c.out, c.blocking(g))) << "kind " << kind;
    }
  });
}

TEST_P(PostedCollectives, BlockingCollectivesRunBesidePostedOnes) {
  run([](Group& g) {
    // A posted reduce-scatter stays in flight across blocking collectives (broadcast, barrier,
    // all_reduce, all_gather): their messages never match its ring steps.
    Case<float> c(Case<float>::reduce, g, 333, 5);
    Request r = c.post(g);
    std::vector<int64_t> b(17, g.rank() == 0 ? 42 : 0);
    g.broadcast(b, 0);
    g.barrier();
    std::vector<int32_t> x(9, 1);
    g.all_reduce(x);
    Case<int32_t> ag(Case<int32_t>::gather, g, 11, 6);
    const std::vector<int32_t> gathered = ag.blocking(g);
    r.wait();
    EXPECT_TRUE(std::all_of(b.begin(), b.end(), [](int64_t v) { return v == 42; }));
    EXPECT_TRUE(std::all_of(x.begin(), x.end(), [&](int32_t v) { return v == g.size(); }));
    ag.post(g).wait();
    EXPECT_TRUE(bits_equal(ag.out, gathered));
    EXPECT_TRUE(bits_equal(c.out, c.blocking(g)));
  });
}

INSTANTIATE_TEST_SUITE_P(Local, PostedCollectives, ::testing::ValuesIn(local_backends()),
                         backend_label);
INSTANTIATE_TEST_SUITE_P(Mpi, PostedCollectives, ::testing::ValuesIn(mpi_backends()),
                         backend_label);

}  // namespace
}  // namespace longseq::comm::testing
