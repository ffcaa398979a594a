#pragma once
// What `trainer launch` runs: one `trainer train RUN.yaml [args]` per local rank with the
// torchrun-compatible environment
//   RANK = node_rank * nproc_per_node + local_rank, WORLD_SIZE = nnodes * nproc_per_node,
//   LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK = NODE_RANK = node_rank, ROLE_RANK = RANK,
//   MASTER_ADDR, MASTER_PORT, TRAINER_LAUNCH=1,
// and OMP_NUM_THREADS = max(1, cores / nproc_per_node) unless already set, so local ranks do not
// oversubscribe the cpu. Inherited TORCHELASTIC_* variables are dropped: our children are not
// under an elastic agent, so the rendezvous store uses MASTER_PORT itself.
#include <string>
#include <utility>
#include <vector>

#include "runtime/launch/child_process.h"

namespace trainer::launch {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;  // empty: 127.0.0.1 (single node only)
  int master_port = 0;      // 0: a free port (single node only)
  std::string exe;          // the trainer binary (usually /proc/self/exe resolved)
  std::string run_yaml;
  std::vector<std::string> train_args;  // passed verbatim after RUN.yaml
};

// Throws config::ConfigError for inconsistent options (naming the option).
std::vector<ChildSpec> plan_children(const LaunchOptions& opts,
                                     const std::vector<std::string>& parent_env, unsigned cores);

// The rank environment of one child, built on parent_env (shared by plan_children and tests).
std::vector<std::string> rank_environment(const LaunchOptions& opts, int local_rank,
                                          const std::vector<std::string>& parent_env,
                                          unsigned cores);

// A TCP port free on this host right now, for rank 0's store: a random one from
// picked_port_range() where it has room, never the source port of another process's connection;
// else one bound to port 0 and released.
int pick_free_port();
constexpr int kLowestPickedPort = 24000;   // (tests pick theirs below it)
constexpr int kHighestPickedPort = 28999;  // (under torchrun's default 29500)
// The kernel's ephemeral ports (ip_local_port_range), {0, 0} where unknown.
std::pair<int, int> ephemeral_ports();
// Where pick_free_port picks: kLowestPickedPort..kHighestPickedPort below the ephemeral ports,
// else 1000 or more above them; {0, 0}: neither has room.
std::pair<int, int> picked_port_range();

// The current process environment as "KEY=VALUE" strings.
std::vector<std::string> current_environment();

}  // namespace trainer::launch
