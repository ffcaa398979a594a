// Bad input gives a ConfigError naming the key, the value and what is allowed.
#include <catch2/catch.hpp>
#include <filesystem>

#include "runtime/config/run_config.h"

using namespace trainer::config;
using Catch::Contains;
using Catch::EndsWith;

TEST_CASE("unknown_key_in_a_section_suggests_the_nearest_key", "[config][errors]") {
  REQUIRE_THROWS_WITH(parse_config("train: {lrr: 0.1}"),
                      Contains("unknown key 'train.lrr'") && Contains("did you mean 'train.lr'?"));
  REQUIRE_THROWS_WITH(parse_config("model:\n  moe: {num_expert: 4}"),
                      Contains("unknown key 'model.moe.num_expert'") &&
                          Contains("did you mean 'model.moe.num_experts'?"));
  REQUIRE_THROWS_WITH(parse_config("parallel: {pipeline: {micro_batches: 2}}"),
                      Contains("did you mean 'parallel.pipeline.microbatches'?"));
}

TEST_CASE("unknown_top_level_section_suggests_the_nearest_section", "[config][errors]") {
  REQUIRE_THROWS_WITH(parse_config("trian: {lr: 0.1}"),
                      Contains("unknown key 'trian'") && Contains("did you mean 'train'?"));
}

TEST_CASE("unknown_key_without_a_near_match_lists_the_known_keys", "[config][errors]") {
  REQUIRE_THROWS_WITH(
      parse_config("hardware: {accelerator_kind: gpu}"),
      Contains("unknown key 'hardware.accelerator_kind'") && Contains("device, peak_tflops"));
}

TEST_CASE("wrong_types_name_key_value_and_expected_type", "[config][errors]") {
  REQUIRE_THROWS_WITH(parse_config("train: {lr: abc}"),
                      Contains("train.lr = \"abc\"") && Contains("expected a finite number"));
  REQUIRE_THROWS_WITH(parse_config("model: {n_layer: 4.5}"),
                      Contains("model.n_layer = \"4.5\"") && Contains("expected an integer"));
  REQUIRE_THROWS_WITH(parse_config("base: &b {lr: 0.1}\ntrain: {<<: *b}"),
                      Contains("unknown key 'base'"));
  REQUIRE_THROWS_WITH(parse_config("train: {<<: {lr: 0.1}}"),
                      Contains("unknown key 'train.<<': YAML merge keys"));
  // past a double's range either way: said as such, not as "not a finite number"
  REQUIRE_THROWS_WITH(parse_config("train: {min_lr_ratio: 1e-400}"),
                      Contains("train.min_lr_ratio = \"1e-400\"") &&
                          Contains("below its smallest, about 2.2e-308 (write 0)"));
  REQUIRE_THROWS_WITH(parse_config("train: {lr: 1e400}"),
                      Contains("train.lr = \"1e400\"") && Contains("past its largest"));
  // too large for an int: the key's own range (seq_len >= 1; a per-mille key has a top)
  REQUIRE_THROWS_WITH(parse_config("model: {seq_len: 99999999999}"),
                      Contains("model.seq_len = \"99999999999\"") &&
                          EndsWith("expected an integer > 0, up to 2147483647"));
  REQUIRE_THROWS_WITH(parse_config("run: {seed: 99999999999999999999}"),
                      Contains("a non-negative integer up to 18446744073709551615"));
  REQUIRE_THROWS_WITH(parse_config("model: {n_layer: 4x}"), EndsWith("expected an integer"));
  REQUIRE_THROWS_WITH(
      parse_config("run: {deterministic: maybe}"),
      Contains("run.deterministic = \"maybe\"") && Contains("true or false (or yes/no, on/off)"));
  REQUIRE_THROWS_WITH(parse_config("run: {seed: -1}"),
                      Contains("run.seed = \"-1\"") && Contains("non-negative integer"));
  REQUIRE_THROWS_WITH(parse_config("parallel: {dp: many}"),
                      Contains("parallel.dp = \"many\"") && Contains("an integer or auto"));
  REQUIRE_THROWS_WITH(parse_config("train: {lr: [1, 2]}"),
                      Contains("train.lr = <sequence>") && Contains("expected a finite number"));
  REQUIRE_THROWS_WITH(parse_config("train: {lr: }"),
                      Contains("train.lr = null") && Contains("expected a finite number"));
  REQUIRE_THROWS_WITH(parse_config("train: {lr: .nan}"),
                      Contains("train.lr = \".nan\"") && Contains("expected a finite number"));
  REQUIRE_THROWS_WITH(parse_config("train: {lr: .inf}"), Contains("expected a finite number"));
}

