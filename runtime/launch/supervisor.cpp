#include "runtime/launch/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <string>

#include "runtime/launch/line_prefixer.h"
#include "runtime/launch/signal_pipe.h"

namespace trainer::launch {
namespace {

using Clock = std::chrono::steady_clock;

struct Stream {
  int fd = -1;
  LinePrefixer prefixer;
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = true;
  Stream out, err;
};

// Reads what is available now; closes the stream at end of file.
void pump(Stream& s) {
  char buf[65536];
  while (s.fd >= 0) {
    ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n > 0) {
      s.prefixer.feed(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return;
    } else {  // EOF or a broken pipe
      s.prefixer.finish();
      ::close(s.fd);
      s.fd = -1;
    }
  }
}

std::string describe_failure(int rank, int status) {
  if (WIFSIGNALED(status))
    return "launch: rank " + std::to_string(rank) + " killed by signal " +
           std::to_string(WTERMSIG(status)) + "\n";
  return "launch: rank " + std::to_string(rank) + " exited with code " +
         std::to_string(WEXITSTATUS(status)) + "\n";
}

class Supervisor {
 public:
  Supervisor(const SuperviseOptions& opts) : opts_(opts) {}

  void start(const std::vector<ChildSpec>& children, int first_rank) {
    for (size_t i = 0; i < children.size(); ++i) {
      // A stop signal or a rank that failed already (a bad config fails at once) ends the
      // starting: with many ranks it takes seconds, too long to leave either unanswered.
      handle_signals();
      reap();
      if (stop_signal_ || first_failure_code_) break;
      const int rank = first_rank + static_cast<int>(i);
      const std::string prefix = "[rank " + std::to_string(rank) + "] ";
      SpawnedChild c = spawn_child(children[i]);  // throws: the destructor cleans up
      ranks_.push_back(Rank{rank,
                            c.pid,
                            true,
                            {c.out_fd, LinePrefixer(prefix, opts_.out_fd)},
                            {c.err_fd, LinePrefixer(prefix, opts_.err_fd)}});
    }
  }

  int run() {
    while (busy()) {
      wait_for_events();
      handle_signals();
      for (Rank& r : ranks_) pump(r.out), pump(r.err);
      reap();
      enforce_deadlines();
    }
    // (stopped before any rank started: the signal's status, not a success)
    if (ranks_.empty() && stop_signal_) return 128 + *stop_signal_;
    return first_failure_code_.value_or(0);
  }

  ~Supervisor() {
    for (Rank& r : ranks_) {
      signal_group(r.pid, SIGKILL);
      if (r.running) ::waitpid(r.pid, nullptr, 0);
      for (int fd : {r.out.fd, r.err.fd})
        if (fd >= 0) ::close(fd);
    }
  }

 private:
  bool busy() const {
    for (const Rank& r : ranks_)
      if (r.running || r.out.fd >= 0 || r.err.fd >= 0) return true;
    return false;
  }

  void wait_for_events() {
    std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
    for (const Rank& r : ranks_)
      for (int fd : {r.out.fd, r.err.fd})
        if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    int timeout_ms = -1;
    if (deadline_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline_ - Clock::now());
      timeout_ms = static_cast<int>(std::max<long long>(0, left.count()) + 1);
    }
    ::poll(fds.data(), fds.size(), timeout_ms);  // EINTR: a signal, handled by the caller
  }

  // A stop signal is forwarded (ranks checkpoint and exit on their own time; SIGHUP, a closed
  // terminal, and SIGUSR1, Slurm's --signal, as SIGTERM), a repeated one too: under Slurm the
  // same SIGTERM comes twice at once (the step's daemon's and srun's). A second Ctrl-C (SIGINT)
  // kills the ranks now.
  void handle_signals() {
    for (const SignalPipe::Caught& caught : signals_.drain()) {
      const int sig = caught.sig;
      if (sig == SIGCHLD) {
        exited_.push_back(caught.pid);  // (reap() takes the ranks in this order first)
        continue;
      }
      if (sig == SIGTSTP) {
        // Ctrl-Z: the ranks stop with the launcher, as torchrun's (which share its process
        // group). Left running they filled their output pipes and blocked mid-step, and their
        // peers timed out naming them.
        signal_running(SIGSTOP);
        ::kill(::getpid(), SIGSTOP);  // here until SIGCONT (the shell's fg or bg)
        signal_running(SIGCONT);
        continue;
      }
      if (sig == SIGCONT) {  // (a SIGCONT sent to the launcher alone)
        signal_running(SIGCONT);
        continue;
      }
      if (sig == SIGINT && interrupted_) {
        write_all(opts_.err_fd, "launch: a second SIGINT (Ctrl-C): killing the ranks\n");
        signal_running(SIGKILL);
        continue;
      }
      interrupted_ = interrupted_ || sig == SIGINT;
      if (!stop_signal_) stop_signal_ = sig == SIGINT ? SIGINT : SIGTERM;
      signal_running(sig == SIGINT ? SIGINT : SIGTERM);
    }
  }

