#include "commands.hpp"

namespace longseq::cli {
std::function<int()> add_ref_attention(CLI::App&) {
  return [] { return 0; };
}
}  // namespace longseq::cli