// yaml-cpp keeps duplicate keys and the last one wins: each key may appear once, in any spelling;
// --set still overrides.
TEST_CASE("a_key_given_twice_is_an_error_naming_it", "[config][errors]") {
  REQUIRE_THROWS_WITH(parse_config("train:\n  lr: 0.1\n  lr: 0.2\n"),
                      Contains("'train.lr' is given twice (line 3)"));
  REQUIRE_THROWS_WITH(parse_config("train: {lr: 0.1}\ntrain: {steps: 2}\n"),
                      Contains("'train' is given twice"));
  REQUIRE_THROWS_WITH(parse_config("train.lr: 0.1\ntrain: {lr: 0.2}\n"),
                      Contains("'train.lr' is given twice"));
  CHECK(parse_config("model: {seq_len: 8}\ntrain: {steps: 2}\n").train.steps == 2);
  CHECK(parse_config("train: {lr: 0.1}", {"train.lr=0.2", "train.lr=0.3"}).train.lr == 0.3);
}

TEST_CASE("a_section_given_a_scalar_is_an_error", "[config][errors]") {
  REQUIRE_THROWS_WITH(parse_config("train: 5"),
                      Contains("train = \"5\"") && Contains("expected a mapping"));
  REQUIRE_THROWS_WITH(parse_config("just a string"), Contains("mapping of sections"));
}

TEST_CASE("yaml_syntax_errors_give_the_line", "[config][errors]") {
  REQUIRE_THROWS_AS(parse_config("train: {lr: 0.1\nmodel: ["), ConfigError);
  REQUIRE_THROWS_WITH(parse_config("train: {lr: 0.1\nmodel: ["),
                      Contains("YAML syntax error at line"));
}

TEST_CASE("enumerations_list_the_allowed_values", "[config][errors]") {
  struct Case {
    const char* yaml;
    const char* key_value;
    const char* allowed;
  };
  const Case cases[] = {
      {"train: {schedule: cosin}", "train.schedule = \"cosin\"", "constant, cosine, linear, wsd"},
      {"precision: {compute: fp16}", "precision.compute = \"fp16\"", "fp32, bf16, fp8"},
      {"activation_checkpointing: some", "activation_checkpointing = \"some\"",
       "none, full, selective"},
      {"parallel: {pipeline: {schedule: zb}}", "parallel.pipeline.schedule = \"zb\"",
       "1f1b, gpipe, interleaved"},
      {"hardware: {device: tpu}", "hardware.device = \"tpu\"", "cpu, cuda"},
      {"distributed: {backend: mpi}", "distributed.backend = \"mpi\"", "auto, gloo, nccl"},
      {"logging: {level: verbose}", "logging.level = \"verbose\"",
       "trace, debug, info, warn, error"},
      {"parallel: {zero: 4}", "parallel.zero = 4", "0, 1, 2, 3"},
  };
  for (const Case& c : cases) {
    INFO(c.yaml);
    REQUIRE_THROWS_WITH(parse_config(c.yaml),
                        Contains(c.key_value) && Contains(std::string("one of ") + c.allowed));
  }
  REQUIRE_THROWS_WITH(parse_config("train: {schedule: cosin}"), Contains("did you mean 'cosine'?"));
}

