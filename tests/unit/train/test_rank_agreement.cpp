// rank0_decides: what rank 0 decides, refuses or fails with reaches every rank (none is left
// waiting on rank 0 in a broadcast it skipped).
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/train/rank_agreement.h"
#include "tests/unit/dist/comm_harness.h"

using trainer::dist::testing::make_comm;
using trainer::dist::testing::RankContext;
using trainer::dist::testing::run_ranks;
using trainer::train::rank0_decides;

namespace {

// Each rank's outcome of rank0_decides(decide): "text: ..." or "error: ..." (run_ranks').
template <class Decide>
std::vector<std::string> decide_on_two_ranks(Decide decide) {
  std::vector<std::string> texts(2);
  const std::vector<std::string> errors = run_ranks(2, [&](RankContext& ctx) {
    auto world = make_comm(ctx, 10.0);
    texts[ctx.rank] = "text: " + rank0_decides(world.get(), ctx.rank, decide);
  });
  for (size_t r = 0; r < 2; ++r)
    if (!errors[r].empty()) texts[r] = errors[r];
  return texts;
}

}  // namespace

TEST_CASE("what_rank_0_decides_refuses_or_fails_with_reaches_every_rank", "[train][agreement]") {
  const auto decided = decide_on_two_ranks([] { return std::string("step_00000010"); });
  CHECK(decided == std::vector<std::string>{"text: step_00000010", "text: step_00000010"});

  const auto refused = decide_on_two_ranks([]() -> std::string {
    throw trainer::config::ConfigError("checkpoint.dir = \"ck\": 1 B free", "checkpoint.dir");
  });
  CHECK(refused == std::vector<std::string>(2, "error: checkpoint.dir = \"ck\": 1 B free"));
  // the refused key reaches every rank too (the --set naming of app/main.cpp reads it)
  std::vector<std::string> keys(2);
  run_ranks(2, [&](RankContext& ctx) {
    auto world = make_comm(ctx, 10.0);
    try {
      rank0_decides(world.get(), ctx.rank, []() -> std::string {
        throw trainer::config::ConfigError("refused", "checkpoint.dir");
      });
    } catch (const trainer::config::ConfigError& e) {
      keys[ctx.rank] = e.key;
    }
  });
  CHECK(keys == std::vector<std::string>(2, "checkpoint.dir"));

  // (before: rank 1 waited in the broadcast rank 0 skipped, until the timeout named rank 0 gone)
  const auto failed = decide_on_two_ranks(
      []() -> std::string { throw std::runtime_error("cannot list ck: Permission denied"); });
  CHECK(failed[0] == "error: cannot list ck: Permission denied");
  CHECK(failed[1] == "error: rank 0: cannot list ck: Permission denied");
}
