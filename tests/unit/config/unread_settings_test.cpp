// Settings the rest of the config leaves unread are named, with why; the ones it reads are not.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/config/unread_settings.h"

using namespace trainer::config;
using Catch::Contains;

namespace {

std::vector<std::string> unread(const std::vector<std::string>& overrides) {
  return unread_settings(parse_config(embedded_default_yaml(), overrides));
}

}  // namespace

TEST_CASE("unread_settings_is_empty_for_the_default_and_example_layouts", "[config]") {
  CHECK(unread({}).empty());
  CHECK(unread({"train.schedule=wsd", "train.decay_fraction=0.3"}).empty());
  CHECK(unread({"model.moe.num_experts=4", "model.moe.top_k=1"}).empty());
  CHECK(unread({"parallel.pp=2", "parallel.pipeline.microbatches=2"}).empty());
  CHECK(unread({"parallel.pp=2", "parallel.pipeline.schedule=interleaved",
                "parallel.pipeline.virtual_stages=2"})
            .empty());
  CHECK(unread({"parallel.tp=2", "parallel.sequence_parallel=true"}).empty());
  CHECK(unread({"data.train=data/train_*.bin", "data.shuffle=true"}).empty());
  CHECK(unread({"train.steps=30", "train.warmup_steps=30"}).empty());
}

TEST_CASE("unread_settings_names_each_key_value_and_reason", "[config]") {
  const auto one = [](const std::vector<std::string>& overrides) {
    const std::vector<std::string> lines = unread(overrides);
    REQUIRE(lines.size() == 1);
    return lines.front();
  };
  CHECK_THAT(one({"train.decay_fraction=0.3"}),
             Contains("train.decay_fraction = 0.3 changes nothing") && Contains("wsd"));
  CHECK_THAT(one({"train.schedule=constant", "train.min_lr_ratio=0.0"}),
             Contains("train.min_lr_ratio = 0.0") && Contains("constant"));
  CHECK_THAT(one({"train.eval_every=0", "train.eval_batches=4"}),
             Contains("train.eval_batches = 4") && Contains("train.eval_every = 0"));
  CHECK_THAT(one({"train.eval_every=0", "data.val=synthetic:uniform"}),
             Contains("data.val = \"synthetic:uniform\"") && Contains("train.eval_every = 0"));
  CHECK_THAT(one({"model.moe.top_k=1"}),
             Contains("model.moe.top_k = 1") && Contains("num_experts = 0"));
  CHECK_THAT(one({"parallel.pipeline.microbatches=8"}),
             Contains("parallel.pipeline.microbatches = 8") && Contains("parallel.pp = 1"));
  CHECK_THAT(one({"parallel.sequence_parallel=true"}),
             Contains("parallel.sequence_parallel = true") && Contains("parallel.tp = 1"));
  CHECK_THAT(one({"data.shuffle=true"}), Contains("data.shuffle = true") && Contains("synthetic"));
  CHECK_THAT(one({"train.steps=10", "train.warmup_steps=15"}),
             Contains("train.warmup_steps = 15 is more than train.steps = 10") &&
                 Contains("0.667 x train.lr"));
  // Each unread key is its own line.
  CHECK(unread({"model.moe.top_k=1", "model.moe.aux_loss_coef=0.1", "data.shuffle=true"}).size() ==
        3);
}

// The shipped configs are examples to copy: none sets a key its layout does not read.
TEST_CASE("example_configs_set_no_unread_keys", "[config]") {
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(TRAINER_SOURCE_DIR) + "/configs")) {
    INFO(entry.path().string());
    CHECK(unread_settings(load_config_file(entry.path().string(), {})).empty());
  }
}
