#include "runtime/train/process_stats.h"

#include <fstream>
#include <string>

namespace trainer::train {

int64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // kB
  }
  return 0;
}

}  // namespace trainer::train
