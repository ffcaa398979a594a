// A checkpoint's loader position continues only over the shards it was saved reading.
#include <catch2/catch.hpp>
#include <vector>

#include "runtime/data/shard_summary.h"

using namespace trainer::data;
using Catch::Matchers::Contains;

TEST_CASE("a_loader_position_continues_only_over_the_shards_it_was_saved_reading", "[data]") {
  const std::vector<ShardSummary> saved = {{"a_0.bin", 100}, {"a_1.bin", 100}, {"a_2.bin", 100}};
  const LoaderState at_second{1, 40, 0};  // reading shard 2 of 3
  CHECK(shard_list_difference(saved, saved, at_second, false).empty());
  CHECK(shard_list_difference(saved, saved, at_second, true).empty());
  // nothing recorded (a synthetic stream, or a checkpoint from before the list was kept)
  CHECK(shard_list_difference({}, saved, at_second, false).empty());

  // without shuffle, a shard after the one being read may change, or more may follow
  std::vector<ShardSummary> appended = saved;
  appended.push_back({"a_3.bin", 50});
  CHECK(shard_list_difference(saved, appended, at_second, false).empty());
  std::vector<ShardSummary> later_changed = saved;
  later_changed[2].tokens = 7;
  CHECK(shard_list_difference(saved, later_changed, at_second, false).empty());

  // one sorted in before it, or the one being read rewritten: named
  const std::vector<ShardSummary> inserted = {
      {"a_0.bin", 100}, {"a_05.bin", 100}, {"a_1.bin", 100}};
  CHECK_THAT(shard_list_difference(saved, inserted, at_second, false),
             Contains("shard 2 is a_05.bin (100 tokens) now, a_1.bin (100 tokens) then"));
  std::vector<ShardSummary> rewritten = saved;
  rewritten[1].tokens = 99;
  CHECK_FALSE(shard_list_difference(saved, rewritten, at_second, false).empty());
  CHECK_THAT(shard_list_difference(saved, {saved[0]}, at_second, false),
             Contains("1 shard(s) now, 3 then"));
  CHECK_THAT(shard_list_difference(saved, {}, at_second, false),
             Contains("a synthetic stream now"));

  // with shuffle every pass's order depends on all of them
  CHECK_THAT(shard_list_difference(saved, appended, at_second, true),
             Contains("4 shard(s) now, 3 then"));
  CHECK_FALSE(shard_list_difference(saved, later_changed, at_second, true).empty());

  // data.shuffle turned on or off: the position means another thing
  CHECK_THAT(shard_list_difference(saved, saved, at_second, true, false),
             Contains("data.shuffle true now, false then"));
  CHECK(shard_list_difference(saved, saved, at_second, false, false).empty());
  // ... also for a checkpoint without the list (its config said how it shuffled)
  CHECK_THAT(shard_list_difference({}, saved, at_second, true, false, false),
             Contains("data.shuffle true now, false then"));

  // a synthetic stream's position is no place in token shards; the other way round, any is
  CHECK_THAT(shard_list_difference({}, saved, at_second, false, false, true),
             Contains("3 shard(s) now, a synthetic stream then"));
  CHECK(shard_list_difference({}, {}, at_second, true, false, true).empty());
}

// Rank 0's list travels as text; another rank names the first shard in which its own differs.
TEST_CASE("a_shard_list_round_trips_as_text_and_names_its_first_difference", "[data]") {
  const std::vector<ShardSummary> mine = {{"a 0.bin", 100}, {"a_1.bin", 7}};
  CHECK(shard_list_from_text(shard_list_text(mine)) == mine);  // (a space in a name)
  CHECK(shard_list_from_text(shard_list_text({})).empty());
  CHECK(first_shard_difference(mine, "on rank 1", mine, "on rank 0").empty());
  CHECK(first_shard_difference(mine, "on rank 1", {mine[0]}, "on rank 0") ==
        "shard 2 is a_1.bin (7 tokens) on rank 1, none on rank 0");
  CHECK(first_shard_difference({mine[0]}, "on rank 1", mine, "on rank 0") ==
        "shard 2 is none on rank 1, a_1.bin (7 tokens) on rank 0");
}
