#pragma once
// How many compute threads a rank runs by default: one function, used by every command's
// --threads (core/flag_rows.hpp) and by the planner's model of the host trainer.

namespace longseq::core {

/// The host's hardware threads (std::thread::hardware_concurrency, at least 1).
int hardware_threads();

/// Compute threads of one rank: `given` when > 0 (a --threads flag), else the host's hardware
/// threads shared by the `ranks_on_host` ranks it runs (at least 1): no idle core by default.
int default_threads(int given, int ranks_on_host);

}  // namespace longseq::core