  void signal_running(int sig) {
    for (const Rank& r : ranks_)
      if (r.running) signal_group(r.pid, sig);
  }

  // The ranks that exited, the first to exit first: a rank that died and the peer its death
  // failed at once may both have exited by the time this runs, and the first failure named (and
  // whose code the launch exits with) must be the first one's, not the lower rank's.
  void reap() {
    std::vector<Rank*> order;
    for (const pid_t pid : exited_)
      for (Rank& r : ranks_)
        if (r.pid == pid && std::find(order.begin(), order.end(), &r) == order.end())
          order.push_back(&r);
    exited_.clear();
    for (Rank& r : ranks_)  // (and the rest: a SIGCHLD that came while one was pending is merged)
      if (std::find(order.begin(), order.end(), &r) == order.end()) order.push_back(&r);
    for (Rank* rank : order) {
      Rank& r = *rank;
      int status = 0;
      if (!r.running || ::waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      r.running = false;
      pump(r.out), pump(r.err);  // its last lines come before any message about it
      // Whatever the rank left behind in its group goes with it; then its pipes reach EOF.
      signal_group(r.pid, SIGKILL);
      if (status != 0 && !first_failure_code_) on_first_failure(r, status);
    }
  }

  void on_first_failure(const Rank& r, int status) {
    first_failure_code_ = exit_code_of(status);
    const bool forwarded = stop_signal_ && WIFSIGNALED(status) &&
                           (WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGINT);
    write_all(opts_.err_fd, forwarded ? "launch: rank " + std::to_string(r.rank) +
                                            " ended by the forwarded stop signal before it could "
                                            "checkpoint (it was still starting)\n"
                                      : describe_failure(r.rank, status));
    signal_running(SIGTERM);
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(opts_.grace_s));
  }

  void enforce_deadlines() {
    if (!any_running() && !drain_deadline_) {
      // A process that left its rank's group may hold a pipe open; do not wait on it forever.
      drain_deadline_ = true;
      deadline_ = Clock::now() + std::chrono::seconds(2);
    }
    if (!deadline_ || Clock::now() < *deadline_) return;
    deadline_.reset();
    if (any_running()) return signal_running(SIGKILL);
    for (Rank& r : ranks_)
      for (Stream* s : {&r.out, &r.err})
        if (s->fd >= 0) s->prefixer.finish(), ::close(s->fd), s->fd = -1;
  }

  bool any_running() const {
    for (const Rank& r : ranks_)
      if (r.running) return true;
    return false;
  }

  SuperviseOptions opts_;
  SignalPipe signals_;              // installed before the first spawn, so no SIGCHLD is missed
  std::vector<pid_t> exited_;       // children whose SIGCHLD came, in that order, not yet reaped
  std::optional<int> stop_signal_;  // the first stop signal forwarded (SIGINT or SIGTERM)
  bool interrupted_ = false;        // a SIGINT arrived
  std::vector<Rank> ranks_;
  std::optional<int> first_failure_code_;
  std::optional<Clock::time_point> deadline_;  // SIGKILL (ranks running) or stop draining
  bool drain_deadline_ = false;
};

}  // namespace

int exit_code_of(int wait_status) {
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  return 1;
}

int supervise(const std::vector<ChildSpec>& children, const SuperviseOptions& opts,
              int first_rank) {
  // A reader of our output that goes away (`| head`) must not kill the launcher and, through
  // it, the ranks: writes then fail quietly instead. Children get SIGPIPE back (child_process).
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);
  struct RestoreSigpipe {
    struct sigaction* previous;
    ~RestoreSigpipe() { ::sigaction(SIGPIPE, previous, nullptr); }
  } restore{&previous};
  Supervisor s(opts);
  s.start(children, first_rank);
  return s.run();
}

}  // namespace trainer::launch
