#include "runtime/train/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <spdlog/spdlog.h>

#include "runtime/core/host_name.h"
#include "runtime/report/run_report.h"

namespace trainer::train {
namespace {

namespace fs = std::filesystem;

std::string holder_text() {
  return "pid " + std::to_string(::getpid()) + " on " + host_name() + " since " +
         report::now_iso8601();
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
  fs::create_directories(dir, ec);
  if (ec)
    throw config::ConfigError("config: " + key + " = \"" + dir +
                              "\": cannot create it: " + ec.message());
  const std::string path = (fs::path(dir) / kFileName).string();
  // 0666 (less the umask): a group's shared run directory stays usable by its other members.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  const bool writable = fd_ >= 0;
  if (fd_ < 0 && errno == EACCES)
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // (flock works)
  if (fd_ < 0) {
    spdlog::warn("{} = \"{}\": cannot open {} ({}); nothing stops a second run from using it", key,
                 dir, path, std::strerror(errno));
    return;
  }
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
          key +
          ". (If that run is gone, its node down, and its file server still holds the lock: "
          "remove " +
          path + ")");
    }
    // (ENOLCK: a mount without locks; not a reason to refuse the run)
    spdlog::warn("{} = \"{}\": cannot lock {} ({}); nothing stops a second run from using it", key,
                 dir, path, std::strerror(err));
    ::close(fd_);
    fd_ = -1;
    return;
  }
  if (!writable) return;  // the lock holds; the file names the holder before it
  const std::string holder = holder_text() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) < 0)
    spdlog::warn("{}: cannot write who holds it: {}", path, std::strerror(errno));
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

void RunDirLocks::take(const config::RunConfig& cfg, bool existing_only) {
  std::error_code ec;
  const std::string& out = cfg.run.out_dir;
  if (!out_dir_ && (!existing_only || fs::is_directory(out, ec)))
    out_dir_.emplace("run.out_dir", out);
  if (checkpoint_dir_done_) return;
  const std::string ckpt = cfg.checkpoint_dir();
  const bool exists = fs::is_directory(ckpt, ec);
  // (a run that plans no save still saves there on a stop signal: it is locked all the same)
  if (!exists && existing_only) return;
  if (out_dir_ && exists && fs::equivalent(ckpt, out, ec)) {
    checkpoint_dir_done_ = true;  // one directory: flock is per open file, a second would refuse
    return;
  }
  checkpoint_dir_.emplace("checkpoint.dir", ckpt);
  checkpoint_dir_done_ = true;
}

}  // namespace trainer::train
