// arm_exit_deadline (exit_deadline.h): a process that hangs after arming it ends with the armed
// status near the deadline; one that exits first keeps its own status. Each case runs in a forked
// child (the deadline ends the whole process).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <thread>

#include "runtime/dist/exit_deadline.h"

using namespace trainer;

namespace {

struct Ended {
  int status = -1;  // the child's exit status (-1: killed by a signal)
  double seconds = 0;
};

Ended run_child(const std::function<int()>& body) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) std::_Exit(body());
  int raw = 0;
  REQUIRE(waitpid(pid, &raw, 0) == pid);
  Ended e;
  e.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return e;
}

}  // namespace

TEST_CASE("exit_deadline_ends_a_hung_process_with_the_armed_status", "[dist][faults]") {
  const Ended e = run_child([] {
    dist::arm_exit_deadline(0.3, 7, "test: a collective failed");
    dist::arm_exit_deadline(0.01, 9, "test: a later arming");  // ignored: the first wins
    std::this_thread::sleep_for(std::chrono::seconds(30));     // a teardown that hangs
    return 0;
  });
  CHECK(e.status == 7);
  CHECK(e.seconds >= 0.3);
  CHECK(e.seconds < 10);
}

TEST_CASE("exit_deadline_leaves_a_process_that_exits_in_time_its_own_status", "[dist][faults]") {
  const Ended e = run_child([] {
    if (dist::exit_deadline_armed()) return 4;
    dist::arm_exit_deadline(5, 7, "test: a collective failed");
    return dist::exit_deadline_armed() ? 3 : 5;
  });
  CHECK(e.status == 3);
  CHECK(e.seconds < 5);
}
