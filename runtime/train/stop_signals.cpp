#include "runtime/train/stop_signals.h"

#include <csignal>

namespace trainer::train {
namespace {

// Every signal only asks for the stop, a repeated one too: under Slurm a task gets SIGTERM from its
// step's daemon and again from srun, which forwards its own; under torchrun a terminal's Ctrl-C
// reaches the workers and torchrun forwards it. SIGQUIT (Ctrl-\) and SIGKILL still end it at once.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
}

}  // namespace

void StopSignals::catch_now() {
  if (catching_) return;
  g_stop_signal = 0;
  struct sigaction caught {};
  caught.sa_handler = on_stop_signal;
  caught.sa_flags = SA_RESTART;  // (as std::signal sets it: system calls resume after the handler)
  sigemptyset(&caught.sa_mask);
  sigaction(SIGTERM, &caught, &previous_term_);
  sigaction(SIGINT, &caught, &previous_int_);
  sigaction(SIGUSR1, &caught, &previous_usr1_);
  catching_ = true;
}

StopSignals::~StopSignals() {
  if (!catching_) return;
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGUSR1, &previous_usr1_, nullptr);
}

bool StopSignals::received() {
  return g_stop_signal != 0;
}

}  // namespace trainer::train
