#pragma once
// One run at a time in a directory. Two runs writing one run.out_dir or one checkpoint.dir
// overwrite each other's metrics, report and checkpoints, and retention in one deletes the other's
// saved steps: a job submitted twice, or a requeue whose first copy still runs.
//
// RunDirLock: an exclusive flock(2) on <dir>/.trainer.lock. On a local file system the kernel
// drops it when the holding process ends, kill -9 included; on NFS or Lustre a lock of a node that
// died lasts until the server lets go of that client, and the error says how to break it. The file
// says who holds it (pid, host, start time) for the next run's message.
#include <optional>
#include <string>

#include "runtime/config/run_config.h"

namespace trainer::train {

class RunDirLock {
 public:
  // Creates `dir` if needed and locks it, or throws config::ConfigError naming `key`, the
  // directory and the run that holds it. Where it cannot lock (a mount without locks, a lock file
  // it may not open), it logs why and holds nothing.
  RunDirLock(const std::string& key, const std::string& dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  static constexpr const char* kFileName = ".trainer.lock";
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A run's directories: run.out_dir, and checkpoint.dir (unless it is the same directory, by any
// path), which every run may write: a stop signal saves there whatever the config plans.
class RunDirLocks {
 public:
  // Locks those not held yet; `existing_only`: only the ones that exist now (one that does not
  // exist cannot be in use; it is created by the call without it).
  void take(const config::RunConfig& cfg, bool existing_only);
  // Whether this process holds checkpoint.dir's lock (its own, or run.out_dir's where they are
  // one directory): not where the filesystem has no locks.
  bool holds_checkpoint_dir() const {
    return checkpoint_dir_ ? checkpoint_dir_->held()
                           : checkpoint_dir_done_ && out_dir_ && out_dir_->held();
  }

 private:
  std::optional<RunDirLock> out_dir_, checkpoint_dir_;
  bool checkpoint_dir_done_ = false;
};

}  // namespace trainer::train
