#include "runtime/launch/line_prefixer.h"

#include <unistd.h>

#include <cerrno>

namespace trainer::launch {

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the reader went away: nothing useful left to do with the output
    done += static_cast<size_t>(n);
  }
}

void LinePrefixer::feed(const char* data, size_t n) {
  pending_.append(data, n);
  std::string out;
  size_t start = 0;
  for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1)
    out += prefix_ + pending_.substr(start, nl - start + 1);
  pending_.erase(0, start);
  if (pending_.size() >= kMaxLine) {
    out += prefix_ + pending_ + "\n";
    pending_.clear();
  }
  if (!out.empty()) write_all(out_fd_, out);
}

void LinePrefixer::finish() {
  if (!pending_.empty()) write_all(out_fd_, prefix_ + pending_ + "\n");
  pending_.clear();
}

}  // namespace trainer::launch
