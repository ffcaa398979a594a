#pragma once
// SIGTERM and SIGINT (a launcher's or Slurm's stop, Ctrl-C) and SIGUSR1 (what Slurm's
// --signal=USR1@SECONDS sends ahead of a time limit) ask the run to stop at the next step
// boundary, after a checkpoint (Checkpointing::save_after), instead of killing the process.
//
// run_training holds one StopSignals for its whole length and starts catching just before the
// training state exists: a signal during rendezvous or setup still ends the process at once. The
// handlers stay through a failure's unwinding and report: a launcher sends SIGTERM to the
// survivors as soon as one rank fails, and one killed then would leave no failed report.json
// and, on rank 0, end the store the others are still reading the failure from.
#include <csignal>

namespace trainer::train {

class StopSignals {
 public:
  StopSignals() = default;
  ~StopSignals();  // the actions before catch_now() again (the defaults: the process ends)
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // From here on a SIGTERM, SIGINT or SIGUSR1 (each time) sets the flag that received() reads.
  void catch_now();
  // Whether one arrived since a catch_now().
  static bool received();

 private:
  bool catching_ = false;
  struct sigaction previous_term_ = {};
  struct sigaction previous_int_ = {};
  struct sigaction previous_usr1_ = {};
};

}  // namespace trainer::train
