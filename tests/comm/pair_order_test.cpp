// The pair-order rule (group.hpp) for collectives.cpp's algorithms: run over the local backend
// with every rank recording its posts (GroupImpl::record_posts), the sends rank a posts to rank b
// equal, in order, tag and bytes, the receives b posts from a, for every collective called one at
// a time (blocking, or posted and waited before the next). Collectives posted together and
// advanced by test() are the exception the rule cannot cover (group.hpp), which is why the nccl
// backend runs NCCL's own collectives, ordered by call.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "longseq/comm/group_impl.hpp"
#include "longseq/comm/launch.hpp"

namespace longseq::comm {
namespace {

struct Msg {
  int tag;
  size_t bytes;
  bool operator==(const Msg&) const = default;
};

// By (channel, a, b): a's sends to b and b's receives from a, in posting order.
using Streams = std::map<std::tuple<int, int, int>, std::vector<Msg>>;

/// The first pair that breaks the rule, described; empty when it holds.
std::string first_break(const std::vector<std::vector<PostRecord>>& posts) {
  Streams sent, received;
  for (size_t r = 0; r < posts.size(); ++r)
    for (const PostRecord& p : posts[r]) {
      const int me = static_cast<int>(r), c = static_cast<int>(p.channel);
      if (p.send)
        sent[{c, me, p.peer}].push_back({p.tag, p.bytes});
      else
        received[{c, p.peer, me}].push_back({p.tag, p.bytes});
    }
  for (const auto* side : {&sent, &received})
    for (const auto& [k, v] : *side) {
      const auto& s = sent[k];
      const auto& r = received[k];
      const std::string pair = std::to_string(std::get<1>(k)) + "->" +
                               std::to_string(std::get<2>(k)) + " channel " +
                               std::to_string(std::get<0>(k));
      if (s.size() != r.size())
        return pair + ": " + std::to_string(s.size()) + " sends, " + std::to_string(r.size()) +
               " receives";
      for (size_t i = 0; i < s.size(); ++i)
        if (!(s[i] == r[i]))
          return pair + " message " + std::to_string(i) + ": sent tag " + std::to_string(s[i].tag) +
                 " " + std::to_string(s[i].bytes) + " bytes, received tag " +
                 std::to_string(r[i].tag) + " " + std::to_string(r[i].bytes) + " bytes";
      (void)v;
    }
  return "";
}

TEST(PairOrder, CollectivesOneAtATimeNeedNoTags) {
  for (int world = 1; world <= 7; ++world) {
    std::vector<std::vector<PostRecord>> posts(static_cast<size_t>(world));
    std::mutex mu;
    Options o;
    o.backend = "local";
    o.world = world;
    run(o, [&](Group& g) {
      g.impl().record_posts();
      const int p = g.size(), r = g.rank();
      for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{64}}) {
        std::vector<float> in(count * static_cast<size_t>(p), 1.0f + static_cast<float>(r));
        std::vector<float> out(count * static_cast<size_t>(p));
        g.all_gather(in.data(), out.data(), count, core::DType::f32);
        g.reduce_scatter(in.data(), out.data(), count, core::DType::f32);
        g.all_reduce(in.data(), out.data(), count * static_cast<size_t>(p), core::DType::f32);
        g.all_to_all(in.data(), out.data(), count, core::DType::f32);
        for (int root = 0; root < p; ++root) g.broadcast(in.data(), count, core::DType::f32, root);
        g.iall_gather(in.data(), out.data(), count, core::DType::f32).wait();
        g.ireduce_scatter(in.data(), out.data(), count, core::DType::f32).wait();
        g.iall_to_all(in.data(), out.data(), count, core::DType::f32).wait();
        // Uneven counts: rank q sends q + c elements to every rank.
        std::vector<size_t> sc(static_cast<size_t>(p), static_cast<size_t>(r) + count),
            sd(static_cast<size_t>(p)), rc(static_cast<size_t>(p)), rd(static_cast<size_t>(p));
        for (int q = 0; q < p; ++q) {
          sd[static_cast<size_t>(q)] = static_cast<size_t>(q) * (static_cast<size_t>(r) + count);
          rc[static_cast<size_t>(q)] = static_cast<size_t>(q) + count;
          rd[static_cast<size_t>(q)] =
              q == 0 ? 0 : rd[static_cast<size_t>(q - 1)] + rc[static_cast<size_t>(q - 1)];
        }
        std::vector<float> vin(static_cast<size_t>(p) * (static_cast<size_t>(r) + count)),
            vout(std::accumulate(rc.begin(), rc.end(), size_t{0}));
        g.all_to_all_v(vin.data(), sc, sd, vout.data(), rc, rd, core::DType::f32);
        g.barrier();
      }
      std::lock_guard<std::mutex> lk(mu);
      posts[static_cast<size_t>(g.rank())] = g.impl().posts();
    });
    EXPECT_EQ(first_break(posts), "") << "world " << world;
    if (world > 1) {
      EXPECT_FALSE(posts[0].empty());
    }
  }
}

// The check can fail: one rank's posts of a two-message exchange in the other order are caught.
TEST(PairOrder, SwappedPostsAreCaught) {
  std::vector<std::vector<PostRecord>> posts(2);
  Options o;
  o.backend = "local";
  o.world = 2;
  std::mutex mu;
  run(o, [&](Group& g) {
    g.impl().record_posts();
    const int peer = 1 - g.rank();
    std::vector<int> a(3, g.rank()), b(5, g.rank()), ra(3), rb(5);
    // Rank 1 posts its receives in the other order; MPI-style tags still match them.
    std::vector<Request> reqs;
    reqs.push_back(g.isend(peer, a, 0));
    reqs.push_back(g.isend(peer, b, 1));
    if (g.rank() == 0) {
      reqs.push_back(g.irecv(peer, ra, 0));
      reqs.push_back(g.irecv(peer, rb, 1));
    } else {
      reqs.push_back(g.irecv(peer, rb, 1));
      reqs.push_back(g.irecv(peer, ra, 0));
    }
    wait_all(reqs);
    std::lock_guard<std::mutex> lk(mu);
    posts[static_cast<size_t>(g.rank())] = g.impl().posts();
  });
  EXPECT_EQ(first_break(posts),
            "0->1 channel 0 message 0: sent tag 0 12 bytes, received tag 1 20 bytes");
}

}  // namespace
}  // namespace longseq::comm
