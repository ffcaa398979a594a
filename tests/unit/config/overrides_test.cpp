// --set key.path=value overrides: applied after the file, in order, values read as YAML scalars.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/config/run_config.h"

using namespace trainer::config;
using Catch::Contains;
using Catch::StartsWith;

TEST_CASE("overrides_set_numbers_and_nested_keys", "[config][overrides]") {
  const RunConfig c = parse_config(embedded_default_yaml(), {"train.lr=1e-3", "model.n_layer=6",
                                                             "parallel.pipeline.microbatches=2"});
  CHECK(c.train.lr == 1e-3);
  CHECK(c.model.n_layer == 6);
  CHECK(c.parallel.pipeline.microbatches == 2);
  RunConfig expected;  // everything else keeps the file's values
  expected.train.lr = 1e-3, expected.model.n_layer = 6, expected.parallel.pipeline.microbatches = 2;
  CHECK(to_yaml(c) == to_yaml(expected));
}

TEST_CASE("overrides_apply_after_the_file_in_order", "[config][overrides]") {
  const RunConfig c = parse_config("train: {steps: 10}", {"train.steps=20", "train.steps=30"});
  CHECK(c.train.steps == 30);
}

TEST_CASE("overrides_read_strings_bools_and_special_values", "[config][overrides]") {
  const RunConfig c = parse_config(
      "checkpoint: {dir: /tmp/ck}\nparallel: {dp: 2}",
      {"run.name=my run", "run.deterministic=true", "data.train=*.bin", "checkpoint.dir=null",
       "parallel.dp=auto", "hardware.peak_tflops=12.5", "train.schedule=wsd"});
  CHECK(c.run.name == "my run");
  CHECK(c.run.deterministic);
  CHECK(c.data.train == "*.bin");  // not YAML (an alias): taken as the text
  CHECK(c.checkpoint.dir.empty());
  CHECK(c.parallel.dp == 0);
  CHECK(c.hardware.peak_tflops == 12.5);
  CHECK(c.train.schedule == "wsd");
}

TEST_CASE("an_override_may_set_a_whole_section", "[config][overrides]") {
  const RunConfig c = parse_config("", {"parallel.pipeline={schedule: gpipe, microbatches: 8}"});
  CHECK(c.parallel.pipeline.schedule == "gpipe");
  CHECK(c.parallel.pipeline.microbatches == 8);
}

TEST_CASE("override_with_unknown_key_suggests_the_nearest_key", "[config][overrides]") {
  REQUIRE_THROWS_WITH(parse_config("", {"train.lrr=1e-3"}),
                      Contains("unknown key 'train.lrr'") && Contains("did you mean 'train.lr'?"));
  REQUIRE_THROWS_WITH(parse_config("", {"trian.lr=1e-3"}),
                      Contains("unknown key 'trian.lr'") && Contains("did you mean 'train.lr'?"));
  REQUIRE_THROWS_WITH(parse_config("", {"parallel.pipeline.microbatch=2"}),
                      Contains("did you mean 'parallel.pipeline.microbatches'?"));
  // nothing near: where the keys are
  REQUIRE_THROWS_WITH(parse_config("", {"foo=1"}),
                      Contains("unknown key 'foo'") &&
                          Contains("(keys are section.key; sections: run, model, parallel"));
}

TEST_CASE("override_without_equals_sign_is_an_error", "[config][overrides]") {
  REQUIRE_THROWS_WITH(parse_config("", {"train.lr"}),
                      Contains("'train.lr'") && Contains("key.path=value"));
}

TEST_CASE("override_with_a_bad_value_names_key_and_value", "[config][overrides]") {
  REQUIRE_THROWS_WITH(parse_config("", {"train.lr=abc"}),
                      Contains("train.lr = \"abc\"") && Contains("expected a finite number"));
  REQUIRE_THROWS_WITH(parse_config("", {"precision.compute=fp4"}),
                      Contains("precision.compute = \"fp4\"") && Contains("fp32, bf16, fp8"));
}

// An error names where the bad value came from: the file, or the --set that gave it.
TEST_CASE("load_config_file_applies_overrides_and_names_the_file_on_error", "[config][overrides]") {
  const std::string path = std::string(TRAINER_SOURCE_DIR) + "/configs/tiny.yaml";
  CHECK(load_config_file(path, {"model.n_layer=2"}).model.n_layer == 2);
  REQUIRE_THROWS_WITH(load_config_file(path, {"model.n_layer=x"}),
                      StartsWith("config: --set 'model.n_layer=x': model.n_layer = \"x\"") &&
                          !Contains("tiny.yaml"));
  REQUIRE_THROWS_WITH(load_config_file(path, {"train.lr=1e-3", "train.lr=-1"}),
                      StartsWith("config: --set 'train.lr=-1': train.lr = -1.0: must be > 0"));
  const std::string bad = (std::filesystem::temp_directory_path() / "trainer_bad_lr.yaml").string();
  std::ofstream(bad) << "train: {lr: -1}\n";
  REQUIRE_THROWS_WITH(load_config_file(bad, {"train.steps=3"}),
                      StartsWith("config: " + bad + ": train.lr = -1.0: must be > 0"));
  CHECK(load_config_file(bad, {"train.lr=0.5"}).train.lr == 0.5);
  std::filesystem::remove(bad);
}

// ConfigError::key names the key whose value is refused, from the file or a --set, so that a
// caller (and the --set naming above) need not read it back out of the message.
TEST_CASE("config_errors_about_a_value_carry_its_key", "[config][overrides]") {
  const auto key_of = [](const std::string& yaml, const std::vector<std::string>& overrides) {
    try {
      parse_config(yaml, overrides);
    } catch (const ConfigError& e) {
      return e.key;
    }
    return std::string("(no error)");
  };
  CHECK(key_of("train: {lr: -1}", {}) == "train.lr");
  CHECK(key_of("", {"train.eval_every=x"}) == "train.eval_every");
  CHECK(key_of("", {"precision.compute=fp4"}) == "precision.compute");
  CHECK(key_of("train: {lr: -1}", {"train.eval_every=3"}) == "train.lr");
  CHECK(key_of("train: {bogus: 1}", {}).empty());  // not about a value
}
