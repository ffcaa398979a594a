#include "runtime/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace trainer {
namespace {

std::string errno_text() {
  return std::strerror(errno);
}

// "<path>.tmp.<pid>.<n>": unique to this writer among the processes and threads of a machine (a
// shared filesystem's other machines have other pids, or the same pid in another process only by
// chance: O_EXCL then refuses rather than sharing the file).
std::string temporary_for(const std::string& path) {
  static std::atomic<unsigned> serial{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_(temporary_for(path_)) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw FileWriteError("cannot create " + tmp_ + ": " + errno_text());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  hash_.update(data, n);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw FileWriteError("write to " + tmp_ + " failed: " + errno_text());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

std::string AtomicFileWriter::commit() {
  if (::fsync(fd_) != 0) throw FileWriteError("fsync " + tmp_ + ": " + errno_text());
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) throw FileWriteError("close " + tmp_ + ": " + errno_text());
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw FileWriteError("cannot rename " + tmp_ + " to " + path_ + ": " + errno_text());
  committed_ = true;
  return hash_.final();
}

}  // namespace trainer
