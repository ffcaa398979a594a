#include "runtime/launch/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace trainer::launch {
namespace {

struct Pipe {
  int read_end = -1, write_end = -1;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("launch: pipe: ") + std::strerror(errno));
  return {fds[0], fds[1]};
}

std::string env_value(const std::vector<std::string>& env, const std::string& key) {
  for (const auto& kv : env)
    if (kv.rfind(key + "=", 0) == 0) return kv.substr(key.size() + 1);
  return "";
}

// execve does not search PATH; resolve here, before fork, where allocating is allowed.
std::string resolve_program(const std::string& name, const std::vector<std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::string path = env_value(env, "PATH");
  if (path.empty()) path = "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    if (colon == std::string::npos) colon = path.size();
    std::string dir = path.substr(start, colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = colon + 1;
  }
  throw std::runtime_error("launch: cannot run '" + name + "': not found in PATH");
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// In the forked child: only async-signal-safe calls until exec.
[[noreturn]] void exec_child(const char* program, char** argv, char** envp, pid_t parent, Pipe out,
                             Pipe err, int error_fd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took effect
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &dfl, nullptr);  // the launcher ignores it; ranks get the usual default
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(out.write_end, STDOUT_FILENO);
  ::dup2(err.write_end, STDERR_FILENO);
  ::execve(program, argv, envp);
  int e = errno;
  ssize_t ignored = ::write(error_fd, &e, sizeof e);
  (void)ignored;
  ::_exit(127);
}

}  // namespace

SpawnedChild spawn_child(const ChildSpec& spec) {
  if (spec.argv.empty()) throw std::runtime_error("launch: empty command");
  const std::string program = resolve_program(spec.argv[0], spec.env);
  std::vector<char*> argv = c_strings(spec.argv), envp = c_strings(spec.env);
  Pipe out = make_pipe(), err = make_pipe(), exec_error = make_pipe();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("launch: fork: ") + std::strerror(errno));
  if (pid == 0)
    exec_child(program.c_str(), argv.data(), envp.data(), parent, out, err, exec_error.write_end);
  ::setpgid(pid, pid);  // also here, so the group exists before we might signal it
  for (int fd : {out.write_end, err.write_end, exec_error.write_end}) ::close(fd);

  int child_errno = 0;  // EOF (exec succeeded: close-on-exec) or the errno of a failed exec
  ssize_t n;
  while ((n = ::read(exec_error.read_end, &child_errno, sizeof child_errno)) < 0 &&
         errno == EINTR) {
  }
  ::close(exec_error.read_end);
  if (n > 0) {
    for (int fd : {out.read_end, err.read_end}) ::close(fd);
    ::waitpid(pid, nullptr, 0);  // it has already _exit(127)ed
    throw std::runtime_error("launch: cannot run '" + program + "': " + std::strerror(child_errno));
  }
  for (int fd : {out.read_end, err.read_end}) ::fcntl(fd, F_SETFL, O_NONBLOCK);
  return {pid, out.read_end, err.read_end};
}

void signal_group(pid_t pgid, int sig) {
  if (pgid > 0) ::kill(-pgid, sig);
}

}  // namespace trainer::launch
