// checksums.json of a checkpoint (train/checkpoint): read at --resume before the files it covers.
#include <filesystem>

#include "fuzz_util.hpp"
#include "longseq/train/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = longseq::fuzz::scratch_dir() + "/ck";
  std::filesystem::create_directories(dir);
  static const bool files = [&] {
    longseq::fuzz::write_input(reinterpret_cast<const uint8_t*>("{}\n"), 3, "ck/config.json");
    longseq::fuzz::write_input(reinterpret_cast<const uint8_t*>("{}\n"), 3,
                               "ck/trainer_state.json");
    return true;
  }();
  (void)files;
  longseq::fuzz::write_input(data, size, "ck/checksums.json");
  longseq::fuzz::expect_clean([&] { longseq::train::verify_checkpoint_checksums(dir); });
  return 0;
}
