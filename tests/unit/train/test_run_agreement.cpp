// agree_on_the_run: ranks as threads over one FileStore; what rank 0 says of a rank that differs.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/dist/store.h"
#include "runtime/train/run_agreement.h"
#include "tests/unit/temp_dir.h"

using Catch::Contains;
using trainer::config::RunConfig;
using trainer::train::agree_on_the_run;
using trainer::train::DuplicateRank;
using trainer::train::run_difference;

namespace {

RunConfig tiny() {
  return trainer::config::parse_config(trainer::config::embedded_default_yaml());
}

// Runs agree_on_the_run for each (rank, world, config) on its own thread; each one's error text
// ("" when it went on).
std::vector<std::string> agree(const std::string& dir,
                               const std::vector<std::tuple<int, int, RunConfig>>& ranks,
                               std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i)
    threads.emplace_back([&, i] {
      const auto& [rank, world, cfg] = ranks[i];
      auto store = trainer::dist::make_file_store(dir, timeout);
      try {
        agree_on_the_run(*store, rank, world, cfg);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

}  // namespace

TEST_CASE("rank_0_names_the_keys_or_the_world_size_another_rank_differs_in", "[train][agreement]") {
  const RunConfig cfg = tiny();
  const std::string yaml = trainer::config::to_yaml(cfg);
  CHECK(run_difference(cfg, 2, 1, 2, yaml, "host pid 7").empty());
  CHECK_THAT(run_difference(cfg, 2, 1, 3, yaml, "host pid 7"),
             Contains("rank 1 (host pid 7) has WORLD_SIZE 3, rank 0 has 2"));
  RunConfig other = cfg;
  other.train.lr = 1e-3;
  other.model.n_layer = 2;
  CHECK_THAT(run_difference(cfg, 2, 1, 2, trainer::config::to_yaml(other), "h pid 7"),
             Contains("rank 1 (h pid 7) runs another config than rank 0: model.n_layer: 4 -> 2; "
                      "train.lr: 0.003 -> 0.001"));
  CHECK_THAT(run_difference(cfg, 2, 1, 2, "train: {lr: [", "h pid 7"),
             Contains("a config with another hash"));
}

TEST_CASE("ranks_that_run_the_same_go_on_and_one_that_differs_stops_all", "[train][agreement]") {
  const trainer::testing::TempDir same("agree_same"), differ("agree_differ"), dup("agree_dup");
  RunConfig cfg = tiny();
  for (const std::string& e : agree(same.str(), {{0, 3, cfg}, {1, 3, cfg}, {2, 3, cfg}}))
    CHECK(e.empty());

  RunConfig other = cfg;
  other.train.micro_batch = 4;
  const std::vector<std::string> errors =
      agree(differ.str(), {{0, 3, cfg}, {1, 3, cfg}, {2, 3, other}});
  for (const std::string& e : errors)
    CHECK_THAT(e, Contains("rank 2 (") && Contains("train.micro_batch: 8 -> 4"));

  // A second process with RANK 1: refused as a duplicate (and only it).
  auto store = trainer::dist::make_file_store(dup.str(), std::chrono::seconds(20));
  store->add("run_agreement/claims/1", 1);  // (the first RANK 1 got here first)
  store->set("run_agreement/holder/1", {'h', ' ', 'p', 'i', 'd', ' ', '1'});
  CHECK_THROWS_AS(agree_on_the_run(*store, 1, 2, cfg), DuplicateRank);
  CHECK_THROWS_WITH(agree_on_the_run(*store, 1, 2, cfg),
                    Contains("RANK 1 is taken by another process (h pid 1)"));
}

// Ranks outside rank 0's world (two nodes launched with different --nproc-per-node: rank 0 has
// WORLD_SIZE 2, ranks 2 and 3 WORLD_SIZE 4): rank 0 never reads their entries, and the RANK 1 it
// waits for never comes. The first of them to see rank 0's WORLD_SIZE says so, and every rank
// stops at once with the WORLD_SIZEs named, not after the 20 s timeout.
TEST_CASE("ranks_outside_rank_0s_world_stop_all_at_once_naming_the_world_sizes",
          "[train][agreement]") {
  const trainer::testing::TempDir dir("agree_outside");
  const RunConfig cfg = tiny();
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> errors = agree(dir.str(), {{0, 2, cfg}, {2, 4, cfg}, {3, 4, cfg}});
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  for (const std::string& e : errors)
    CHECK_THAT(e, Contains("has WORLD_SIZE 4, rank 0 has 2") &&
                      Contains("RANK 1 of WORLD_SIZE 2 has not come"));
}

// A rank that never comes (killed before the rendezvous): rank 0 names it in the form every
// other missing-rank error has ("ranks that did not arrive: 2"), with the timeout as configured
// (0.5 s, not "0 s"); the rank that came fails too, with rank 0's verdict or its own timeout.
TEST_CASE("a_rank_that_never_comes_is_named_as_not_arrived", "[train][agreement]") {
  const trainer::testing::TempDir dir("agree_missing");
  const RunConfig cfg = tiny();
  const std::vector<std::string> errors =
      agree(dir.str(), {{0, 3, cfg}, {1, 3, cfg}}, std::chrono::milliseconds(500));
  CHECK_THAT(errors[0], Contains("ranks that did not arrive: 2 of WORLD_SIZE 3 (not at the "
                                 "rendezvous within distributed.timeout_s = 0.5 s"));
  CHECK_FALSE(errors[1].empty());
}
