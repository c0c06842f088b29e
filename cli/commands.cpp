#include "commands.hpp"

namespace longseq::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"info", "print the build configuration (GEMM library, MPI, CUDA)", add_info},
      {"schedule", "print a distributed-attention schedule step by step for every rank", add_schedule},
  };
  return table;
}

}  // namespace longseq::cli
