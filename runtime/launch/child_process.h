#pragma once
// One child process in its own process group, stdout and stderr on pipes (non-blocking, close
// on exec). The child also gets SIGKILL if the launcher dies, so no rank outlives it.
#include <sys/types.h>

#include <string>
#include <vector>

namespace trainer::launch {

struct ChildSpec {
  std::vector<std::string> argv;  // argv[0] without a '/' is looked up in PATH
  std::vector<std::string> env;   // the complete environment, "KEY=VALUE"
};

struct SpawnedChild {
  pid_t pid = -1;  // also the process group id
  int out_fd = -1;
  int err_fd = -1;
};

// Throws std::runtime_error naming the program when it cannot be started (e.g. not found).
SpawnedChild spawn_child(const ChildSpec& spec);

// Signals the child's whole process group; a group that is already gone is not an error.
void signal_group(pid_t pgid, int sig);

}  // namespace trainer::launch
