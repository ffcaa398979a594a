#include "runtime/train/stop_signals.h"

#include <csignal>

namespace trainer::train {
namespace {

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
