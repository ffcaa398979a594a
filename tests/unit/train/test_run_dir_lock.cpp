// RunDirLock: one run at a time in a directory; the lock goes with its holder, however that ends.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <fstream>
#include <sstream>

#include "runtime/config/run_config.h"
#include "runtime/train/run_dir_lock.h"
#include "tests/unit/temp_dir.h"

using Catch::Contains;
using trainer::config::ConfigError;
using trainer::train::RunDirLock;

namespace {

std::string holder_of(const std::string& dir) {
  std::ifstream in(dir + "/" + RunDirLock::kFileName);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("a_run_directory_is_held_by_one_run_at_a_time", "[train][lock]") {
  const trainer::testing::TempDir tmp("run_dir_lock");
  const std::string dir = tmp.file("run/out");  // created by the lock
  {
    const RunDirLock held("run.out_dir", dir);
    const std::string holder = "pid " + std::to_string(::getpid()) + " on ";
    CHECK_THAT(holder_of(dir), Contains(holder));
    // (flock belongs to the open file, so a second lock in this process is refused too)
    CHECK_THROWS_AS(RunDirLock("run.out_dir", dir), ConfigError);
    CHECK_THROWS_WITH(
        RunDirLock("run.out_dir", dir),
        Contains("run.out_dir = \"" + dir + "\" is in use by another run (" + holder) &&
            Contains("give this run another run.out_dir"));
    CHECK_NOTHROW(RunDirLock("checkpoint.dir", tmp.file("other")));  // another directory
  }
  CHECK_NOTHROW(RunDirLock("run.out_dir", dir));  // free again once its holder goes
}

TEST_CASE("a_run_killed_with_sigkill_leaves_its_directory_free", "[train][lock]") {
  const trainer::testing::TempDir tmp("run_dir_lock_kill");
  const std::string dir = tmp.file("out");
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  if (child == 0) {  // takes the lock, says so, and waits to be killed (never back into Catch2)
    try {
      const RunDirLock held("run.out_dir", dir);
      const char byte = 1;
      if (::write(ready[1], &byte, 1) != 1) _exit(2);
      for (;;) ::pause();
    } catch (...) {
      _exit(3);
    }
  }
  ::close(ready[1]);  // the read below then ends if the child does
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  CHECK_THROWS_WITH(RunDirLock("run.out_dir", dir),
                    Contains("in use by another run (pid " + std::to_string(child) + " on "));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK_NOTHROW(RunDirLock("run.out_dir", dir));
  ::close(ready[0]);
}
