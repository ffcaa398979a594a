#include "runtime/dist/launch_env.h"

#include <arpa/inet.h>

#include <cstdlib>

#include "runtime/dist/slurm_nodelist.h"

namespace trainer::dist {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw LaunchEnvError("launch environment: " + msg);
}

long long parse_int(const std::string& name, const std::string& value) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size()) fail(name + "='" + value + "' is not an integer");
  return v;
}

int get_int(const EnvLookup& env, const std::string& name, long long min, long long max) {
  auto value = env(name);
  if (!value) fail(name + " is not set");
  long long v = parse_int(name, *value);
  if (v < min || v > max)
    fail(name + "=" + *value + " is out of range [" + std::to_string(min) + ", " +
         std::to_string(max) + "]");
  return static_cast<int>(v);
}

int get_int_or(const EnvLookup& env, const std::string& name, int fallback, long long min,
               long long max) {
  return env(name) ? get_int(env, name, min, max) : fallback;
}

constexpr long long kMaxRanks = 1 << 24;

// An index (a rank) in [0, count), where `count_name` says what the count is.
int get_index(const EnvLookup& env, const std::string& name, const std::string& count_name,
              int count) {
  auto value = env(name);
  if (!value) fail(name + " is not set");
  const long long v = parse_int(name, *value);
  if (v < 0 || v >= count)
    fail(name + "=" + *value + " is out of range [0, " + count_name + "=" + std::to_string(count) +
         ")");
  return static_cast<int>(v);
}

// Rank 0's host as the store and gloo reach it over IPv4: a name or a dotted address. Refused at
// once what would otherwise wait out the rendezvous timeout: nothing, a port (host:port), or an
// IPv6 address.
void checked_master_addr(const std::string& addr) {
  if (addr.empty()) fail("MASTER_ADDR is empty; set it to rank 0's host name or IPv4 address");
  if (addr.find(':') == std::string::npos) return;
  in6_addr v6{};
  const std::string bare = addr.size() > 2 && addr.front() == '[' && addr.back() == ']'
                               ? addr.substr(1, addr.size() - 2)
                               : addr;
  if (::inet_pton(AF_INET6, bare.c_str(), &v6) == 1)
    fail("MASTER_ADDR=" + addr +
         " is an IPv6 address; the rendezvous runs over IPv4: give rank 0's IPv4 address or a "
         "host name that resolves to one");
  fail("MASTER_ADDR=" + addr + " holds a ':'; give the host alone and the port in MASTER_PORT");
}

void read_store_options(const EnvLookup& env, LaunchEnv& le) {
  le.torchelastic = env("TORCHELASTIC_RUN_ID").has_value();
  if (auto dir = env("TRAINER_STORE_DIR")) le.store_dir = *dir;
}

LaunchEnv from_torchrun(const EnvLookup& env) {
  LaunchEnv le;
  le.source = env("TRAINER_LAUNCH") ? "trainer-launch" : "torchrun";
  le.world_size = get_int(env, "WORLD_SIZE", 1, kMaxRanks);
  le.rank = get_index(env, "RANK", "WORLD_SIZE", le.world_size);
  // Missing local variables: assume one node.
  le.local_world_size = get_int_or(env, "LOCAL_WORLD_SIZE", le.world_size, 1, le.world_size);
  le.local_rank = env("LOCAL_RANK")
                      ? get_index(env, "LOCAL_RANK", "LOCAL_WORLD_SIZE", le.local_world_size)
                      : le.rank % le.local_world_size;
  if (auto addr = env("MASTER_ADDR")) le.master_addr = *addr;
  le.master_port = get_int_or(env, "MASTER_PORT", le.master_port, 1, 65535);
  if (le.world_size > 1) checked_master_addr(le.master_addr);  // (one process connects nowhere)
  return le;
}

int slurm_tasks_on_this_node(const EnvLookup& env, int ntasks) {
  if (auto per_node = env("SLURM_NTASKS_PER_NODE"))
    return static_cast<int>(parse_int("SLURM_NTASKS_PER_NODE", *per_node));
  if (auto spec = env("SLURM_TASKS_PER_NODE")) {
    std::vector<int> counts;
    try {
      counts = expand_slurm_tasks_per_node(*spec);
    } catch (const SlurmSyntaxError& e) {
      fail(std::string("SLURM_TASKS_PER_NODE: ") + e.what());
    }
    int node = get_int_or(env, "SLURM_NODEID", 0, 0, kMaxRanks);
    if (node >= static_cast<int>(counts.size()))
      fail("SLURM_NODEID=" + std::to_string(node) +
           " has no entry in SLURM_TASKS_PER_NODE=" + *spec);
    return counts[node];
  }
  int nnodes = get_int_or(env, "SLURM_NNODES", 1, 1, kMaxRanks);
  if (ntasks % nnodes != 0)
    fail("SLURM_NTASKS=" + std::to_string(ntasks) + " is not divisible by SLURM_NNODES=" +
         std::to_string(nnodes) + "; set SLURM_NTASKS_PER_NODE");
  return ntasks / nnodes;
}

std::string slurm_master(const EnvLookup& env) {
  if (auto addr = env("MASTER_ADDR")) return *addr;
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"}) {
    auto list = env(name);
    if (!list) continue;
    try {
      return first_slurm_host(*list);
    } catch (const SlurmSyntaxError& e) {
      fail(std::string(name) + ": " + e.what());
    }
  }
  fail("under Slurm, none of MASTER_ADDR, SLURM_NODELIST, SLURM_JOB_NODELIST is set");
}

// Every task of a job derives the same port without talking to the others.
int slurm_job_port(long long job_id) {
  if (job_id < 0) fail("SLURM_JOB_ID=" + std::to_string(job_id) + " is negative");
  return 20000 + static_cast<int>(job_id % 20000);
}

LaunchEnv from_slurm(const EnvLookup& env) {
  LaunchEnv le;
  le.source = "slurm";
  le.world_size = get_int(env, "SLURM_NTASKS", 1, kMaxRanks);
  le.rank = get_index(env, "SLURM_PROCID", "SLURM_NTASKS", le.world_size);
  le.local_world_size = slurm_tasks_on_this_node(env, le.world_size);
  if (le.local_world_size < 1 || le.local_world_size > le.world_size)
    fail("tasks per node " + std::to_string(le.local_world_size) + " is outside [1, " +
         "SLURM_NTASKS=" + std::to_string(le.world_size) + "]");
  le.local_rank = env("SLURM_LOCALID")
                      ? get_index(env, "SLURM_LOCALID", "tasks per node", le.local_world_size)
                      : 0;
  le.master_addr = slurm_master(env);
  if (le.world_size > 1) checked_master_addr(le.master_addr);
  if (env("MASTER_PORT"))
    le.master_port = get_int(env, "MASTER_PORT", 1, 65535);
  else if (auto job = env("SLURM_JOB_ID"))
    le.master_port = slurm_job_port(parse_int("SLURM_JOB_ID", *job));
  return le;
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

LaunchEnv detect_launch_env(const EnvLookup& env) {
  LaunchEnv le;
  if (env("RANK") || env("WORLD_SIZE"))
    le = from_torchrun(env);
  else if (env("SLURM_PROCID"))
    le = from_slurm(env);
  read_store_options(env, le);
  return le;
}

}  // namespace trainer::dist
