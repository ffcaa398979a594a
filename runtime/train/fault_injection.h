#pragma once
// A test hook: TRAINER_TEST_FAULT="rank=R,step=S,kind=throw|exit|segv" makes global rank R fail
// at the start of step S (1-based), so fault tests can kill a rank at a known point. Unset, it
// costs one getenv at start-up.
namespace trainer::train {

class FaultInjector {
 public:
  FaultInjector(int rank);
  void at_step(int step) const;  // throws, exits or crashes when this rank's fault is due

 private:
  int step_ = -1;
  char kind_ = 0;  // 't' throw, 'e' exit(3), 's' SIGSEGV
};

}  // namespace trainer::train
