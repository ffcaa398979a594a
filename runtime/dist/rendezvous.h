#pragma once
// The rendezvous Store for a detected launch environment.
//
// TCP (default): rank 0 serves at master_addr:port, every rank connects. The port is MASTER_PORT,
// except under torchrun's elastic agent (LaunchEnv::torchelastic, from TORCHELASTIC_RUN_ID),
// whose own c10d store already listens on MASTER_PORT: there we use MASTER_PORT + 1.
// `trainer launch` picks a free MASTER_PORT for its children and does not set TORCHELASTIC_*, so
// it is not affected.
//
// File: TRAINER_STORE_DIR=/shared/dir selects a FileStore there instead (a directory every rank
// sees, e.g. on a shared filesystem; use a fresh one per run).
#include <chrono>
#include <cstdint>
#include <memory>

#include "runtime/dist/launch_env.h"
#include "runtime/dist/store.h"

namespace trainer::dist {

// The TCP port our store uses for this environment (see above).
inline int rendezvous_port(const LaunchEnv& env) {
  if (!env.torchelastic) return env.master_port;
  return env.master_port < 65535 ? env.master_port + 1 : env.master_port - 1;  // 65536 is no port
}

// Also raises this process's soft open-files limit to its hard one (raise_open_files_limit).
std::shared_ptr<Store> make_rendezvous_store(const LaunchEnv& env,
                                             std::chrono::milliseconds timeout);

// A rank holds a socket per peer (Gloo's full mesh of the world) and rank 0 one per rank at its
// store: the usual soft limit of 1024 open files stops a job of a thousand ranks that the hard
// limit allows. Raises the soft limit to the hard one (as torchrun's users do with ulimit -n);
// returns the soft limit now.
uint64_t raise_open_files_limit();

}  // namespace trainer::dist
