// InFlightOps: which op a communicator's members are stuck in when a wait times out.
#include <catch2/catch.hpp>

#include <vector>

#include "runtime/dist/in_flight_ops.h"

using trainer::dist::InFlightOps;
using trainer::dist::OpId;

TEST_CASE("in_flight_ops_name_the_oldest_op_not_finished", "[comm]") {
  InFlightOps ops;
  std::vector<char> finished(4, 0);  // ops 10..13
  for (uint64_t i = 0; i < 4; ++i)
    ops.add(OpId::collective(10 + i), [&finished, i] { return finished[i] != 0; });
  CHECK(ops.oldest_unfinished(OpId::collective(99)).seq ==
        10);  // a wait on op 13 is stuck behind op 10
  finished[0] = 1;
  finished[1] = 1;
  CHECK(ops.oldest_unfinished(OpId::collective(99)).seq == 12);
  CHECK(ops.size() == 2);  // the finished ones are dropped
  finished[2] = 1;
  finished[3] = 1;
  CHECK(ops.oldest_unfinished(OpId::collective(99)).seq ==
        99);  // none in flight: the caller's own op
  CHECK(ops.size() == 0);
}

TEST_CASE("in_flight_ops_adding_drops_the_finished_ones_first", "[comm]") {
  InFlightOps ops;
  for (uint64_t i = 0; i < 1000; ++i) ops.add(OpId::collective(i), [] { return true; });
  CHECK(ops.size() == 1);  // a long run keeps no history of finished ops
  ops.add(OpId::collective(1000), [] { return false; });
  CHECK(ops.oldest_unfinished(OpId::collective(7)).seq == 1000);
}

TEST_CASE("in_flight_ops_keep_a_transfer_s_peers", "[comm]") {
  InFlightOps ops;  // a stuck transfer is blamed on its peers, not on the group (op_id.h)
  ops.add(OpId{4, true, {1, 3}}, [] { return false; });
  ops.add(OpId::collective(9), [] { return false; });
  const OpId stuck = ops.oldest_unfinished(OpId::collective(9));
  CHECK(stuck.p2p);
  CHECK(stuck.seq == 4);
  CHECK(stuck.peers == std::vector<int>{1, 3});
  CHECK(stuck.label() == "transfer #4");
}
