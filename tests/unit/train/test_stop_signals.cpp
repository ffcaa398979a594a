// StopSignals: while caught, SIGTERM and SIGINT set the stop flag, repeated ones too; the earlier
// actions (in the trainer the defaults) come back only when the holder goes.
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>
#include <csignal>

#include "runtime/train/stop_signals.h"

using trainer::train::StopSignals;

namespace {

// The action in place now (Catch2 has its own for SIGTERM and SIGINT while a test runs).
struct sigaction action_of(int sig) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  return now;
}

// How a child that catches, then raises `first` and `second`, ends: the signal that killed it,
// or -exit code (2: the first one was not caught, 3: it survived both).
int end_of_child(int first, int second) {
  const pid_t pid = fork();
  if (pid == 0) {
    StopSignals signals;
    signals.catch_now();
    std::raise(first);
    if (!StopSignals::received()) _exit(2);
    std::raise(second);
    _exit(3);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : -WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("stop_signals_are_caught_from_catch_now_until_the_holder_goes", "[train][signals]") {
  const auto before_term = action_of(SIGTERM).sa_handler, before_int = action_of(SIGINT).sa_handler;
  {
    StopSignals signals;
    CHECK(action_of(SIGTERM).sa_handler == before_term);  // setup: a signal still ends the process
    signals.catch_now();
    CHECK_FALSE(StopSignals::received());
    std::raise(SIGINT);  // would end this test binary if it were not caught
    CHECK(StopSignals::received());
    CHECK(action_of(SIGTERM).sa_handler != before_term);
    CHECK(action_of(SIGINT).sa_handler != before_int);
    // interrupted system calls resume (as with std::signal): sockets and Gloo see no EINTR
    CHECK((action_of(SIGTERM).sa_flags & SA_RESTART) != 0);
  }
  CHECK(action_of(SIGTERM).sa_handler == before_term);
  CHECK(action_of(SIGINT).sa_handler == before_int);
  StopSignals again;
  again.catch_now();
  CHECK_FALSE(StopSignals::received());  // a new run starts without the last one's request
}

// Slurm's step daemon and srun each send the task a SIGTERM; torchrun forwards the Ctrl-C its
// workers already got: a repeat must not end the run before its checkpoint.
TEST_CASE("a_repeated_stop_signal_still_only_asks_for_the_stop", "[train][signals]") {
  CHECK(end_of_child(SIGTERM, SIGTERM) == -3);
  CHECK(end_of_child(SIGINT, SIGTERM) == -3);
  CHECK(end_of_child(SIGTERM, SIGINT) == -3);
}
