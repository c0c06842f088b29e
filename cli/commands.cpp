#include "commands.hpp"

namespace longseq::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"info", "print the build configuration (GEMM library, MPI)", add_info, Ranks::first},
      {"attention",
       "distributed attention (forward, and backward with --do) on .npy or seeded inputs",
       add_attention},
      {"schedule", "print a distributed-attention schedule step by step for every rank",
       add_schedule, Ranks::first},
      {"train",
       "train a LLaMA model with context parallelism, ZeRO-3 and checkpoints (presets + overrides)",
       add_train},
      {"tokenize",
       "text files -> a token file for train --data (byte-level, or BPE from tokenizer.json)",
       add_tokenize, Ranks::first},
      {"plan", "rank training configurations by predicted step time on a modelled cluster",
       add_plan, Ranks::first},
      {"eval", "a checkpoint's loss and perplexity by position over long sequences (distributed)",
       add_eval},
      {"generate", "continue a prompt from a checkpoint (KV cache sharded over --world ranks)",
       add_generate},
      {"passkey", "passkey retrieval over lengths x depths (heat map), or --make-data for training",
       add_passkey},
      {"copy",
       "the copy task's token files (a random half, then the same half): learning across ranks",
       add_copy, Ranks::first},
      {"calibrate",
       "measure this machine (GEMM, attention kernels, copy bandwidth) into "
       "data/hardware/local.json",
       add_calibrate},
  };
  return table;
}

}  // namespace longseq::cli
