#include "runtime/train/shared_dir_check.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "runtime/train/rank_agreement.h"

namespace trainer::train {
namespace fs = std::filesystem;

namespace {

// Creates <dir>/.trainer-shared-check.<random hex> (O_EXCL: a name no other run holds) and
// returns its name, or throws config::ConfigError naming the key.
std::string create_check_file(const std::string& key, const std::string& dir) {
  std::mt19937_64 rng{std::random_device{}()};
  for (int attempt = 0;; ++attempt) {
    char name[64];
    std::snprintf(name, sizeof name, ".trainer-shared-check.%012llx",
                  static_cast<unsigned long long>(rng() & 0xffffffffffffULL));
    const std::string path = (fs::path(dir) / name).string();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      ::close(fd);
      return name;
    }
    if (errno != EEXIST || attempt == 8)
      throw config::ConfigError("config: " + key + " = \"" + dir + "\": cannot create " + path +
                                ": " + std::strerror(errno));
  }
}

// Whether `file` shows up within `patience`. A network filesystem's client may answer from a
// cached "no such file" (NFS caches a lookup that failed, here the directory's own before rank 0
// created it, until the directory's attributes expire: acdirmin, 30 s by default); listing the
// directory revalidates it, and a bounded poll lets the cache run out.
bool shows_up(const fs::path& file, std::chrono::milliseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    std::error_code ec;
    for (const fs::path& d : {file.parent_path().parent_path(), file.parent_path()})
      if (DIR* listing = ::opendir(d.c_str())) ::closedir(listing);
    if (fs::exists(file, ec)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

// Rank 0 removes its file however this ends (a failed all-gather included).
struct RemovedOnExit {
  fs::path path;
  ~RemovedOnExit() {
    std::error_code ec;
    if (!path.empty()) fs::remove(path, ec);
  }
};

}  // namespace

void check_every_rank_sees(dist::Comm* world, int rank, const std::string& key,
                           const std::string& dir, std::chrono::milliseconds patience) {
  if (world == nullptr || world->size() == 1) return;
  // rank 0's file, by the absolute path rank 0 sees (a relative dir resolves elsewhere on others)
  std::error_code ec;
  const fs::path rank0_file = rank0_decides(world, rank, [&] {
    return fs::absolute(fs::path(dir) / create_check_file(key, dir), ec).string();
  });
  const RemovedOnExit removed{rank == 0 ? rank0_file : fs::path()};
  const int64_t sees = shows_up(fs::path(dir) / rank0_file.filename(), patience) ? 1 : 0;
  std::vector<int64_t> seen(static_cast<size_t>(world->size()));
  world->all_gather(&sees, seen.data(), 1, dist::CommDType::i64);
  std::string blind;
  int blind_count = 0;
  for (size_t r = 0; r < seen.size(); ++r)
    if (seen[r] == 0) {
      if (++blind_count <= 8) blind += (blind.empty() ? "" : ", ") + std::to_string(r);
    }
  if (blind_count == 0) return;
  if (blind_count > 8) blind += " and " + std::to_string(blind_count - 8) + " more";
  std::string where = dir;
  if (fs::path(dir).is_relative())
    where += " (on rank 0: " + rank0_file.parent_path().string() + ")";
  throw config::ConfigError(
      "config: " + key + " = \"" + dir + "\": rank" + (blind_count > 1 ? "s " : " ") + blind +
      " of " + std::to_string(seen.size()) + " do" + (blind_count > 1 ? "" : "es") +
      " not see the file rank 0 created in " + where +
      ". Every rank writes its part of each checkpoint there, and a checkpoint is committed only "
      "when rank 0 sees them all: give a directory all nodes share, at one path (a relative path "
      "is taken from each process's working directory)");
}

}  // namespace trainer::train
