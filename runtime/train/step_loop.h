#pragma once
// StepLoop: the training loop of one process, step after step until the run's last step or a
// stop: the step, the eval where due, the stop decision every rank agrees on, rank 0's record of
// the step (the report's observations, metrics.jsonl, the console line), then the checkpoint.
// run.cpp builds what it runs on (the grid, the model, the data, the checkpoints, the report).
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/core/backend.h"
#include "runtime/core/phase_profiler.h"
#include "runtime/data/loader.h"
#include "runtime/report/metrics.h"
#include "runtime/report/peak.h"
#include "runtime/report/profile.h"
#include "runtime/report/report_builder.h"
#include "runtime/train/checkpointing.h"
#include "runtime/train/fault_injection.h"
#include "runtime/train/train_step.h"

namespace trainer::train {

// What the loop records into: the report's builder (every rank's: a failed run's report is rank
// 0's), and on rank 0 metrics.jsonl (null on the others).
struct StepRecorder {
  report::ReportBuilder* builder = nullptr;
  report::MetricsWriter* metrics = nullptr;
  report::PeakRate peak;  // for the console line's MFU
  int64_t tokens_per_step = 0;
  double flops_per_token = 0;
  std::function<report::MemoryBreakdown()> memory;  // the state and activations as allocated
};

class StepLoop {
 public:
  // `val` null without evals; `eval_batches` global batches per eval.
  StepLoop(const config::RunConfig& cfg, Backend& backend, TrainStep& trainer,
           Checkpointing& checkpoints, data::DataLoader& train, data::DataLoader* val,
           int64_t eval_batches, int rank, int world_size, StepRecorder recorder);

  // Steps first_step + 1 .. last (1-based), fewer where a stop comes; returns the last step done.
  // `running`: the step in progress (0 between steps), for a failure's message; `profile`:
  // logging.profile_steps' summary (rank 0), set as soon as its window ends.
  int run(int first_step, int last, int& running, std::optional<report::ProfileInfo>& profile);

  const std::vector<double>& step_times() const { return step_times_; }
  const std::vector<double>& sync_waits() const { return sync_waits_; }  // TrainStep's comm waits

 private:
  // The eval of `step` where due; a stop signal skips it (but the last step's).
  std::optional<double> maybe_evaluate(const report::StepRecord& rec, bool& stop);
  void record(const report::StepRecord& rec, const StepResult& r, const std::optional<double>& val,
              bool always, int64_t pass_before, int last);

  const config::RunConfig& cfg_;
  Backend& backend_;
  TrainStep& trainer_;
  Checkpointing& checkpoints_;
  data::DataLoader& train_;
  data::DataLoader* val_;
  int64_t eval_batches_;
  int world_size_;
  bool lead_;
  StepRecorder recorder_;
  FaultInjector faults_;
  std::unique_ptr<PhaseProfiler> profiler_;  // logging.profile_steps, rank 0
  std::vector<double> step_times_, sync_waits_;
  bool warned_mfu_above_peak_ = false;  // (once a run)
};

}  // namespace trainer::train
