#include "runtime/launch/signal_pipe.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/core/check.h"

namespace trainer::launch {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGCHLD, SIGTSTP, SIGCONT};
constexpr int kCount = sizeof kSignals / sizeof kSignals[0];
int g_write_fd = -1;
struct sigaction g_previous[kCount];

void on_signal(int sig, siginfo_t* info, void*) {
  const int saved = errno;
  // one write of a whole record (below PIPE_BUF: never split or interleaved)
  const SignalPipe::Caught c{sig, sig == SIGCHLD && info != nullptr ? info->si_pid : 0};
  ssize_t ignored = ::write(g_write_fd, &c, sizeof c);  // a full pipe already holds a wake-up
  (void)ignored;
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe() {
  TRAINER_CHECK(g_write_fd < 0, "only one SignalPipe at a time");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(std::string("launch: pipe: ") + std::strerror(errno));
  read_fd_ = fds[0];
  g_write_fd = fds[1];
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < kCount; ++i) {
    ::sigaction(kSignals[i], nullptr, &g_previous[i]);
    // nohup's ignored SIGHUP stays ignored: the run outlives the terminal, as nohup asked
    if (kSignals[i] == SIGHUP && g_previous[i].sa_handler == SIG_IGN) continue;
    sa.sa_flags = SA_RESTART | SA_SIGINFO | (kSignals[i] == SIGCHLD ? SA_NOCLDSTOP : 0);
    ::sigaction(kSignals[i], &sa, nullptr);
  }
}

SignalPipe::~SignalPipe() {
  for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  ::close(g_write_fd);
  ::close(read_fd_);
  g_write_fd = -1;
}

std::vector<SignalPipe::Caught> SignalPipe::drain() {
  std::vector<Caught> caught;
  Caught buf[16];  // (whole records: every write is one)
  ssize_t n;
  while ((n = ::read(read_fd_, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    for (ssize_t i = 0; i < n / static_cast<ssize_t>(sizeof(Caught)); ++i) caught.push_back(buf[i]);
  return caught;
}

}  // namespace trainer::launch
