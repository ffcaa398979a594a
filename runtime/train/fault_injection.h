#pragma once
// A test hook: TRAINER_TEST_FAULT="rank=R,step=S,kind=throw|exit|segv" makes global rank R fail
// at the start of step S (1-based), so fault tests can kill a rank at a known point;
// kind=kill_after_save SIGKILLs it right after step S's checkpoint is saved (a scheduler's kill
// at the worst moment for what was logged); kind=sigterm sends it SIGTERM at the start of step S
// (a scheduler's stop, at a known step), kind=sigterm_in_eval as step S's eval starts. Unset, it
// costs one getenv at start-up.
#include <string>

namespace trainer::train {

class FaultInjector {
 public:
  FaultInjector(int rank);
  void at_step(int step) const;  // throws, exits or crashes when this rank's fault is due
  void after_save(int step) const;
  void in_eval(int step) const;

 private:
  int step_ = -1;
  // throw, exit (exit(3)), segv (SIGSEGV), sigterm, sigterm_in_eval, kill_after_save (SIGKILL)
  std::string kind_;
};

}  // namespace trainer::train
