#pragma once
// SignalPipe: while alive, SIGINT, SIGTERM, SIGHUP (unless ignored, as under nohup), SIGUSR1,
// SIGCHLD, SIGTSTP and SIGCONT are caught and written to a non-blocking pipe (the self-pipe
// trick), so one poll() waits for child output, child exits and signals alike; a SIGCHLD with the
// child's pid, so that children that exit one after the other are known in that order even when
// both are reaped at once. The previous handlers come back on destruction. One instance at a time.
#include <sys/types.h>

#include <vector>

namespace trainer::launch {

class SignalPipe {
 public:
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  struct Caught {
    int sig = 0;
    pid_t pid = 0;  // SIGCHLD: the child whose state changed (0 for other signals)
  };
  int fd() const { return read_fd_; }  // readable when a signal arrived
  std::vector<Caught> drain();         // the signals received since the last drain, in order

 private:
  int read_fd_ = -1;
};

}  // namespace trainer::launch
