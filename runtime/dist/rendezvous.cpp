#include "runtime/dist/rendezvous.h"

#include <sys/resource.h>

#include <string>

#include "runtime/config/run_config.h"

namespace trainer::dist {

uint64_t raise_open_files_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  // (an unlimited hard limit still stops at the kernel's fs.nr_open, 2^20 by default)
  const rlim_t target = limit.rlim_max == RLIM_INFINITY ? rlim_t{1} << 20 : limit.rlim_max;
  if (limit.rlim_cur < target) {
    rlimit raised = limit;
    raised.rlim_cur = target;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) return raised.rlim_cur;
  }
  return limit.rlim_cur;
}

std::shared_ptr<Store> make_rendezvous_store(const LaunchEnv& env,
                                             std::chrono::milliseconds timeout) {
  raise_open_files_limit();
  if (!env.store_dir.empty()) return make_file_store(env.store_dir, timeout);
  const int port = rendezvous_port(env);
  const std::string where = env.master_addr + ":" + std::to_string(port);
  try {
    std::shared_ptr<Store> store = make_tcp_store(env.master_addr, port, env.rank == 0, timeout);
    // A first round trip: a port that some other service holds accepts the connection, then
    // answers nothing a store would (the error would come later, naming neither rank 0 nor
    // MASTER_PORT).
    if (env.rank != 0) store->check({"rendezvous/ping"});
    return store;
  } catch (const StorePortInUse& e) {
    // Before any data is touched, as for ranks that disagree: the launch is wrong (exit 2).
    throw config::ConfigError(
        "rendezvous: global rank 0 cannot serve the store at " + where +
        ": another process holds the port (a second process started as RANK 0, another run or "
        "a leftover process on the same MASTER_PORT; give each run its own MASTER_PORT) (" +
        e.what() + ")");
  } catch (const StoreTimeout& e) {
    if (env.rank == 0) throw;
    // The store is rank 0's: say so, or a rank 0 that died or hung before serving goes unnamed.
    throw StoreTimeout("rendezvous: global rank 0, which serves the store at " + where +
                       ", did not answer within " + std::to_string(timeout.count()) +
                       " ms: it has not started, died or hung before serving, or MASTER_ADDR and "
                       "MASTER_PORT do not point at it (" +
                       e.what() + ")");
  } catch (const StoreLost& e) {
    if (env.rank == 0) throw;
    throw StoreLost("rendezvous: what accepts connections at " + where +
                    " does not answer as global rank 0's store: rank 0 hung or died as this rank "
                    "connected, or MASTER_ADDR and MASTER_PORT point at another service (" +
                    e.what() + ")");
  }
}

}  // namespace trainer::dist
