// Defaults: the struct initializers, DESIGN.md's "Run config" block and configs/tiny.yaml agree.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "runtime/config/run_config.h"

using namespace trainer::config;

namespace {

// DESIGN.md "Run config", copied verbatim: the documented contract.
const char* kDesignRunConfig = R"(
run:        {name: tiny, out_dir: runs/tiny, seed: 1234, deterministic: false}
model:      {arch: gpt, vocab_size: 256, seq_len: 128, n_layer: 4, d_model: 128, n_head: 4, ffn_mult: 4,
             moe: {num_experts: 0, top_k: 2, capacity_factor: 1.25, aux_loss_coef: 0.01}}
parallel:   {dp: auto, tp: 1, pp: 1, cp: 1, ep: 1, zero: 0, sequence_parallel: false,
             pipeline: {schedule: 1f1b, microbatches: 4, virtual_stages: 1},
             bucket_mb: 25, overlap_grad_reduce: true}
train:      {micro_batch: 8, grad_accum: 1, steps: 300, lr: 3.0e-3, min_lr_ratio: 0.1, warmup_steps: 30,
             schedule: cosine, weight_decay: 0.1, beta1: 0.9, beta2: 0.95, eps: 1.0e-8, grad_clip: 1.0,
             eval_every: 100, eval_batches: 8, spike_factor: 3.0}
precision:  {compute: fp32, master_weights: fp32}      # compute: fp32 | bf16 | fp8 (cuda, sm_90 only)
activation_checkpointing: none                          # none | full | selective
checkpoint: {dir: null, every_steps: 0, keep: 2}       # dir null -> <out_dir>/checkpoints
data:       {train: "synthetic:markov", val: "synthetic:markov", seed: 7, shuffle: false}  # or shard paths/globs
hardware:   {device: cpu, peak_tflops: auto}
distributed: {backend: auto, timeout_s: 300}
logging:    {every_steps: 10, level: info}
)";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("struct_defaults_equal_design_md_run_config", "[config]") {
  CHECK(to_yaml(parse_config(kDesignRunConfig)) == to_yaml(RunConfig{}));
}

TEST_CASE("empty_text_gives_the_defaults", "[config]") {
  CHECK(to_yaml(parse_config("")) == to_yaml(RunConfig{}));
  CHECK(to_yaml(parse_config("# only a comment\n")) == to_yaml(RunConfig{}));
}

TEST_CASE("tiny_yaml_parses_to_the_defaults", "[config]") {
  const std::string path = std::string(TRAINER_SOURCE_DIR) + "/configs/tiny.yaml";
  CHECK(to_yaml(load_config_file(path)) == to_yaml(RunConfig{}));
}

TEST_CASE("embedded_default_is_the_text_of_tiny_yaml", "[config]") {
  const std::string file = read_file(std::string(TRAINER_SOURCE_DIR) + "/configs/tiny.yaml");
  REQUIRE_FALSE(file.empty());
  CHECK(std::string(embedded_default_yaml()) == file);
  CHECK(to_yaml(parse_config(embedded_default_yaml())) == to_yaml(RunConfig{}));
}

TEST_CASE("special_values_map_to_zero_and_empty", "[config]") {
  const RunConfig c = parse_config(embedded_default_yaml());
  CHECK(c.parallel.dp == 0);           // dp: auto
  CHECK(c.hardware.peak_tflops == 0);  // peak_tflops: auto
  CHECK(c.checkpoint.dir.empty());     // dir: null
  CHECK(c.model.init_from.empty());    // absent
  CHECK(c.checkpoint_dir() == c.run.out_dir + "/checkpoints");
  const RunConfig explicit_null = parse_config("model: {init_from: null}\ncheckpoint: {dir: ~}");
  CHECK(explicit_null.model.init_from.empty());
  CHECK(explicit_null.checkpoint.dir.empty());
}

TEST_CASE("default_config_validates_on_one_process", "[config]") {
  RunConfig c = parse_config(embedded_default_yaml());
  REQUIRE_NOTHROW(validate(c, 1));
  CHECK(c.parallel.dp == 1);
}
