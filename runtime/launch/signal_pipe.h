#pragma once
// SignalPipe: while alive, SIGINT, SIGTERM, SIGHUP (unless ignored, as under nohup), SIGUSR1,
// SIGCHLD, SIGTSTP and SIGCONT are caught and their numbers written to a non-blocking pipe (the
// self-pipe trick), so one poll() waits for child output, child exits and signals alike. The
// previous handlers come back on destruction. One instance at a time.
#include <vector>

namespace trainer::launch {

class SignalPipe {
 public:
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int fd() const { return read_fd_; }  // readable when a signal arrived
  std::vector<int> drain();            // the signals received since the last drain

 private:
  int read_fd_ = -1;
};

}  // namespace trainer::launch
