#include "longseq/core/io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "longseq/core/error.hpp"

namespace longseq::core {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  require(static_cast<bool>(in), "io", path, ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  require(!in.bad(), "io", path, ": read failed");
  return ss.str();
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("io", path, ": write failed: ", std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some filesystems refuse directory fds
  ::fsync(fd);
  ::close(fd);
}

void write_atomic(const std::string& path,
                  const std::function<void(int fd, const std::string& tmp)>& body) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("io", tmp, ": cannot create: ", std::strerror(errno));
  try {
    body(fd, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Any failure from here on (a full disk can first show at fsync or close on some filesystems)
  // removes the tmp file too: `path` keeps its previous content and no partial file stays behind.
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("io", tmp, ": fsync failed: ", std::strerror(e));
  }
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail("io", tmp, ": close failed: ", std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail("io", path, ": rename from ", tmp, " failed: ", std::strerror(e));
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  fsync_dir(dir.empty() ? std::string(".") : dir.string());
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_atomic(
      path, [&](int fd, const std::string& tmp) { write_all(fd, text.data(), text.size(), tmp); });
}

}  // namespace longseq::core
