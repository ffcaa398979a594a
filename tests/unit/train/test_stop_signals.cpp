// StopSignals: SIGTERM and SIGINT set the stop flag while caught, and get their earlier action (in
// the trainer the default: the process ends) back only when the holder goes, not before.
#include <catch2/catch.hpp>
#include <csignal>

#include "runtime/train/stop_signals.h"

using trainer::train::StopSignals;

namespace {

// The handler in place now (Catch2 has its own for SIGTERM and SIGINT while a test runs).
void (*handler_of(int sig))(int) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  return now.sa_handler;
}

}  // namespace

TEST_CASE("stop_signals_are_caught_from_catch_now_until_the_holder_goes", "[train][signals]") {
  const auto before_term = handler_of(SIGTERM), before_int = handler_of(SIGINT);
  {
    StopSignals signals;
    CHECK(handler_of(SIGTERM) == before_term);  // setup: a signal still ends the process
    signals.catch_now();
    CHECK_FALSE(StopSignals::received());
    std::raise(SIGTERM);  // would end this test binary if it were not caught
    CHECK(StopSignals::received());
    std::raise(SIGINT);
    CHECK(StopSignals::received());
    CHECK(handler_of(SIGTERM) != before_term);
    CHECK(handler_of(SIGINT) != before_int);
  }
  CHECK(handler_of(SIGTERM) == before_term);
  CHECK(handler_of(SIGINT) == before_int);
  StopSignals again;
  again.catch_now();
  CHECK_FALSE(StopSignals::received());  // a new run starts without the last one's request
}
