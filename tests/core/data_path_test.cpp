// core/data_path: the data directory's precedence ($LONGSEQ_DATA_DIR, then an install's
// share/longseq beside the executable, then the source tree) and the resolution of "data/..."
// defaults from any working directory.
#include "longseq/core/data_path.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;
using longseq::core::data_dir;
using longseq::core::resolve_data_file;

// Restores the working directory and LONGSEQ_DATA_DIR whatever the test does.
struct Restore {
  fs::path cwd = fs::current_path();
  const char* env = std::getenv("LONGSEQ_DATA_DIR");
  std::string saved = env ? env : "";
  ~Restore() {
    fs::current_path(cwd);
    if (env)
      setenv("LONGSEQ_DATA_DIR", saved.c_str(), 1);
    else
      unsetenv("LONGSEQ_DATA_DIR");
  }
};

TEST(DataPath, EnvironmentFirstThenTheSourceTree) {
  Restore r;
  setenv("LONGSEQ_DATA_DIR", "/somewhere/else", 1);
  EXPECT_EQ(data_dir(), "/somewhere/else");
  unsetenv("LONGSEQ_DATA_DIR");
  // A test binary is no install (no ../share/longseq beside it): the source tree's data/.
  EXPECT_EQ(fs::path(data_dir()).filename(), "data") << data_dir();
  EXPECT_TRUE(fs::exists(fs::path(data_dir()) / "presets" / "main.json"));
}

TEST(DataPath, DataDefaultsResolveFromAnyDirectory) {
  Restore r;
  unsetenv("LONGSEQ_DATA_DIR");
  fs::current_path("/");
  const std::string f = resolve_data_file("data/kjv-genesis-exodus.txt");
  EXPECT_TRUE(fs::path(f).is_absolute()) << f;
  EXPECT_TRUE(fs::exists(f)) << f;
  // Anything else is left as given, so a failed open names what the user asked for.
  EXPECT_EQ(resolve_data_file("data/no-such-file.bin"), "data/no-such-file.bin");
  EXPECT_EQ(resolve_data_file("elsewhere/x.txt"), "elsewhere/x.txt");
  EXPECT_EQ(resolve_data_file("/abs/x.txt"), "/abs/x.txt");
}

}  // namespace
