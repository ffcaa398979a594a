#pragma once
// RunConfig: the typed form of one run's YAML file. Field names are the YAML keys (DESIGN.md "Run
// config"); they are a contract with users, tests and scripts.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace trainer::config {

// Bad user input: names the key, the bad value and what is allowed. The CLI exits with status 2.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
  ConfigError(const std::string& what, std::string key)
      : std::runtime_error(what), key(std::move(key)) {}
  // The config key whose value is refused ("train.lr"), where the error is about one key's
  // value; empty otherwise. A --set of that key is named in its place.
  std::string key;
};

struct RunSection {
  std::string name = "tiny";
  std::string out_dir = "runs/tiny";
  uint64_t seed = 1234;
  // Runs here are bit-identical either way: every op reduces in a fixed order (no atomics),
  // cuBLASLt is run-to-run reproducible on one GPU model, and the collectives sum in a fixed
  // order for a fixed group. The two exceptions, cuDNN's attention (TRAINER_ATTENTION=cudnn, whose
  // backward uses atomics) and GEMM algorithms picked by timing (TRAINER_GEMM_AUTOTUNE=1), are
  // refused with true.
  bool deterministic = false;
};

struct MoeConfig {
  int num_experts = 0;  // 0: dense MLP
  int top_k = 2;
  double capacity_factor = 1.25;  // +infinity (YAML null): dropless, every choice kept
  double aux_loss_coef = 0.01;
};

struct ModelConfig {
  std::string arch = "gpt";
  int vocab_size = 256;
  int seq_len = 128;
  int n_layer = 4;
  int d_model = 128;
  int n_head = 4;
  int ffn_mult = 4;
  // wte and the logits get vocab_size rounded up to a multiple of this (Megatron's default 128;
  // llm.c pads GPT-2's 50257 to 50304 the same way): odd row lengths keep the tied output layer's
  // bf16 GEMMs off the fast tensor-core kernels. The padding rows stay zero and out of the loss.
  int make_vocab_size_divisible_by = 128;
  MoeConfig moe;
  std::string init_from;  // optional safetensors / llm.c file to start from

  int padded_vocab_size() const {
    return padded_vocab_size_of(vocab_size, make_vocab_size_divisible_by);
  }
  static int padded_vocab_size_of(int vocab, int multiple) {
    return (vocab + multiple - 1) / multiple * multiple;
  }
};

struct PipelineConfig {
  std::string schedule = "1f1b";  // 1f1b | gpipe | interleaved
  int microbatches = 4;
  int virtual_stages = 1;
};

struct ParallelConfig {
  int dp = 0;  // 0 means "auto": world / (pp*cp*tp)
  int tp = 1, pp = 1, cp = 1, ep = 1;
  int zero = 0;  // 0 | 1 | 2 | 3
  bool sequence_parallel = false;
  PipelineConfig pipeline;
  double bucket_mb = 25;
  bool overlap_grad_reduce = true;
};

// The model chunks each pipeline stage holds: parallel.pipeline.virtual_stages under the
// interleaved schedule with pp > 1, else 1.
inline int virtual_stages_of(const ParallelConfig& p) {
  return p.pp > 1 && p.pipeline.schedule == "interleaved" ? p.pipeline.virtual_stages : 1;
}

struct TrainConfig {
  int micro_batch = 8;
  int grad_accum = 1;
  int steps = 300;
  int stop_after_steps = 0;  // 0: run all `steps`; N: checkpoint and stop at step N
  // The step this run ends at: stop_after_steps where it comes before steps.
  int last_step() const { return stop_after_steps > 0 ? std::min(steps, stop_after_steps) : steps; }
  double lr = 3.0e-3;
  double min_lr_ratio = 0.1;
  int warmup_steps = 30;
  std::string schedule = "cosine";  // constant | cosine | linear | wsd
  double decay_fraction = 0.2;      // wsd: fraction of steps spent decaying at the end
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8;
  double grad_clip = 1.0;  // 0 disables clipping
  int eval_every = 100;    // 0 disables eval
  int eval_batches = 8;
  double spike_factor = 3.0;
};

struct PrecisionConfig {
  std::string compute = "fp32";         // fp32 | bf16 | fp8
  std::string master_weights = "fp32";  // fp32
};

struct CheckpointConfig {
  std::string dir;  // empty -> <out_dir>/checkpoints
  int every_steps = 0;
  int keep = 2;
  // Write the files on a background thread from a host copy of the state while training goes
  // on; the checkpoint is committed (manifest, rename, "saved") at the end of the next step.
  bool async = false;
};

