#include "longseq/comm/topology.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "longseq/core/error.hpp"

namespace longseq::comm {
namespace {

TEST(Topology, DeclaredSplitsEvenly) {
  const Topology t = Topology::declared(8, 2);
  EXPECT_EQ(t.num_nodes(), 2);
  EXPECT_EQ(t.node(3), 0);
  EXPECT_EQ(t.node(4), 1);
  EXPECT_EQ(t.local_rank(5), 1);
  EXPECT_EQ(t.local_size(5), 4);
  EXPECT_EQ(t.ranks_on(1), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_TRUE(t.uniform());
  EXPECT_THROW(Topology::declared(8, 3), core::Error);
  EXPECT_THROW(Topology::declared(8, 0), core::Error);
}

TEST(Topology, IdsAreRenumberedInOrderOfFirstRank) {
  const Topology t(std::vector<int>{7, 7, 3, 9, 3});
  EXPECT_EQ(t.num_nodes(), 3);
  EXPECT_EQ(t.nodes(), (std::vector<int>{0, 0, 1, 2, 1}));
  EXPECT_EQ(t.local_rank(4), 1);
  EXPECT_FALSE(t.uniform());
}

}  // namespace
}  // namespace longseq::comm
