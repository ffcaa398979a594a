// checkpoint_space: the size of one checkpoint, the space a run's saves need, and the verdict.
#include <catch2/catch.hpp>

#include "runtime/report/flops.h"
#include "runtime/report/report_from_config.h"
#include "runtime/train/checkpoint_space.h"
#include "tests/unit/small_train_config.h"

using Catch::Contains;
using trainer::train::checkpoint_bytes;
using trainer::train::checkpoint_space_needed;
using trainer::train::judge_checkpoint_space;

TEST_CASE("a_checkpoint_holds_twelve_bytes_a_parameter", "[train][ckpt]") {
  auto cfg = trainer::testing::small_train_config(32, 16, 2, 32, 4);
  // 2 blocks of 12C^2 + 13C (C = 32), wte 32x32, wpe 16x32, the final layernorm's 2C
  const int64_t params = 2 * (12 * 32 * 32 + 13 * 32) + 32 * 32 + 16 * 32 + 2 * 32;
  REQUIRE(trainer::report::count_params(trainer::report::model_dims(cfg.model)).total == params);
  CHECK(checkpoint_bytes(cfg) == 12 * params);
}

TEST_CASE("the_space_needed_counts_the_checkpoints_on_disk_at_once", "[train][ckpt]") {
  // keep 2: a third is written before the oldest is pruned
  CHECK(checkpoint_space_needed(100, 2, 0, 10) == 300);
  CHECK(checkpoint_space_needed(100, 2, 1, 10) == 200);
  CHECK(checkpoint_space_needed(100, 2, 5, 10) == 100);  // at least the next one
  CHECK(checkpoint_space_needed(100, 5, 0, 2) == 200);   // only two saves left
  CHECK(checkpoint_space_needed(100, 2, 0, 0) == 100);
}

TEST_CASE("a_run_that_saves_is_refused_when_one_checkpoint_does_not_fit", "[train][ckpt]") {
  auto cfg = trainer::testing::small_train_config();
  cfg.checkpoint.dir = "/ckpts/run7";
  cfg.checkpoint.every_steps = 100;
  const auto refused = judge_checkpoint_space(cfg, 999, 1000, 3000);
  CHECK_THAT(refused.error, Contains("checkpoint.dir = \"/ckpts/run7\": 999 B free") &&
                                Contains("one checkpoint of this model takes about 1000 B"));
  CHECK(refused.warning.empty());
  const auto later = judge_checkpoint_space(cfg, 2999, 1000, 3000);
  CHECK(later.error.empty());
  CHECK_THAT(later.warning, Contains("checkpoint.keep = 2 with checkpoint.every_steps = 100 needs "
                                     "about 2.93 KiB more"));
  const auto fits = judge_checkpoint_space(cfg, 3000, 1000, 3000);
  CHECK(fits.error.empty());
  CHECK(fits.warning.empty());
  // without periodic saves only a stop signal saves: a warning
  cfg.checkpoint.every_steps = 0;
  const auto stop_only = judge_checkpoint_space(cfg, 999, 1000, 1000);
  CHECK(stop_only.error.empty());
  CHECK_THAT(stop_only.warning, Contains("a save at a stop signal would fail"));
}

TEST_CASE("sizes_read_in_binary_units", "[train][ckpt]") {
  using trainer::train::bytes_text;
  CHECK(bytes_text(999) == "999 B");
  CHECK(bytes_text(1536) == "1.50 KiB");
  CHECK(bytes_text(int64_t{3} << 30) == "3.00 GiB");
}
