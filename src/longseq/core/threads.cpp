#include "longseq/core/threads.hpp"

#include <algorithm>
#include <thread>

namespace longseq::core {

int hardware_threads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int default_threads(int given, int ranks_on_host) {
  return given > 0 ? given : std::max(1, hardware_threads() / std::max(1, ranks_on_host));
}

}  // namespace longseq::core
