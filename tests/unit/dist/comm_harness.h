#pragma once
// Runs N ranks as threads of this process: each opens its own TcpStore client on a shared server
// (port 0) and its own GlooComm, so the test exercises the same path as N processes.
#include <atomic>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/comm.h"
#include "runtime/dist/tcp_store.h"

namespace trainer::dist::testing {

struct RankContext {
  int rank;
  int size;
  std::shared_ptr<Store> store;  // this rank's client of the shared server (unprefixed)
  std::shared_ptr<Store> group;  // the prefix store the communicator uses
};

// Each rank's body gets its context; what it throws is returned (empty string: no error) so the
// main thread can make the Catch2 assertions (Catch2 is not thread-safe).
inline std::vector<std::string> run_ranks(int n, const std::function<void(RankContext&)>& body) {
  static std::atomic<int> run_id{0};
  std::string prefix = "run" + std::to_string(run_id++);
  auto server = std::make_shared<TcpStore>("127.0.0.1", 0, true, std::chrono::seconds(10));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        RankContext ctx{
            r, n, make_tcp_store("127.0.0.1", server->port(), false, std::chrono::seconds(10)),
            nullptr};
        ctx.group = make_prefix_store(ctx.store, prefix);
        body(ctx);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::string("error: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

inline std::unique_ptr<Comm> make_comm(RankContext& ctx, double timeout_s,
                                       const std::string& name = "world") {
  CommOptions opts;
  opts.name = name;
  opts.timeout_s = timeout_s;
  return make_gloo_comm(ctx.group, ctx.rank, ctx.size, opts);
}

}  // namespace trainer::dist::testing
