#include <cstdio>

#include "commands.hpp"
#include "longseq/kernels/gemm.hpp"

namespace longseq::cli {

std::function<int()> add_info(CLI::App&) {
  return [] {
    std::printf("longseq\n  gemm library: %s\n  mpi backend:  %s\n", kernels::gemm_library(),
#ifdef LONGSEQ_WITH_MPI
                "built"
#else
                "not built"
#endif
    );
    return 0;
  };
}

}  // namespace longseq::cli
