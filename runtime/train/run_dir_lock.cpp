#include "runtime/train/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>

#include <spdlog/spdlog.h>

#include "runtime/config/run_config.h"

namespace trainer::train {
namespace {

std::string holder_text() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  char when[32] = {};
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return "pid " + std::to_string(::getpid()) + " on " + host + " since " + when;
}

std::string read_all(int fd) {
  std::string text;
  char buf[256];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

RunDirLock::RunDirLock(const std::string& key, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = (std::filesystem::path(dir) / kFileName).string();
  if (ec)
    throw config::ConfigError("config: " + key + " = \"" + dir +
                              "\": cannot create it: " + ec.message());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw config::ConfigError("config: " + key + " = \"" + dir + "\": cannot open " + path + ": " +
                              std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      const std::string holder = read_all(fd_);
      ::close(fd_);
      fd_ = -1;
      throw config::ConfigError(
          "config: " + key + " = \"" + dir + "\" is in use by another run (" +
          (holder.empty() ? "its holder unknown" : holder) +
          "): two runs in one directory overwrite each other's checkpoints and reports. Wait "
          "for it to end, or give this run another " +
          key);
    }
    // (ENOLCK: a mount without locks; not a reason to refuse the run)
    spdlog::warn("{} = \"{}\": cannot lock {} ({}); nothing stops a second run from using it", key,
                 dir, path, std::strerror(err));
    return;
  }
  const std::string holder = holder_text() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) < 0)
    spdlog::warn("{}: cannot write who holds it: {}", path, std::strerror(errno));
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

}  // namespace trainer::train
