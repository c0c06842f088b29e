#include "longseq/core/timer.hpp"

#include <cstdio>
#include <cstring>
#include <ctime>

namespace longseq::core {

static size_t read_status_kib(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kib = 0;
  const size_t klen = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, klen) == 0) {
      std::sscanf(line + klen, " %zu", &kib);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

size_t peak_rss_bytes() {
  return read_status_kib("VmHWM:");
}
size_t current_rss_bytes() {
  return read_status_kib("VmRSS:");
}

}  // namespace longseq::core