struct DataConfig {
  std::string train = "synthetic:markov";
  std::string val = "synthetic:markov";
  uint64_t seed = 7;
  bool shuffle = false;
};

struct HardwareConfig {
  std::string device = "cpu";  // cpu | cuda
  double peak_tflops = 0;      // 0 means "auto"
};

struct DistributedConfig {
  std::string backend = "auto";  // auto | gloo | nccl
  double timeout_s = 300;
};

struct LoggingConfig {
  int every_steps = 10;
  std::string level = "info";  // trace | debug | info | warn | error
  // Steps to profile (device time by phase, in report.json's "profile" and the log), from the
  // first step after the warm-up steps the throughput leaves out. 0: none.
  int profile_steps = 0;
};

struct RunConfig {
  RunSection run;
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  PrecisionConfig precision;
  std::string activation_checkpointing = "none";  // none | full | selective
  CheckpointConfig checkpoint;
  DataConfig data;
  HardwareConfig hardware;
  DistributedConfig distributed;
  LoggingConfig logging;

  std::string checkpoint_dir() const {
    return checkpoint.dir.empty() ? run.out_dir + "/checkpoints" : checkpoint.dir;
  }
};

// Parses YAML text (an empty string gives the defaults), applies `key.path=value` overrides in
// order, and returns the typed config. Throws ConfigError on unknown keys (with a did-you-mean),
// wrong types and out-of-range values.
RunConfig parse_config(const std::string& yaml_text,
                       const std::vector<std::string>& overrides = {});
// `-` is the embedded default (embedded_default_yaml).
RunConfig load_config_file(const std::string& path, const std::vector<std::string>& overrides = {});

// Checks values and divisibility against the world size (world_size 1 for single-process checks).
// Also checks that data files exist. Throws ConfigError.
void validate(RunConfig& cfg, int world_size);
// parallel.dp as the run uses it: the config's, or for auto (0) world / (pp * cp * tp). Throws
// ConfigError where that does not divide, or an explicit dp does not fill the world. validate()
// writes it back into the config; the one rule for the mesh, the report and `trainer plan`.
int resolved_dp(const ParallelConfig& p, int world_size);
// An output directory `dir` (named by `key` in the error) must be a directory or creatable as
// one (its nearest existing ancestor a writable directory): found before a run, not at its
// first write. Throws ConfigError.
void check_output_dir(const std::string& key, const std::string& dir);
// Why `path` cannot be read as an input file ("no such file", "is a directory", "is not a
// regular file (a pipe, socket or device)"), or "" when it can.
std::string input_file_problem(const std::string& path);
// What a training run writes: run.out_dir, and checkpoint.dir where saves are configured (not
// part of validate(): `plan` writes nothing and may run where the paths cannot be created).
void check_output_dirs(const RunConfig& cfg);
// What this build trains of the layouts validate() accepts: throws ConfigError for the pairings
// not built (ZeRO 2/3 with pipeline parallelism; mixture-of-experts blocks at tp > 1 without
// sequence parallelism or with a forward's sequences not divisible by tp).
// Called by `train` and `plan` before validate(), so such a layout is refused for what it is (not
// for its world size).
void check_runnable(const RunConfig& cfg);
// Test hook: TRAINER_TEST_EMULATED_FP8=1 lets the cpu backend run precision.compute: fp8 through
// its emulation (runtime/cpu/fp8.h), so the fp8 plumbing (checkpoints, resume) is tested where
// there is no GPU. Not for users: validate() refuses fp8 on cpu otherwise.
bool emulated_fp8_for_tests(const RunConfig& cfg);

// Canonical YAML of the whole config (every key, resolved); its sha256 is the config hash.
std::string to_yaml(const RunConfig& cfg);
// "key: old -> new" for every key whose value differs, in table order (what a resume changed).
std::vector<std::string> config_changes(const RunConfig& before, const RunConfig& after);
// Those of them that change what the run computes, its steps and its evals' losses: not its name
// and directories, checkpointing, logging, collectives (backend, timeout, buckets, overlap),
// run.deterministic, the peak MFU divides by, where it stops, how often it evaluates, or what it
// calls a loss spike.
std::vector<std::string> training_changes(const RunConfig& before, const RunConfig& after);
// sha256 hex of to_yaml(cfg): the config hash in checkpoints and reports.
std::string config_sha256(const RunConfig& cfg);

// The embedded default (configs/tiny.yaml compiled in).
const char* embedded_default_yaml();

}  // namespace trainer::config
