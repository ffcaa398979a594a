#pragma once
// A test hook: TRAINER_TEST_FAULT="rank=R,step=S,kind=throw|exit|segv" makes global rank R fail
// at the start of step S (1-based), so fault tests can kill a rank at a known point;
// kind=kill_after_save SIGKILLs it right after step S's checkpoint is saved (a scheduler's kill
// at the worst moment for what was logged); kind=sigterm sends it SIGTERM at the start of step S
// (a scheduler's stop, at a known step). Unset, it costs one getenv at start-up.
#include <string>

namespace trainer::train {

class FaultInjector {
 public:
  FaultInjector(int rank);
  void at_step(int step) const;  // throws, exits or crashes when this rank's fault is due
  void after_save(int step) const;

 private:
  int step_ = -1;
  std::string kind_;  // throw, exit (exit(3)), segv (SIGSEGV), sigterm, kill_after_save (SIGKILL)
};

}  // namespace trainer::train
