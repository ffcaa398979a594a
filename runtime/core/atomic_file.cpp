#include "runtime/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

namespace trainer {
namespace {

std::string errno_text() {
  return std::strerror(errno);
}

// "<path>.tmp.<12 random hex digits>", created with O_EXCL: a name no other writer holds, on any
// machine of a shared filesystem, and none that a killed writer left behind (a pid would repeat:
// a container's first process is pid 1 on every start).
std::string random_suffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[16];
  std::snprintf(buf, sizeof buf, "%012llx",
                static_cast<unsigned long long>(rng() & 0xffffffffffffULL));
  return buf;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path, bool hash)
    : path_(std::move(path)), hashing_(hash) {
  for (int attempt = 0; fd_ < 0; ++attempt) {
    tmp_ = path_ + ".tmp." + random_suffix();
    // 0666 less the umask, as the file a plain write would make
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt == 8))
      throw FileWriteError("cannot create " + tmp_ + ": " + errno_text());
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  if (hashing_) hash_.update(data, n);
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
  return hashing_ ? hash_.final() : "";
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFileWriter out(path);
  out.write(bytes.data(), bytes.size());
  out.commit();
}

}  // namespace trainer
