// checkpoint_space: the size of one checkpoint, the saves a run makes, the space they need, and
// the verdict.
#include <catch2/catch.hpp>

#include "runtime/train/checkpoint_space.h"
#include "tests/unit/small_train_config.h"

using Catch::Contains;
using trainer::train::certain_saves;
using trainer::train::checkpoint_bytes;
using trainer::train::checkpoint_space_needed;
using trainer::train::judge_checkpoint_space;

TEST_CASE("a_checkpoint_holds_twelve_bytes_a_parameter_of_the_padded_model", "[train][ckpt]") {
  // vocab 129 padded to 256 (make_vocab_size_divisible_by 128: wte is saved with its padding)
  auto cfg = trainer::testing::small_train_config(129, 16, 2, 32, 4);
  // 2 blocks of 12C^2 + 13C (C = 32), wte 256x32, wpe 16x32, the final layernorm's 2C
  const int64_t params = 2 * (12 * 32 * 32 + 13 * 32) + 256 * 32 + 16 * 32 + 2 * 32;
  const int64_t data = 12 * params;
  const int64_t one = checkpoint_bytes(cfg, 2);
  CHECK(one >= data);
  // the rest bounds the headers, the manifest and the files' last blocks: 2 layers' 28 tensors
  CHECK(one - data == 1024 * (28 + 2) + 16 * 1024 + 4096 * 3);
  CHECK(checkpoint_bytes(cfg, 8) - one == (1024 + 4096) * 6);
}

TEST_CASE("the_saves_counted_are_those_a_run_makes_for_certain", "[train][ckpt]") {
  auto cfg = trainer::testing::small_train_config();
  cfg.train.steps = 25;
  cfg.checkpoint.every_steps = 10;
  CHECK(certain_saves(cfg, 0, 25, false) == 3);   // 10, 20 and the last
  CHECK(certain_saves(cfg, 10, 25, false) == 2);  // a resume at 10
  CHECK(certain_saves(cfg, 12, 20, false) == 1);  // the last is a multiple
  CHECK(certain_saves(cfg, 25, 25, false) == 0);  // nothing to train
  cfg.checkpoint.every_steps = 0;
  CHECK(certain_saves(cfg, 0, 25, false) == 0);  // a stop signal's only
  CHECK(certain_saves(cfg, 5, 25, true) == 1);   // resumed in checkpoint.dir: the last step
  cfg.train.stop_after_steps = 30;
  CHECK(certain_saves(cfg, 0, 25, false) == 0);  // a stop past the end stops nothing
  cfg.train.stop_after_steps = 10;
  CHECK(certain_saves(cfg, 0, 10, false) == 1);  // the stop at step 10
}

TEST_CASE("the_space_needed_counts_the_checkpoints_on_disk_at_once", "[train][ckpt]") {
  // keep 2: a third is written before the oldest is pruned
  CHECK(checkpoint_space_needed(100, 2, 0, 10) == 300);
  CHECK(checkpoint_space_needed(100, 2, 1, 10) == 200);
  CHECK(checkpoint_space_needed(100, 2, 5, 10) == 100);  // at least the next one
  CHECK(checkpoint_space_needed(100, 5, 0, 2) == 200);   // only two saves left
  CHECK(checkpoint_space_needed(100, 2, 0, 0) == 100);
  CHECK(checkpoint_space_needed(100, 2147483647, 0, 3) == 300);  // (no int overflow)
}

TEST_CASE("a_run_that_saves_is_refused_when_one_checkpoint_does_not_fit", "[train][ckpt]") {
  auto cfg = trainer::testing::small_train_config();
  cfg.checkpoint.dir = "/ckpts/run7";
  const auto refused = judge_checkpoint_space(cfg, 999, 1000, 3000, 4);
  CHECK_THAT(refused.error, Contains("checkpoint.dir = \"/ckpts/run7\": 999 B free") &&
                                Contains("one checkpoint of this model takes about 1000 B") &&
                                Contains("the run saves 4 times"));
  CHECK(refused.warning.empty());
  const auto later = judge_checkpoint_space(cfg, 2999, 1000, 3000, 4);
  CHECK(later.error.empty());
  CHECK_THAT(later.warning,
             Contains("4 saves with checkpoint.keep = 2 need about 2.93 KiB before the run ends"));
  const auto fits = judge_checkpoint_space(cfg, 3000, 1000, 3000, 4);
  CHECK(fits.error.empty());
  CHECK(fits.warning.empty());
  // no save is certain: only a stop signal's is at stake, a warning
  const auto stop_only = judge_checkpoint_space(cfg, 999, 1000, 1000, 0);
  CHECK(stop_only.error.empty());
  CHECK_THAT(stop_only.warning, Contains("a save at a stop signal would fail"));
}

TEST_CASE("sizes_read_in_binary_units", "[train][ckpt]") {
  using trainer::train::bytes_text;
  CHECK(bytes_text(999) == "999 B");
  CHECK(bytes_text(1536) == "1.50 KiB");
  CHECK(bytes_text(int64_t{3} << 30) == "3.00 GiB");
}