TEST_CASE("out_of_range_values_name_the_bound", "[config][errors]") {
  REQUIRE_THROWS_WITH(parse_config("train: {lr: 0}"), Contains("train.lr = 0.0: must be > 0"));
  REQUIRE_THROWS_WITH(parse_config("model: {moe: {capacity_factor: 0}}"),
                      Contains("model.moe.capacity_factor = 0.0: must be > 0 or null"));
  REQUIRE_THROWS_WITH(parse_config("model: {moe: {capacity_factor: all}}"),
                      Contains("expected a finite number or null"));
  REQUIRE_THROWS_WITH(parse_config("train: {min_lr_ratio: 1.5}"),
                      Contains("train.min_lr_ratio = 1.5: must be in [0, 1]"));
  REQUIRE_THROWS_WITH(parse_config("train: {beta2: 1}"),
                      Contains("train.beta2 = 1.0: must be in [0, 1)"));
  REQUIRE_THROWS_WITH(parse_config("train: {spike_factor: 1}"),
                      Contains("train.spike_factor = 1.0: must be > 1"));
  REQUIRE_THROWS_WITH(parse_config("model: {vocab_size: 1}"),
                      Contains("model.vocab_size = 1: must be in [2, 65536]"));
  REQUIRE_THROWS_WITH(parse_config("model: {vocab_size: 70000}"),  // token shards hold uint16
                      Contains("model.vocab_size = 70000: must be in [2, 65536]"));
  REQUIRE_THROWS_WITH(parse_config("checkpoint: {keep: 0}"), Contains("checkpoint.keep = 0"));
  REQUIRE_THROWS_WITH(parse_config("parallel: {dp: -2}"), Contains("parallel.dp = -2"));
  REQUIRE_THROWS_WITH(parse_config("distributed: {timeout_s: 0}"),
                      Contains("distributed.timeout_s = 0.0: must be in [0.001, 604800]"));
  // Upper bounds where a larger value would overflow what the runtime derives from it.
  REQUIRE_THROWS_WITH(
      parse_config("distributed: {timeout_s: 1e300}"),
      Contains("distributed.timeout_s = ") && Contains("must be in [0.001, 604800]"));
  REQUIRE_THROWS_WITH(parse_config("model: {make_vocab_size_divisible_by: 2147483647}"),
                      Contains("model.make_vocab_size_divisible_by = 2147483647: must be in"));
  for (const char* key : {"model.seq_len", "model.n_layer", "model.d_model", "model.n_head",
                          "train.micro_batch", "train.grad_accum", "train.steps"}) {
    INFO(key);
    REQUIRE_THROWS_WITH(parse_config("", {std::string(key) + "=0"}),
                        Contains(std::string(key) + " = 0"));
  }
  REQUIRE_THROWS_WITH(parse_config("", {"train.warmup_steps=-1"}),
                      Contains("train.warmup_steps = -1"));
  REQUIRE_THROWS_WITH(parse_config("", {"train.eps=0"}), Contains("train.eps = 0.0"));
  REQUIRE_THROWS_WITH(parse_config("", {"train.grad_clip=-1"}), Contains("train.grad_clip = -1.0"));
  REQUIRE_THROWS_WITH(parse_config("", {"checkpoint.every_steps=-1"}),
                      Contains("checkpoint.every_steps = -1"));
  REQUIRE_THROWS_WITH(parse_config("", {"parallel.bucket_mb=0"}),
                      Contains("parallel.bucket_mb = 0.0"));
}

TEST_CASE("missing_config_file_names_the_path", "[config][errors]") {
  REQUIRE_THROWS_WITH(load_config_file("/nonexistent/run.yaml"), Contains("/nonexistent/run.yaml"));
}

TEST_CASE("a_config_path_that_cannot_be_read_is_a_config_error_saying_why", "[config][errors]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "trainer_config_path_errors_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string loop = (dir / "loop.yaml").string();
  std::filesystem::create_symlink(loop, loop);  // a link to itself
  CHECK_THROWS_AS(load_config_file(loop), ConfigError);
  CHECK_THROWS_WITH(load_config_file(loop), Contains("cannot read config file '" + loop +
                                                     "': Too many levels of symbolic links"));
  // A device without an end (or a file of that size) is no run config: refused, not read for ever.
  CHECK_THROWS_WITH(load_config_file("/dev/zero"),
                    Contains("config file '/dev/zero' is larger than 16 MiB"));
  std::filesystem::remove_all(dir);
}
