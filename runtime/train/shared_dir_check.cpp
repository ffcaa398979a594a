#include "runtime/train/shared_dir_check.h"

#include <dirent.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/core/atomic_file.h"
#include "runtime/train/rank_agreement.h"

namespace trainer::train {
namespace fs = std::filesystem;

namespace {

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

}  // namespace

void check_every_rank_sees(dist::Comm* world, int rank, const std::string& key,
                           const std::string& dir, std::chrono::milliseconds patience) {
  if (world == nullptr || world->size() == 1) return;
  // Rank 0's file: an AtomicFileWriter's temporary, a fresh name (O_EXCL) that the writer removes
  // however this ends, since it is never committed. Sent by the absolute path rank 0 sees (a
  // relative dir resolves elsewhere on other ranks).
  std::optional<AtomicFileWriter> check;
  std::error_code ec;
  const fs::path rank0_file = rank0_decides(world, rank, [&] {
    try {
      check.emplace((fs::path(dir) / ".trainer-shared-check").string());
    } catch (const FileWriteError& e) {
      throw config::ConfigError("config: " + key + " = \"" + dir + "\": " + e.what());
    }
    return fs::absolute(check->temporary(), ec).string();
  });
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
