#pragma once
// Internal entry of the local backend (comm::run_local is the public one).
#include <functional>

#include "longseq/comm/group.hpp"
#include "longseq/comm/link_model.hpp"
#include "longseq/comm/topology.hpp"

namespace longseq::comm {

/// Runs fn on `world` threads (the caller is rank 0) over one fresh LocalWorld and joins them;
/// throws RankFailed with the first failure.
void run_local_world(int world, const Topology& topology, const LinkModel& link, double timeout_s,
                     const std::function<void(Group&)>& fn);

}  // namespace longseq::comm
