// A rank whose connection broke because its peer timed out (Gloo closes a pair's socket when an
// op on it times out) is alive and in the op: it must count as arrived for the members timing out
// beside it, and pass the chain on to the ranks waiting on it in other groups. Found by
// scripts/fuzz_faults.py (seed 15, trial 13: tp 4 x cp 2, rank 1 stopped; rank 7 named rank 3).
#include <catch2/catch.hpp>
#include <chrono>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/failure_report.h"
#include "runtime/dist/prefix_store.h"
#include "runtime/dist/tcp_store.h"

using namespace trainer::dist;
using namespace std::chrono_literals;

TEST_CASE("a_rank_that_lost_a_timed_out_peer_counts_as_arrived_and_passes_the_chain_on",
          "[comm][fault]") {
  // Group tp = global ranks 0-3, group cp = {3, 7}. Rank 1 hangs in tp's op. Ranks 0 and 2 time
  // out in it; rank 3's connection to rank 2 breaks as 2 times out; rank 7 times out in cp's op,
  // which rank 3 never reaches.
  constexpr double kTimeoutS = 2.0;  // a grace of 0.2 s
  auto server = std::make_shared<TcpStore>("127.0.0.1", 0, true, 10000ms);
  // Rank 2's ends of its pairs, as it published them after connecting.
  make_prefix_store(server, "tp")
      ->set("addr/2", {'0', '=', '[', '1', ']', ':', '1', '\n', '3', '=', '[', '1', ']', ':', '5',
                       '5', '5', '5', '\n'});
  std::vector<std::string> named(8);
  std::latch start(4);
  auto member = [&](const std::string& group, int rank, std::vector<int> globals,
                    const std::string& cause, bool timed_out) {
    return std::thread([&, group, rank, globals, cause, timed_out] {
      auto root = make_tcp_store("127.0.0.1", server->port(), false, 10000ms);
      auto store = make_prefix_store(root, group);
      const FailureScope scope{store.get(),
                               root.get(),
                               rank,
                               static_cast<int>(globals.size()),
                               [globals](int j) { return globals[static_cast<size_t>(j)]; },
                               kTimeoutS};
      start.arrive_and_wait();
      named[static_cast<size_t>(globals[static_cast<size_t>(rank)])] =
          name_failed_ranks(scope, 0, cause, timed_out);
    });
  };
  const std::vector<int> tp = {0, 1, 2, 3}, cp = {3, 7};
  std::vector<std::thread> ranks;
  ranks.push_back(member("tp", 0, tp, "Timed out waiting 2000ms for recv", true));
  ranks.push_back(member("tp", 2, tp, "Timed out waiting 2000ms for send", true));
  ranks.push_back(member("tp", 3, tp, "Connection closed by peer [1]:5555", false));
  ranks.push_back(member("cp", 1, cp, "Timed out waiting 2000ms for send", true));
  for (auto& t : ranks) t.join();
  CHECK(named[0] == "ranks that did not arrive: 1");  // not "1, 3": 3 is in the op
  CHECK(named[2] == "ranks that did not arrive: 1");
  CHECK(named[3] ==
        "lost the connection to rank 2 ([1]:5555; it died or closed its communicator), which "
        "timed out waiting in turn on rank(s) 1 (hung or dead)");
  CHECK(named[7] == "ranks that did not arrive: 3, blocked in turn on rank(s) 1 (hung or dead)");
}
