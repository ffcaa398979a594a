#pragma once
// RunDirLock: one run at a time in a directory. Two runs writing one run.out_dir (or one
// checkpoint.dir) overwrite each other's metrics, report and checkpoints: a job started twice, or a
// requeued job whose first copy still runs, would delete or corrupt checkpoints reported saved.
//
// Rank 0 holds an exclusive flock(2) on <dir>/.trainer.lock for the run's length. The kernel drops
// it when the process ends, however it ends (kill -9 included), so no stale lock outlives a run.
// The file says who holds it (pid, host, start time) for the next run's error message.
#include <string>

namespace trainer::train {

class RunDirLock {
 public:
  // Creates `dir` if needed and locks it, or throws config::ConfigError naming `key`, the
  // directory and the run that holds it. A file system without locks (some NFS mounts) is logged
  // and not locked.
  RunDirLock(const std::string& key, const std::string& dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  static constexpr const char* kFileName = ".trainer.lock";

 private:
  int fd_ = -1;
};

}  // namespace trainer::train
