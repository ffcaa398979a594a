#pragma once
// supervise(): runs one child per rank and watches them as a group (DESIGN.md "Launch and
// rendezvous"):
//  - every line a child writes is copied to out_fd (its stdout) or err_fd (its stderr) with the
//    prefix "[rank N] ";
//  - SIGINT / SIGTERM sent to the launcher are forwarded to every child's process group (ranks
//    then checkpoint and exit 0 on their own time), SIGHUP (a closed terminal) and SIGUSR1
//    (Slurm's --signal) as SIGTERM, each time one comes; a second SIGINT (Ctrl-C twice) kills
//    the ranks at once (SIGKILL);
//  - ranks are started one after another; a stop signal, or a rank that has failed already,
//    ends the starting;
//  - the first rank to exit non-zero or by a signal is reported on err_fd as
//    "launch: rank R exited with code C" / "launch: rank R killed by signal S"; the others get
//    SIGTERM, then SIGKILL after `grace_s`;
//  - returns that first failing rank's code (128 + S for a signal), or 0 when all exit 0.
// Nothing outlives it: each rank's process group gets SIGKILL once the rank has exited.
#include <unistd.h>

#include <vector>

#include "runtime/launch/child_process.h"

namespace trainer::launch {

struct SuperviseOptions {
  double grace_s = 10;  // SIGTERM -> SIGKILL delay after a rank failed
  int out_fd = STDOUT_FILENO;
  int err_fd = STDERR_FILENO;
};

// children[i] runs as rank `first_rank + i` (the prefix shows the global rank).
int supervise(const std::vector<ChildSpec>& children, const SuperviseOptions& opts,
              int first_rank = 0);

// The launcher's exit status for a wait(2) status: the exit code, or 128 + signal.
int exit_code_of(int wait_status);

}  // namespace trainer::launch
