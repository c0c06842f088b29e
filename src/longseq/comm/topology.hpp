#pragma once
// Topology: which ranks of a group share a node (design.md §4).
//
// Real under MPI (one node per host name from MPI_Get_processor_name), declared under the local
// backend
// (`--nodes M`: ranks split evenly, ranks [0, P/M) on node 0, and so on). Node ids are dense,
// numbered in order of each node's lowest rank, so node(0) == 0 always.
#include <cstddef>
#include <vector>

namespace longseq::comm {

/// Immutable map rank -> node for one group. Cheap to copy (P ints). Thread-safe (read-only).
class Topology {
 public:
  /// One node holding `size` ranks.
  explicit Topology(int size = 1);
  /// `node_of_rank[r]` is any id for the node of rank r; ids are renumbered densely in order of
  /// first appearance.
  explicit Topology(const std::vector<int>& node_of_rank);
  /// `size` ranks split evenly over `nodes` nodes; throws core::Error("[comm] --nodes 3 must
  /// divide world 8") when nodes does not divide size, or when nodes < 1.
  static Topology declared(int size, int nodes);

  int size() const { return static_cast<int>(node_.size()); }
  int num_nodes() const { return num_nodes_; }
  /// Node of `rank`, in [0, num_nodes()).
  int node(int rank) const;
  bool same_node(int a, int b) const { return node(a) == node(b); }
  /// Ranks on `node`, ascending.
  std::vector<int> ranks_on(int node) const;
  /// Index of `rank` among the ranks of its node (ascending rank order).
  int local_rank(int rank) const;
  /// Number of ranks on the node of `rank`.
  int local_size(int rank) const;
  /// True when every node holds the same number of ranks.
  bool uniform() const;
  /// The node of every rank, dense ids.
  const std::vector<int>& nodes() const { return node_; }

 private:
  std::vector<int> node_;
  std::vector<int> local_rank_;
  std::vector<int> node_count_;
  int num_nodes_ = 1;
};

}  // namespace longseq::comm
