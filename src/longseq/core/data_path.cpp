#include "longseq/core/data_path.hpp"

#include <cstdlib>
#include <filesystem>

namespace longseq::core {

namespace fs = std::filesystem;

std::string data_dir() {
  if (const char* env = std::getenv("LONGSEQ_DATA_DIR"); env && *env) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path share = exe.parent_path().parent_path() / "share" / "longseq";
    if (fs::is_directory(share / "presets", ec)) return share.string();
  }
#ifdef LONGSEQ_SOURCE_DATA_DIR
  return LONGSEQ_SOURCE_DATA_DIR;
#else
  return "data";
#endif
}

std::string resolve_data_file(const std::string& path) {
  std::error_code ec;
  if (path.empty() || fs::path(path).is_absolute() || fs::exists(path, ec)) return path;
  const std::string prefix = "data/";
  if (path.compare(0, prefix.size(), prefix) != 0) return path;
  const fs::path shipped = fs::path(data_dir()) / path.substr(prefix.size());
  return fs::exists(shipped, ec) ? shipped.string() : path;
}

}  // namespace longseq::core
