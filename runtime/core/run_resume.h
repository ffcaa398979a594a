#pragma once
// A resume in a run's history: the step it resumed at, the processes it ran on from there, and
// what it changed from the run before it (config::config_changes' "train.lr: 0.003 -> 0.001",
// and "world: 1 -> 2" where the process count changed). Checkpoints carry the list forward
// (manifest.json's "resumes"), so that a report names every resume of its run, not only its own.
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct RunResume {
  int64_t at_step = 0;
  int world_size = 1;
  std::vector<std::string> changes;
};

}  // namespace trainer
