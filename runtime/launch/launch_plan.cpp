#include "runtime/launch/launch_plan.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

#include "runtime/config/run_config.h"

extern char** environ;

namespace trainer::launch {
namespace {

// More ranks than any node has devices (or cores, on the cpu backend) to give them.
constexpr int kMaxProcPerNode = 1024;

[[noreturn]] void bad_option(const std::string& msg) {
  throw config::ConfigError("trainer launch: " + msg);
}

void validate(const LaunchOptions& o) {
  if (o.nproc_per_node < 1 || o.nproc_per_node > kMaxProcPerNode)
    bad_option("--nproc-per-node " + std::to_string(o.nproc_per_node) + " must be in [1, " +
               std::to_string(kMaxProcPerNode) + "] (a rank per device of the node)");
  if (o.nnodes < 1) bad_option("--nnodes " + std::to_string(o.nnodes) + " must be >= 1");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    bad_option("--node-rank " + std::to_string(o.node_rank) + " must be in [0, --nnodes " +
               std::to_string(o.nnodes) + ")");
  if (o.nnodes > 1 && (o.master_addr.empty() || o.master_port == 0))
    bad_option("--nnodes > 1 needs --master-addr and --master-port (the same on every node)");
  if (o.master_port < 0 || o.master_port > 65535)
    bad_option("--master-port " + std::to_string(o.master_port) +
               " must be in [1, 65535] (or 0, the default on one node: a free port)");
  if (o.run_yaml.empty()) bad_option("missing RUN.yaml");
}

bool is_rank_variable(const std::string& kv) {
  static const char* kOurs[] = {
      "RANK=",      "WORLD_SIZE=", "LOCAL_RANK=",  "LOCAL_WORLD_SIZE=", "GROUP_RANK=",
      "NODE_RANK=", "ROLE_RANK=",  "MASTER_ADDR=", "MASTER_PORT=",      "TRAINER_LAUNCH="};
  for (const char* p : kOurs)
    if (kv.rfind(p, 0) == 0) return true;
  return kv.rfind("TORCHELASTIC_", 0) == 0;
}

bool has_variable(const std::vector<std::string>& env, const std::string& key) {
  return std::any_of(env.begin(), env.end(),
                     [&](const std::string& kv) { return kv.rfind(key + "=", 0) == 0; });
}

}  // namespace

std::vector<std::string> rank_environment(const LaunchOptions& o, int local_rank,
                                          const std::vector<std::string>& parent_env,
                                          unsigned cores) {
  std::vector<std::string> env;
  for (const auto& kv : parent_env)
    if (!is_rank_variable(kv)) env.push_back(kv);
  const int rank = o.node_rank * o.nproc_per_node + local_rank;
  auto set = [&](const std::string& k, const std::string& v) { env.push_back(k + "=" + v); };
  set("RANK", std::to_string(rank));
  set("WORLD_SIZE", std::to_string(o.nnodes * o.nproc_per_node));
  set("LOCAL_RANK", std::to_string(local_rank));
  set("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node));
  set("GROUP_RANK", std::to_string(o.node_rank));
  set("NODE_RANK", std::to_string(o.node_rank));
  set("ROLE_RANK", std::to_string(rank));
  set("MASTER_ADDR", o.master_addr.empty() ? "127.0.0.1" : o.master_addr);
  set("MASTER_PORT", std::to_string(o.master_port));
  set("TRAINER_LAUNCH", "1");
  if (!has_variable(parent_env, "OMP_NUM_THREADS"))
    set("OMP_NUM_THREADS", std::to_string(std::max(1u, cores / o.nproc_per_node)));
  // Several ranks share the cores: OpenMP threads that spin while waiting steal them from the
  // ranks that have work (steps several times slower on a loaded machine).
  if (!has_variable(parent_env, "OMP_WAIT_POLICY")) set("OMP_WAIT_POLICY", "PASSIVE");
  return env;
}

std::vector<ChildSpec> plan_children(const LaunchOptions& opts,
                                     const std::vector<std::string>& parent_env, unsigned cores) {
  validate(opts);
  LaunchOptions o = opts;
  if (o.master_port == 0) o.master_port = pick_free_port();
  std::vector<std::string> argv{o.exe, "train", o.run_yaml};
  argv.insert(argv.end(), o.train_args.begin(), o.train_args.end());
  std::vector<ChildSpec> children;
  for (int local = 0; local < o.nproc_per_node; ++local)
    children.push_back({argv, rank_environment(o, local, parent_env, cores)});
  return children;
}

namespace {

// Whether `port` (0: any) can be bound now; the bound port in `got`.
bool bindable(int port, int& got) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("launch: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof addr;
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  if (rc == 0) rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int err = errno;
  ::close(fd);
  errno = err;  // (the bind's, for the caller's message)
  got = ntohs(addr.sin_port);
  return rc == 0;
}

}  // namespace

std::pair<int, int> ephemeral_ports() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (range >> low >> high && low > 0 && low <= high && high <= 65535) return {low, high};
  return {0, 0};
}

std::pair<int, int> picked_port_range() {
  const auto [low, high] = ephemeral_ports();
  if (low == 0) return {0, 0};
  // below the ephemeral ports, under torchrun's 29500 and Kubernetes' NodePorts (30000-32767)
  if (const int end = std::min(low, kHighestPickedPort + 1); end - kLowestPickedPort >= 1000)
    return {kLowestPickedPort, end - 1};
  if (65535 - high >= 1000) return {high + 1, 65535};  // (a range widened down: above it)
  return {0, 0};
}

int pick_free_port() {
  // Not an ephemeral port: the kernel never hands one of those to another process's connection
  // in the time between this check and rank 0's bind (a port from bind(0) it may).
  if (const auto [first, last] = picked_port_range(); first > 0) {
    std::random_device entropy;
    std::uniform_int_distribution<int> pick(first, last);
    for (int attempt = 0; attempt < 64; ++attempt)
      if (int got = 0; bindable(pick(entropy), got)) return got;
  }
  int got = 0;
  if (!bindable(0, got))
    throw std::runtime_error(std::string("launch: free port: ") + std::strerror(errno));
  return got;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  return env;
}

}  // namespace trainer::launch
