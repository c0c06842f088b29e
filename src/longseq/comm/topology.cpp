#include "longseq/comm/topology.hpp"

#include <algorithm>
#include <unordered_map>

#include "longseq/core/error.hpp"

namespace longseq::comm {

Topology::Topology(int size)
    : Topology(std::vector<int>(static_cast<size_t>(std::max(size, 0)), 0)) {}

Topology::Topology(const std::vector<int>& node_of_rank) {
  LONGSEQ_CHECK_MSG(!node_of_rank.empty(), "a topology needs at least one rank");
  std::unordered_map<int, int> dense;
  node_.reserve(node_of_rank.size());
  for (int id : node_of_rank) {
    auto [it, inserted] = dense.emplace(id, static_cast<int>(dense.size()));
    node_.push_back(it->second);
  }
  num_nodes_ = static_cast<int>(dense.size());
  node_count_.assign(static_cast<size_t>(num_nodes_), 0);
  local_rank_.reserve(node_.size());
  for (int n : node_) local_rank_.push_back(node_count_[static_cast<size_t>(n)]++);
}

Topology Topology::declared(int size, int nodes) {
  core::require(size >= 1, "comm", "world ", size, " must be at least 1");
  core::require(nodes >= 1, "comm", "--nodes ", nodes, " must be at least 1");
  core::require(size % nodes == 0, "comm", "--nodes ", nodes, " must divide world ", size,
                " (ranks are split evenly over nodes)");
  const int per = size / nodes;
  std::vector<int> node(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) node[static_cast<size_t>(r)] = r / per;
  return Topology(node);
}

int Topology::node(int rank) const {
  LONGSEQ_CHECK_MSG(rank >= 0 && rank < size(), "rank ", rank, " of topology of size ", size());
  return node_[static_cast<size_t>(rank)];
}

std::vector<int> Topology::ranks_on(int n) const {
  std::vector<int> out;
  for (int r = 0; r < size(); ++r)
    if (node_[static_cast<size_t>(r)] == n) out.push_back(r);
  return out;
}

int Topology::local_rank(int rank) const {
  LONGSEQ_CHECK_MSG(rank >= 0 && rank < size(), "rank ", rank, " of topology of size ", size());
  return local_rank_[static_cast<size_t>(rank)];
}

int Topology::local_size(int rank) const {
  return node_count_[static_cast<size_t>(node(rank))];
}

bool Topology::uniform() const {
  return std::all_of(node_count_.begin(), node_count_.end(),
                     [&](int c) { return c == node_count_.front(); });
}

}  // namespace longseq::comm
