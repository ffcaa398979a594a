// supervise(): exit codes, group abort, signal forwarding, prefixed output and cleanup, with
// /bin/sh children standing in for ranks.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "launch_test_util.h"
#include "runtime/launch/supervisor.h"

using launch_test::Capture;
using launch_test::lines;
using launch_test::seconds_since;
using launch_test::sh;
using trainer::launch::ChildSpec;
using trainer::launch::supervise;
using trainer::launch::SuperviseOptions;
using Clock = std::chrono::steady_clock;

namespace {

struct Result {
  int code;
  std::string out, err;
  double seconds;
};

Result run(const std::vector<ChildSpec>& kids, double grace_s = 10) {
  Capture out, err;
  SuperviseOptions o;
  o.grace_s = grace_s;
  o.out_fd = out.fd();
  o.err_fd = err.fd();
  auto t0 = Clock::now();
  int code = supervise(kids, o);
  return {code, out.text(), err.text(), seconds_since(t0)};
}

// Sends `sig` to this process after `delay_s`, from another thread.
std::thread signal_self_later(int sig, double delay_s) {
  return std::thread([sig, delay_s] {
    std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
    ::kill(::getpid(), sig);
  });
}

// Where shell children mark that their traps are set (`mark(i)`), so that a signal is sent only
// then: sent at a fixed delay, it found a child of a loaded machine still starting (the default
// action, not the trap: "ended by the forwarded stop signal") or, once that ended the run, this
// process without the launcher's handlers (Catch2's "fatal error condition: SIGTERM").
class Marks {
 public:
  Marks() {
    std::string t = (std::filesystem::temp_directory_path() / "supervisor_test.XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    dir_ = t;
  }
  ~Marks() { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string mark(int i) const { return "touch " + path(std::to_string(i)); }
  // A shell loop that waits for `name` (created by `touch`).
  std::string wait_for(const std::string& name) const {
    return "until [ -e " + path(name) + " ]; do sleep 0.02; done";
  }
  void touch(const std::string& name) const { std::ofstream(path(name)).put('\n'); }
  // Up to 60 s for marks 0..n-1.
  bool wait_for_marks(int n) const {
    for (auto until = Clock::now() + std::chrono::seconds(60); Clock::now() < until;) {
      int have = 0;
      for (int i = 0; i < n; ++i) have += std::filesystem::exists(path(std::to_string(i)));
      if (have == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

 private:
  std::string dir_;
};

// Sends `sigs` to this process, `gap_s` apart, once `n` children have set their marks; then
// creates the mark "sent".
std::thread signal_self_when_marked(const Marks& m, int n, std::vector<int> sigs,
                                    double gap_s = 0) {
  return std::thread([&m, n, sigs, gap_s] {
    if (m.wait_for_marks(n))
      for (size_t i = 0; i < sigs.size(); ++i) {
        if (i) std::this_thread::sleep_for(std::chrono::duration<double>(gap_s));
        ::kill(::getpid(), sigs[i]);
      }
    m.touch("sent");
  });
}

bool process_gone(pid_t pid) {
  for (int i = 0; i < 200; ++i) {  // up to 2 s for the reparented process to be reaped
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    if (!std::getline(stat, s)) return true;
    auto close_paren = s.rfind(')');
    if (close_paren != std::string::npos && s.substr(close_paren + 2, 1) == "Z") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Whether `pid` is stopped (state T in /proc/PID/stat). Raw reads: a forked child of this
// multithreaded process must not allocate.
bool stopped(pid_t pid) {
  char path[64], text[512];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return false;
  text[n] = 0;
  const char* close_paren = std::strrchr(text, ')');
  return close_paren != nullptr && close_paren[1] == ' ' && close_paren[2] == 'T';
}

}  // namespace

TEST_CASE("all_ranks_exiting_zero_gives_zero", "[launch]") {
  Result r = run({sh("exit 0"), sh("true"), sh("exit 0")});
  INFO("stderr: " << r.err);
  CHECK(r.code == 0);
  CHECK(r.err.empty());
}

TEST_CASE("first_failing_rank_sets_the_code_and_the_others_are_killed_quickly", "[launch]") {
  Result r = run({sh("sleep 30"), sh("exit 3"), sh("sleep 30")});
  INFO("stderr: " << r.err << " seconds " << r.seconds);
  CHECK(r.code == 3);
  CHECK(r.err.find("launch: rank 1 exited with code 3\n") != std::string::npos);
  CHECK(r.err.find("rank 0 ") == std::string::npos);  // only the first failure is reported
  CHECK(r.seconds < 5);
}

TEST_CASE("a_rank_killed_by_a_signal_exits_128_plus_the_signal", "[launch]") {
  Result r = run({sh("sleep 30"), sh("kill -9 $$")});
  INFO("stderr: " << r.err);
  CHECK(r.code == 128 + 9);
  CHECK(r.err.find("launch: rank 1 killed by signal 9\n") != std::string::npos);
}

TEST_CASE("ranks_ignoring_sigterm_get_sigkill_after_the_grace_period", "[launch]") {
  const double grace = 0.5;
  // The trap's "ignore" is inherited by sleep across exec. (Rank 1 fails once rank 0 ignores
  // SIGTERM: after a fixed delay, rank 0 might not have set its trap yet on a loaded machine.)
  Marks m;
  Result r = run({sh("trap '' TERM; " + m.mark(0) + "; sleep 30"),
                  sh(m.wait_for("0") + "; sleep 0.2; exit 5")},
                 grace);
  INFO("stderr: " << r.err << " seconds " << r.seconds);
  CHECK(r.code == 5);
  CHECK(r.seconds >= grace);
  CHECK(r.seconds < grace + 5);
}

TEST_CASE("sigterm_to_the_launcher_is_forwarded_and_clean_exits_give_zero", "[launch]") {
  Marks m;
  auto graceful = [&](int i) {
    return sh("trap 'echo checkpointed; exit 0' TERM; " + m.mark(i) + "; sleep 30 & wait");
  };
  std::thread killer = signal_self_when_marked(m, 2, {SIGTERM});
  Result r = run({graceful(0), graceful(1)});
  killer.join();
  INFO("stdout: " << r.out << "stderr: " << r.err << " seconds " << r.seconds);
  CHECK(r.code == 0);
  CHECK(r.out.find("[rank 0] checkpointed\n") != std::string::npos);
  CHECK(r.out.find("[rank 1] checkpointed\n") != std::string::npos);
  CHECK(r.seconds < 5);
}

// Ranks that ignore the forwarded stop (a hung rank, a long save): a second Ctrl-C kills them.
TEST_CASE("a_second_sigint_kills_ranks_that_ignore_the_first", "[launch]") {
  Marks m;
  std::thread killer = signal_self_when_marked(m, 2, {SIGINT, SIGINT}, 0.5);
  Result r = run({sh("trap '' TERM INT; " + m.mark(0) + "; sleep 30"),
                  sh("trap '' TERM INT; " + m.mark(1) + "; sleep 30")});
  killer.join();
  INFO("stderr: " << r.err << " seconds " << r.seconds);
  CHECK(r.code == 128 + SIGKILL);
  CHECK(r.err.find("launch: a second SIGINT (Ctrl-C): killing the ranks") != std::string::npos);
  CHECK(r.seconds < 5);
}

// Under Slurm the same SIGTERM arrives twice at once (the step's daemon's and srun's): both are
// forwarded, and the ranks still checkpoint and exit 0.
TEST_CASE("sigterm_twice_is_forwarded_twice_and_kills_nothing", "[launch]") {
  // (the save lasts until both SIGTERMs were sent: the second comes while it runs)
  Marks m;
  auto graceful = [&](int i) {
    return sh("trap '" + m.wait_for("sent") + "; echo saved; exit 0' TERM; " + m.mark(i) +
              "; sleep 30 & wait");
  };
  std::thread killer = signal_self_when_marked(m, 2, {SIGTERM, SIGTERM}, 0.2);
  Result r = run({graceful(0), graceful(1)});
  killer.join();
  INFO("stdout: " << r.out << "stderr: " << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("[rank 0] saved\n") != std::string::npos);
  CHECK(r.out.find("[rank 1] saved\n") != std::string::npos);
}

// nohup ignores SIGHUP so that a run outlives its terminal: the launcher keeps it ignored.
TEST_CASE("a_sighup_ignored_at_start_stays_ignored", "[launch]") {
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGHUP, &ignore, &previous);
  Marks m;
  std::thread hangup = signal_self_when_marked(m, 1, {SIGHUP});
  // (it finishes 0.3 s after the SIGHUP was sent: a forwarded one would have stopped it)
  Result r = run({sh("trap 'echo stopped; exit 0' TERM; " + m.mark(0) + "; " + m.wait_for("sent") +
                     "; sleep 0.3 & wait; echo finished")});
  hangup.join();
  ::sigaction(SIGHUP, &previous, nullptr);
  INFO("stdout: " << r.out << "stderr: " << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("[rank 0] finished\n") != std::string::npos);
}

// SIGHUP (a closed terminal) and SIGUSR1 (Slurm's --signal) reach the ranks as SIGTERM.
TEST_CASE("sighup_and_sigusr1_to_the_launcher_are_forwarded_as_sigterm", "[launch]") {
  for (int sig : {SIGHUP, SIGUSR1}) {
    Marks m;
    auto graceful = [&](int i) {
      return sh("trap 'echo stopped; exit 0' TERM; " + m.mark(i) + "; sleep 30 & wait");
    };
    std::thread killer = signal_self_when_marked(m, 2, {sig});
    Result r = run({graceful(0), graceful(1)});
    killer.join();
    INFO("signal " << sig << " stdout: " << r.out << "stderr: " << r.err);
    CHECK(r.code == 0);
    CHECK(r.out.find("[rank 0] stopped\n") != std::string::npos);
    CHECK(r.out.find("[rank 1] stopped\n") != std::string::npos);
  }
}

// A rank that has failed while the others are still being started ends the starting: the ranks
// after it never run (with a bad config, every one of hundreds would fail the same way).
TEST_CASE("a_rank_failing_while_others_start_ends_the_starting", "[launch]") {
  std::vector<ChildSpec> kids = {sh("exit 2")};
  for (int k = 0; k < 200; ++k) kids.push_back(sh("echo started"));
  Result r = run(kids);
  INFO("stderr: " << r.err);
  CHECK(r.code == 2);
  CHECK(lines(r.out).size() < 50);
}

TEST_CASE("sigint_forwarded_to_plain_sleepers_ends_them_by_that_signal", "[launch]") {
  std::thread killer = signal_self_later(SIGINT, 0.3);
  // exec sleep: the shell's own non-interactive handling of SIGINT is not in the way.
  Result r = run({sh("exec sleep 30"), sh("exec sleep 30")});
  killer.join();
  INFO("stderr: " << r.err);
  CHECK(r.code == 128 + SIGINT);
  CHECK(r.seconds < 5);
}

TEST_CASE("every_output_line_is_whole_and_prefixed_with_its_rank", "[launch]") {
  const int n_lines = 300;
  const std::string payload(200, 'x');
  std::vector<ChildSpec> kids;
  for (int k = 0; k < 3; ++k)
    kids.push_back(sh("i=0; while [ $i -lt " + std::to_string(n_lines) + " ]; do echo " +
                      std::to_string(k) + payload + "; echo err" + std::to_string(k) +
                      " >&2; i=$((i+1)); done; printf 'tail-no-newline'"));
  Result r = run(kids);
  REQUIRE(r.code == 0);
  std::vector<int> per_rank(3, 0);
  for (const auto& line : lines(r.out)) {
    bool ok = false;
    for (int k = 0; k < 3; ++k) {
      std::string pre = "[rank " + std::to_string(k) + "] ";
      if (line == pre + std::to_string(k) + payload) ++per_rank[k], ok = true;
      if (line == pre + "tail-no-newline") ok = true;
    }
    INFO("stdout line: '" << line << "'");
    CHECK(ok);
  }
  for (int k = 0; k < 3; ++k) CHECK(per_rank[k] == n_lines);
  for (const auto& line : lines(r.err)) {
    INFO("stderr line: '" << line << "'");
    CHECK((line.rfind("[rank ", 0) == 0 && line.find("] err") == 7));
  }
  CHECK(lines(r.err).size() == 3u * n_lines);
}

TEST_CASE("children_see_their_own_environment", "[launch]") {
  std::vector<ChildSpec> kids;
  for (int k = 0; k < 2; ++k) {
    ChildSpec c = sh("echo rank=$RANK world=$WORLD_SIZE");
    c.env = {"PATH=/usr/bin:/bin", "RANK=" + std::to_string(k), "WORLD_SIZE=2"};
    kids.push_back(c);
  }
  Result r = run(kids);
  CHECK(r.code == 0);
  CHECK(r.out.find("[rank 0] rank=0 world=2\n") != std::string::npos);
  CHECK(r.out.find("[rank 1] rank=1 world=2\n") != std::string::npos);
}

TEST_CASE("processes_left_behind_by_a_rank_do_not_survive", "[launch]") {
  // The rank starts a background sleep that holds its stdout, prints its pid, and exits 0.
  Result r = run({sh("sleep 30 & echo $!; exit 0")});
  REQUIRE(r.code == 0);
  auto out = lines(r.out);
  REQUIRE(out.size() == 1);
  pid_t pid = std::stoi(out[0].substr(std::string("[rank 0] ").size()));
  INFO("left-behind pid " << pid << " seconds " << r.seconds);
  CHECK(process_gone(pid));
  CHECK(r.seconds < 1.5);  // the group kill closed the pipe, not the 2 s drain limit
}

TEST_CASE("a_program_that_cannot_start_is_an_error_naming_it", "[launch]") {
  ChildSpec bad{{"/nonexistent/trainer-xyz", "train"}, {}};
  CHECK_THROWS_WITH(run({sh("sleep 30"), bad}), Catch::Contains("/nonexistent/trainer-xyz"));
  ChildSpec not_in_path{{"no-such-program-xyz"}, {"PATH=/bin"}};
  CHECK_THROWS_WITH(run({not_in_path}), Catch::Contains("no-such-program-xyz"));
}

TEST_CASE("a_closed_output_pipe_does_not_stop_the_launcher", "[launch]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  ::close(fds[0]);  // nobody reads the ranks' output
  SuperviseOptions o;
  o.out_fd = fds[1];
  Capture err;
  o.err_fd = err.fd();
  int code = supervise({sh("echo lost; exit 4")}, o);
  ::close(fds[1]);
  CHECK(code == 4);  // we survived the write and still report the rank's code
  CHECK(err.text().find("launch: rank 0 exited with code 4") != std::string::npos);
}

TEST_CASE("ranks_get_default_sigpipe_even_though_the_launcher_ignores_it", "[launch]") {
  Result r = run({sh("exec grep SigIgn /proc/self/status")});
  REQUIRE(r.code == 0);
  auto pos = r.out.find("SigIgn:");
  REQUIRE(pos != std::string::npos);
  unsigned long long ignored = std::stoull(r.out.substr(pos + 7), nullptr, 16);
  INFO("rank's ignored-signal mask " << std::hex << ignored);
  CHECK((ignored & (1ull << (SIGPIPE - 1))) == 0);
}

// Ctrl-Z (SIGTSTP) stops the ranks with the launcher, and fg (SIGCONT) resumes both: ranks left
// running would fill their output pipes and block mid-step while their peers time out. Each rank
// prints the time every 50 ms; while the launcher is stopped (1.5 s, until a forked process sends
// SIGCONT) none prints, so each rank's output has a gap of over a second, and both finish.
// (SIGTSTP is sent once both have printed 3 times, SIGCONT 1.5 s after it: at fixed times, a
// rank of a loaded machine might not have printed yet, or the stop come late.)
TEST_CASE("ctrl_z_stops_the_ranks_with_the_launcher_and_fg_resumes_them", "[launch]") {
  Marks m;
  auto ticker = [&](int i) {
    return sh("for i in $(seq 40); do date +%s.%N; [ $i != 3 ] || " + m.mark(i) +
              "; sleep 0.05; done");
  };
  std::thread tstp = signal_self_when_marked(m, 2, {SIGTSTP});
  const pid_t self = ::getpid();
  const std::string sent = m.path("sent");
  const pid_t waker = ::fork();
  if (waker == 0) {  // (the whole launcher process stops: SIGCONT must come from outside)
    // Until the SIGTSTP was sent, or the launcher stopped before its sender marked it so.
    for (int i = 0; i < 6000 && ::access(sent.c_str(), F_OK) != 0 && !stopped(self); ++i)
      ::usleep(10'000);
    ::usleep(1'500'000);
    ::kill(self, SIGCONT);
    ::_exit(0);
  }
  Result r = run({ticker(0), ticker(1)});
  tstp.join();
  ::waitpid(waker, nullptr, 0);
  INFO("stdout: " << r.out << "stderr: " << r.err << " seconds " << r.seconds);
  CHECK(r.code == 0);
  for (const char* prefix : {"[rank 0] ", "[rank 1] "}) {
    std::vector<double> times;
    for (const std::string& line : lines(r.out))
      if (line.rfind(prefix, 0) == 0) times.push_back(std::stod(line.substr(9)));
    CHECK(times.size() == 40);
    double gap = 0;
    for (size_t i = 1; i < times.size(); ++i) gap = std::max(gap, times[i] - times[i - 1]);
    CHECK(gap > 1.0);
  }
}

// Ranks that exit one after the other while the launcher cannot reap (here stopped; under load,
// not scheduled): the first to exit is the failure named, and its code is the launch's, not the
// lower rank's. Rank 1 exits 3 at 0.2 s, rank 0 exits 5 at 0.5 s; the launcher, in a forked
// process, is stopped from 0.1 s to 0.9 s and finds both exited.
TEST_CASE("the_first_rank_to_exit_is_named_when_several_exited_at_once", "[launch]") {
  Capture out, err;
  const pid_t launcher = ::fork();
  if (launcher == 0) {
    SuperviseOptions o;
    o.out_fd = out.fd();
    o.err_fd = err.fd();
    ::_exit(supervise({sh("sleep 0.5; exit 5"), sh("sleep 0.2; exit 3")}, o));
  }
  ::usleep(100'000);
  ::kill(launcher, SIGSTOP);
  ::usleep(800'000);
  ::kill(launcher, SIGCONT);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  INFO("stderr: " << err.text());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  CHECK(err.text().find("launch: rank 1 exited with code 3") != std::string::npos);
}
