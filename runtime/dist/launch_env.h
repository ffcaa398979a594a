#pragma once
// Where this process sits in the job (DESIGN.md "Launch and rendezvous"). Sources, in order:
//   1. `trainer launch` / torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//      MASTER_PORT (RANK and WORLD_SIZE decide; the others have single-node defaults).
//   2. Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, tasks per node from
//      SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE / SLURM_NNODES, master = first host of
//      SLURM_STEP_NODELIST / SLURM_NODELIST / SLURM_JOB_NODELIST (MASTER_ADDR overrides),
//      port = MASTER_PORT or 20000 + SLURM_JOB_ID % 20000.
//   3. Nothing: a single process, rank 0 of 1.
#include <functional>
#include <optional>
#include <string>

#include "runtime/config/run_config.h"

namespace trainer::dist {

// Inconsistent or malformed launch variables: the message names the variable. Bad user input, so
// it is a ConfigError (exit status 2).
struct LaunchEnvError : config::ConfigError {
  using config::ConfigError::ConfigError;
};

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "none";  // "trainer-launch" | "torchrun" | "slurm" | "none"
  // Set under torchrun's elastic agent (TORCHELASTIC_RUN_ID): the agent's own store already
  // listens on MASTER_PORT, so ours moves to MASTER_PORT + 1 (see rendezvous.h).
  bool torchelastic = false;
  std::string store_dir;  // TRAINER_STORE_DIR: use a FileStore on this shared directory
};

// Looks a variable up; nullopt when unset. The default reads the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_env();

LaunchEnv detect_launch_env(const EnvLookup& env);
inline LaunchEnv detect_launch_env() {
  return detect_launch_env(process_env());
}

}  // namespace trainer::dist
