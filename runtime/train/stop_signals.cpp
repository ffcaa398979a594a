#include "runtime/train/stop_signals.h"

#include <csignal>

namespace trainer::train {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
// The first signal asks for a stop; a second one (Ctrl-C again) ends the process as the default
// action would: a stop or a failure's teardown that waits on a hung peer can take a timeout.
extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    std::signal(sig, SIG_DFL);  // (both async-signal-safe)
    std::raise(sig);
    return;
  }
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
  catching_ = true;
}

StopSignals::~StopSignals() {
  if (!catching_) return;
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
}

bool StopSignals::received() {
  return g_stop_signal != 0;
}

}  // namespace trainer::train
