#include "runtime/dist/rendezvous.h"

namespace trainer::dist {

std::shared_ptr<Store> make_rendezvous_store(const LaunchEnv& env,
                                             std::chrono::milliseconds timeout) {
  if (!env.store_dir.empty()) return make_file_store(env.store_dir, timeout);
  return make_tcp_store(env.master_addr, rendezvous_port(env), env.rank == 0, timeout);
}

}  // namespace trainer::dist
