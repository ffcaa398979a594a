#pragma once
// RunReport: the typed form of <out_dir>/report.json (DESIGN.md "Run report"; schema
// "trainer.report/1"). Field names are the JSON keys and are a contract with users and scripts.
// Derived fields (throughput, loss, stability, stragglers) are filled by report_builder.h.
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/run_resume.h"
#include "runtime/core/step_totals.h"
#include "runtime/report/spike.h"

namespace trainer::report {

inline constexpr const char* kReportSchema = "trainer.report/1";
inline constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();  // -> JSON null

struct RunInfo {
  std::string name;
  std::string config_sha256;  // (of the whole config: run.out_dir and run.name too)
  std::string run_id;         // the run's, kept through its resumes (Checkpointing::run_id)
  uint64_t seed = 0;          // run.seed: runs of one config that differ in it draw other data
  std::string git_rev;        // defaults to the build's revision (build_git_rev())
  std::string started_at, finished_at;  // ISO 8601 UTC, see now_iso8601()
  // completed: ran to train.steps; stopped: ended early on purpose (train.stop_after_steps, a
  // SIGTERM/SIGINT), after saving a checkpoint to resume from; failed: died (see error);
  // running: written as the first step starts, so a run killed without a word (SIGKILL, a lost
  // node) leaves that, not an earlier run's report in the same out_dir.
  std::string status = "completed";
  std::optional<int64_t> resumed_from_step;  // null for a fresh start
  // Every resume of the run, oldest first, with what each changed (core/run_resume.h): the
  // settings a run's steps ran under where a resume changed them. Empty for a fresh start; a run
  // resumed from a checkpoint written before this field names only its own resume.
  std::vector<RunResume> resumes;
  int64_t steps_planned = 0;  // train.steps
  // The step the run reached (what steps_planned counts): resumed_from_step plus steps_run.
  int64_t steps_completed = 0;
  // Steps this process ran (after a resume: since resumed_from_step; the step figures of the
  // report, its stability and throughput cover those, metrics.jsonl the whole run, and the loss
  // curve and val_loss take in the points metrics.jsonl logged before the resume).
  int64_t steps_run = 0;
  std::string error;  // why a failed run died; omitted when empty
};

struct HardwareInfo {
  std::string device_type = "cpu";  // cpu | cuda
  std::string device_name;
  int device_count = 1;  // devices in the run (one per rank)
  int nodes = 1;
  double peak_tflops_per_device = 0;
  std::string peak_source = "unknown";         // config | measured-sgemm | table | unknown
  std::map<std::string, std::string> kernels;  // Backend::kernels(): op family -> implementation
};

struct ParallelInfo {
  int world_size = 1, dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
  int zero_stage = 0;
  bool sequence_parallel = false;
  std::string pipeline_schedule = "1f1b";
  int microbatches = 1;
  int virtual_stages = 1;  // model chunks a pipeline stage (the interleaved schedule)
  std::string activation_checkpointing = "none";
  std::string precision = "fp32";  // compute precision: fp32 | bf16 | fp8
};

struct BatchInfo {
  int micro_batch = 0, grad_accum = 1, seq_len = 0;
  int64_t global_batch_sequences = 0;  // micro_batch * grad_accum * dp
  int64_t tokens_per_step = 0;         // global_batch_sequences * seq_len
};

struct ModelInfo {
  std::string arch = "gpt";
  int64_t params = 0;
  int64_t non_embedding_params = 0;
  // Mixture of experts (num_experts 0: dense, and the report leaves these out): a token runs
  // top_k experts per block, active_non_embedding_params in all (what flops_per_token counts);
  // capacity_factor: +infinity for dropless (null in the JSON, as in the config).
  int num_experts = 0, top_k = 0;
  double capacity_factor = 0;
  int64_t active_non_embedding_params = 0;
  int n_layer = 0, d_model = 0, n_head = 0, vocab_size = 0;
  int padded_vocab_size = 0;  // wte rows and logits columns (params and flops count vocab_size)
  double flops_per_token = 0;
};

struct StepTimeStats {
  double p50 = kUnknown, p90 = kUnknown, max = kUnknown;
};

struct ThroughputInfo {
  // tokens_per_step / mean step time of the kept steps; these three are null (kUnknown) when no
  // step was timed (a run that failed before its first step ended)
  double tokens_per_second = kUnknown;
  double tokens_per_second_per_device = kUnknown;
  double tflops_per_device = kUnknown;
  double mfu = kUnknown;  // fraction; null when the peak is unknown
  StepTimeStats step_time_s;
  int warmup_steps_excluded = 0;
  std::string tokens_per_second_basis = "mean_step_time_after_warmup";
  // Mean seconds per step (after warm-up, rank 0) blocked on the gradient reduction after
  // backward: the part of communication that overlap did not hide.
  double grad_sync_wait_s = kUnknown;
};

struct MemoryBreakdown {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0;  // bytes on one rank
  int64_t zero_staging = 0;  // ZeRO's communication staging (parallel/zero_layout.h)
};

struct MemoryInfo {
  // Peak resident memory over the ranks; null when not gathered (a failed run).
  std::optional<int64_t> peak_bytes_per_rank_max;
  std::optional<int64_t> peak_bytes_per_rank_mean;
  MemoryBreakdown breakdown;  // rank 0's
  // Each pipeline stage's first rank's (dp, cp and tp index 0), in stage order: the stages hold
  // different layers, and `trainer plan` gives the one that needs the most. Gathered at the end
  // of a run; empty in the report of one that failed.
  std::vector<MemoryBreakdown> breakdown_by_stage;
};

struct LossInfo {
  double final_train_loss = kUnknown;
  int64_t tokens_seen = 0;
  std::optional<double> val_loss;
  std::optional<int64_t> val_at_tokens;
  std::vector<std::pair<int64_t, double>> curve;  // [tokens, loss]
};

// grad_norm_max, clipped_steps and nonfinite_steps count the steps_counted steps: the whole run
// where its checkpoints carried their totals (StepTotals), else the steps since it resumed from
// a checkpoint written before them. The rest are this process's.
struct StabilityInfo {
  int64_t steps_counted = 0;
  double grad_norm_last = kUnknown, grad_norm_max = kUnknown;
  int64_t clipped_steps = 0;
  std::vector<LossSpike> loss_spikes;
  int64_t nonfinite_steps = 0;
  // Mixture of experts (absent for a dense model): the last step's load-balancing loss, and the
  // mean and max over the steps of the share of choices dropped past an expert's capacity.
  std::optional<double> moe_aux_loss_last, moe_dropped_fraction_mean, moe_dropped_fraction_max;
};

struct StragglerInfo {  // both null when the ranks' step times were not gathered (a failed run)
  std::optional<int> slowest_rank;
  std::optional<double> slowest_over_median_step_time;
};

struct DataInfo {
  std::string train;
  std::optional<std::string> val;  // data.val where evals run
  // The tokens each eval reads: train.eval_batches global batches (the global batch is the
  // train step's, so it grows with dp), or all of data.val where it holds fewer.
  std::optional<int64_t> val_tokens_per_eval;
  // Token shards: data::shards_fingerprint of the files they matched (names without directory,
  // token counts, first and last tokens): which data a path or glob named, wherever it lay.
  std::optional<std::string> train_shards_sha256, val_shards_sha256;
  std::optional<double> entropy_floor;  // nats/token, synthetic sources only
  // Token shards only: the tokens one pass over data.train feeds the steps (whole global batches
  // of each shard), and the passes read (the loader's position: passes completed and the share of
  // this one; above 1 the run has read its data again).
  std::optional<int64_t> train_tokens_per_pass;
  std::optional<double> passes;
};

// logging.profile_steps: device time per step by phase, on rank 0, over the steps profiled (the
// first ones after the warm-up steps that throughput leaves out). See
// runtime/core/phase_profiler.h.
struct PhaseTime {
  std::string name;           // "fwd.qkv", "bwd.attention", "optimizer", ...
  double calls_per_step = 0;  // e.g. n_layer x grad_accum for a block's op
  double time_s = 0;          // per step
  double share = 0;           // of ProfileInfo::step_time_s
  double tflops = kUnknown;   // math FLOPs per second; null for a phase that is not math
};

struct ProfileInfo {
  int steps = 0;
  int64_t first_step = 0;         // 1-based, as in metrics.jsonl
  double step_time_s = 0;         // device time from a step's start to its end, mean
  double unaccounted_s = 0;       // step_time_s minus the phases' sum: gaps that no phase covers
  std::vector<PhaseTime> phases;  // longest first
};

struct RunReport {
  RunInfo run;
  HardwareInfo hardware;
  ParallelInfo parallel;
  BatchInfo batch;
  ModelInfo model;
  ThroughputInfo throughput;
  MemoryInfo memory;
  LossInfo loss;
  StabilityInfo stability;
  StragglerInfo stragglers;
  DataInfo data;
  std::optional<ProfileInfo> profile;  // only when steps were profiled
  nlohmann::ordered_json config;       // the resolved config (config_json.h); last in the file
};

nlohmann::ordered_json to_json(const RunReport& report);

// Writes <out_dir>/report.json through a temporary file, fsync and rename, so a reader never sees
// half a report. Returns the path written.
std::string write_report(const RunReport& report, const std::string& out_dir);

// Reads a report.json. Throws config::ConfigError naming the file when it is missing, is not
// JSON, or its schema is not trainer.report/1.
// `path`: a report.json, or a run's out_dir (its report.json).
nlohmann::json load_report(const std::string& path);

// The git revision the binary was built from, with "-dirty.<8 hex of the diff>" when tracked
// files differed from it ("unknown" outside a git checkout); taken at build time
// (cmake/git_rev.cmake).
std::string build_git_rev();
// Current UTC time, e.g. "2024-05-20T12:34:56Z".
std::string now_iso8601();

}  // namespace trainer::report
