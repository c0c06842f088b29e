#pragma once
// The flags several commands share, each declared once: its name, help line, default and range. A
// command takes the rows it uses (cli/table_flags.hpp add_row; train's table, train/config.hpp,
// names the same rows), so `--algo` reads the same words with the same default in every --help
// (tests/train/cli_flags_test.cpp SharedFlagsReadTheSameEverywhere). The values' parsers stay with
// their owners (attention::Algorithm::parse, attention::parse_balance, core::parse_precision, ...):
// this file is only the words, so that every room can name a default without depending on another.
//
// TO ADD A FLAG SHARED BY SEVERAL COMMANDS (e.g. --device), add one row here and call add_row for
// it in each command that takes it.
#include <cstdint>

#include "longseq/core/check.hpp"

namespace longseq::core {

/// One shared flag. `text` is the default of a string flag, `number` that of a numeric one, and
/// `range` its admissible values (enforced at parse time by add_row, and by train's table).
struct FlagRow {
  const char* flag;
  const char* help;
  const char* text = "";
  int64_t number = 0;
  Check range = any();
};

namespace rows {

/// The algorithm grammar (attention::Algorithm::parse), also the items of `plan --algo`'s list.
inline constexpr const char* kAlgoGrammar =
    "ring | burst | double-ring[:I][:burst|:ring] | startrail:C[:teams|:rings] | ulysses | "
    "usp:U[:burst|:ring]";

inline constexpr FlagRow algo{"--algo", kAlgoGrammar, "burst"};
inline constexpr FlagRow balance{
    "--balance", "contiguous | zigzag | striped | block-striped (needs a blocks:FILE:B mask)",
    "zigzag"};
inline constexpr FlagRow mask{"--mask",
                              "full | causal | window:W | document[:FILE] | blocks:FILE:B, "
                              "comma-joined (train, eval: always causal; plan, schedule: no FILE)",
                              "causal"};
inline constexpr FlagRow precision{
    "--precision",
    "fp32 (or f32) | bf16: bf16 operands, fp32 accumulation (train keeps fp32 master weights, "
    "gradients and optimizer; attention's outputs stay float32)",
    "fp32"};
inline constexpr FlagRow device{
    "--device",
    "cpu | cuda | cuda:N: where the model computes (cuda: weights, activations and gradients on "
    "that GPU; --world N ranks share it)",
    "cpu"};
inline constexpr FlagRow world{
    "--world",
    "ranks in all (local backend: threads of this process; under mpirun, if given, must equal "
    "-np)",
    "", 1, at_least(1)};
inline constexpr FlagRow nodes{
    "--nodes",
    "nodes the ranks are split over, evenly (declared for the local backend; under mpirun the "
    "hosts MPI reports, 1 = real hosts)",
    "", 1, at_least(1)};
inline constexpr FlagRow threads{
    "--threads", "compute threads per rank (0: the host's hardware threads / its ranks)", "", 0,
    at_least(0)};
inline constexpr FlagRow link{
    "--link",
    "link model of the local backend intra=LAT,BW:inter=LAT,BW, e.g. inter=20us,2.5GB/s (none: "
    "off)",
    "none"};
/// A model to read (eval, generate, passkey): not --checkpoint, which is train's and plan's
/// recompute policy. The old spelling still works and warns (cli/table_flags.hpp).
inline constexpr FlagRow checkpoint_dir{
    "--checkpoint-dir",
    "a training --out directory (its checkpoint/) or a Hugging Face LLaMA directory", ""};

}  // namespace rows
}  // namespace longseq::core
