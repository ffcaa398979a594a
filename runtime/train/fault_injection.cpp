#include "runtime/train/fault_injection.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace trainer::train {

FaultInjector::FaultInjector(int rank) {
  const char* spec = std::getenv("TRAINER_TEST_FAULT");
  if (spec == nullptr || *spec == 0) return;
  int r = -1, s = -1;
  char kind[32] = {0};
  const std::string kinds = "throw|exit|segv|sigterm|sigterm_in_eval|kill_after_save";
  if (std::sscanf(spec, "rank=%d,step=%d,kind=%31s", &r, &s, kind) != 3 ||
      ("|" + kinds + "|").find("|" + std::string(kind) + "|") == std::string::npos)
    throw std::runtime_error(std::string("TRAINER_TEST_FAULT = '") + spec +
                             "': expected rank=R,step=S,kind=" + kinds);
  if (r == rank) {
    step_ = s;
    kind_ = kind;
  }
}

void FaultInjector::after_save(int step) const {
  if (step == step_ && kind_ == "kill_after_save") std::raise(SIGKILL);
}

void FaultInjector::in_eval(int step) const {
  if (step == step_ && kind_ == "sigterm_in_eval") std::raise(SIGTERM);  // (caught)
}

void FaultInjector::at_step(int step) const {
  if (step != step_ || kind_ == "kill_after_save" || kind_ == "sigterm_in_eval") return;
  if (kind_ == "exit") std::_Exit(3);
  if (kind_ == "segv") std::raise(SIGSEGV);
  if (kind_ == "sigterm") {
    std::raise(SIGTERM);  // caught (stop_signals.h): the run stops after this step
    return;
  }
  throw std::runtime_error("injected fault (TRAINER_TEST_FAULT) at step " + std::to_string(step));
}

}  // namespace trainer::train
