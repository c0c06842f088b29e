#include "commands.hpp"

namespace longseq::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"info", "print the build configuration (GEMM library, MPI, CUDA)", add_info},
      {"ref-attention", "run the fp64 reference attention on a seeded sequence and check it",
       add_ref_attention},
      {"schedule", "print a distributed-attention schedule step by step for every rank", add_schedule},
  };
  return table;
}

}  // namespace longseq::cli
