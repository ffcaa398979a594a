#pragma once
// From raw observations to report.json's derived fields. The free functions are the rules (each
// unit-tested); ReportBuilder collects observations during the run and applies them at the end.
//
//   report::ReportBuilder builder(report::report_skeleton(cfg, ...), cfg.train.spike_factor);
//   per step:  if (auto spike = builder.record_step(rec)) spdlog::warn(...);
//   per eval:  builder.record_eval({step, tokens, val_loss});
//   at end:    builder.set_rank_median_step_times(gathered); builder.set_memory(peaks, ...);
//              report::write_report(builder.finish("completed"), cfg.run.out_dir);
#include <optional>
#include <string>
#include <vector>

#include "runtime/report/records.h"
#include "runtime/report/run_report.h"
#include "runtime/report/spike.h"

namespace trainer::report {

struct Observations {
  std::vector<StepRecord> steps;  // every step this process ran, in order
  std::vector<EvalRecord> evals;  // the last eval this process ran (the report takes no other)
  // Each rank's median_step_time, gathered at the end; empty: only rank 0's own steps are known.
  // (Not every rank's every step time: at a million steps and 512 ranks that gather alone was
  // 16 GiB on each rank.)
  std::vector<double> rank_median_step_times;
  std::vector<int64_t> peak_bytes_per_rank;
  MemoryBreakdown memory_breakdown;
  std::vector<MemoryBreakdown> stage_memory;  // MemoryInfo::breakdown_by_stage
  std::vector<LossSpike> spikes;              // as the online SpikeDetector found them
  int64_t start_tokens = 0;           // tokens seen before the first step (a resumed checkpoint's)
  std::optional<double> data_passes;  // token shards: the train loader's passes_read()
  EarlierPoints earlier;              // a resumed job's earlier runs' logged points
  std::optional<StepTotals> earlier_totals;  // the steps before the resume (its checkpoint's)
  StepTotals own_totals;  // this process's steps (its losses since a line: since the last line)
};

// First steps left out of timing statistics (start-up, allocation): min(3, n_steps - 1).
int warmup_steps_to_exclude(size_t n_steps);

// p50/p90/max over times[exclude:].
StepTimeStats step_time_stats(const std::vector<double>& times, int exclude);

// A rank's median step time over the steps after the warm-up (warmup_steps_to_exclude): what it
// contributes to find_straggler. NaN without any step.
double median_step_time(const std::vector<double>& times);

// The rank with the largest median step time, and its median divided by the median of all ranks'
// medians; none when a rank has no median.
StragglerInfo find_straggler(const std::vector<double>& rank_medians);

// tokens_per_second = tokens_per_step / mean(step_time_s of the kept steps); per device, TFLOP/s
// and MFU follow from hardware and model (DESIGN.md's MFU formula).
ThroughputInfo compute_throughput(const std::vector<StepRecord>& steps, const BatchInfo& batch,
                                  const ModelInfo& model, const HardwareInfo& hardware);

// Curve: steps with step % curve_every == 0, plus the first and last (non-finite losses left
// out); after a resume the earlier runs' points at those steps come first (and this run's first
// step is no longer the curve's first). tokens_seen: the last step's, or start_tokens when no
// step ran. val_loss: the last eval, of this run or else of the earlier ones.
LossInfo summarize_loss(const std::vector<StepRecord>& steps, const std::vector<EvalRecord>& evals,
                        int curve_every, int64_t start_tokens = 0,
                        const EarlierPoints& earlier = {});

// The stability of `steps`, its counts the run's `totals` (run_totals: a resume's earlier steps
// too); with no step, the last grad norm is the one metrics.jsonl logged at the checkpoint
// (`earlier`'s point at start_tokens), where it has that line.
StabilityInfo summarize_stability(const std::vector<StepRecord>& steps,
                                  const std::vector<LossSpike>& spikes, const StepTotals& totals,
                                  int64_t start_tokens = 0, const EarlierPoints& earlier = {});

// The earlier steps' totals (a resume's) followed by this process's.
StepTotals run_totals(const Observations& obs);

MemoryInfo summarize_memory(const std::vector<int64_t>& peak_bytes_per_rank,
                            const MemoryBreakdown& breakdown,
                            std::vector<MemoryBreakdown> by_stage = {});

// Fills throughput, loss, stability, stragglers, memory and run.steps_completed and steps_run of
// `report` from `obs`; the static sections (batch, model, hardware) must already be set.
void fill_derived(RunReport& report, const Observations& obs, int curve_every);

class ReportBuilder {
 public:
  ReportBuilder(RunReport base, double spike_factor, int curve_every = 1);

  // Returns the spike when this step's loss is one, so the loop can log a warning now.
  std::optional<LossSpike> record_step(const StepRecord& rec);
  void set_start_tokens(int64_t tokens);  // a resume's: what tokens_seen is before any step
  void set_data_passes(double passes) { obs_.data_passes = passes; }  // report.data.passes
  // A resume's: the loss curve and val_loss take in what the earlier runs logged.
  // Its losses also fill the spike detector's window, so that a requeued job's first steps are
  // judged against the steps before its resume.
  void set_earlier(EarlierPoints points);
  // A resume's: the stability counts take in the steps before it (none: a checkpoint without
  // them, and the counts cover this process's steps).
  void set_earlier_totals(std::optional<StepTotals> totals);
  // The totals of the run's steps so far (the earlier ones' and this process's), for a checkpoint.
  StepTotals totals() const;
  // The mean of the finite losses recorded since the last call (before a resume too: the
  // checkpoint's totals carry them), NaN when none was finite; for a metrics.jsonl line.
  double take_loss_mean();
  void record_eval(const EvalRecord& rec);
  void set_rank_median_step_times(std::vector<double> medians);
  void set_memory(std::vector<int64_t> peak_bytes_per_rank, const MemoryBreakdown& breakdown);
  void set_stage_memory(std::vector<MemoryBreakdown> by_stage) {
    obs_.stage_memory = std::move(by_stage);
  }

  RunReport& base() { return base_; }
  const Observations& observations() const { return obs_; }

  // The full report: derived fields filled, status set, finished_at now, error if given.
  RunReport finish(const std::string& status, const std::string& error = "") const;

 private:
  RunReport base_;
  Observations obs_;
  SpikeDetector spikes_;
  int curve_every_;
};

}  // namespace trainer::report
