#include "runtime/report/report_builder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "runtime/report/flops.h"
#include "runtime/report/stats.h"

namespace trainer::report {
namespace {

std::vector<double> kept(const std::vector<double>& times, int exclude) {
  const size_t skip = std::min(times.size(), size_t(std::max(0, exclude)));
  return std::vector<double>(times.begin() + long(skip), times.end());
}

std::vector<double> step_times(const std::vector<StepRecord>& steps) {
  std::vector<double> t;
  t.reserve(steps.size());
  for (const StepRecord& s : steps) t.push_back(s.step_time_s);
  return t;
}

}  // namespace

int warmup_steps_to_exclude(size_t n_steps) {
  return n_steps == 0 ? 0 : int(std::min<size_t>(3, n_steps - 1));
}

StepTimeStats step_time_stats(const std::vector<double>& times, int exclude) {
  const std::vector<double> k = kept(times, exclude);
  StepTimeStats s;
  if (k.empty()) return s;
  s.p50 = percentile(k, 0.5);
  s.p90 = percentile(k, 0.9);
  s.max = *std::max_element(k.begin(), k.end());
  return s;
}

double median_step_time(const std::vector<double>& times) {
  return median(kept(times, warmup_steps_to_exclude(times.size())));
}

StragglerInfo find_straggler(const std::vector<double>& medians) {
  StragglerInfo info;
  if (medians.empty() ||
      std::any_of(medians.begin(), medians.end(), [](double m) { return std::isnan(m); }))
    return info;
  const auto slowest = std::max_element(medians.begin(), medians.end());
  const double typical = median(medians);
  info.slowest_rank = int(slowest - medians.begin());
  info.slowest_over_median_step_time = typical > 0 ? *slowest / typical : 1.0;
  return info;
}

ThroughputInfo compute_throughput(const std::vector<StepRecord>& steps, const BatchInfo& batch,
                                  const ModelInfo& model, const HardwareInfo& hardware) {
  ThroughputInfo t;
  t.warmup_steps_excluded = warmup_steps_to_exclude(steps.size());
  const std::vector<double> times = step_times(steps);
  t.step_time_s = step_time_stats(times, t.warmup_steps_excluded);
  const std::vector<double> k = kept(times, t.warmup_steps_excluded);
  const double total_s = std::accumulate(k.begin(), k.end(), 0.0);
  if (k.empty() || total_s <= 0) return t;
  const int devices = std::max(1, hardware.device_count);
  t.tokens_per_second = double(batch.tokens_per_step) * double(k.size()) / total_s;
  t.tokens_per_second_per_device = t.tokens_per_second / devices;
  t.tflops_per_device =
      report::tflops_per_device(model.flops_per_token, t.tokens_per_second, devices);
  t.mfu = report::mfu(model.flops_per_token, t.tokens_per_second, hardware.peak_tflops_per_device,
                      devices);
  return t;
}

LossInfo summarize_loss(const std::vector<StepRecord>& steps, const std::vector<EvalRecord>& evals,
                        int curve_every, int64_t start_tokens, const EarlierPoints& earlier) {
  LossInfo l;
  l.tokens_seen = start_tokens;
  const int every = std::max(1, curve_every);
  // The earlier runs' points where an uninterrupted run has them (their eval and stop steps'
  // lines are not curve points); then this run's, whose first step is the curve's first point
  // only when nothing came before it.
  for (const EarlierPoints::Point& p : earlier.curve)
    if ((p.step % every == 0 || p.step == 1) && std::isfinite(p.loss))
      l.curve.emplace_back(p.tokens, p.loss);
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepRecord& s = steps[i];
    const bool first = i == 0 && earlier.curve.empty();
    const bool logged = s.step % every == 0 || first || i + 1 == steps.size();
    if (logged && std::isfinite(s.loss)) l.curve.emplace_back(s.tokens, s.loss);
  }
  if (!steps.empty()) {
    l.final_train_loss = steps.back().loss;
    l.tokens_seen = steps.back().tokens;
  } else if (!earlier.curve.empty() && earlier.curve.back().tokens == start_tokens) {
    // a resume that ran no step (a requeue rewriting a lost report): the loss logged at its
    // checkpoint, when metrics.jsonl has that step's line
    l.final_train_loss = earlier.curve.back().loss;
  }
  const std::vector<EvalRecord>& last_evals = evals.empty() ? earlier.evals : evals;
  if (!last_evals.empty()) {
    l.val_loss = last_evals.back().val_loss;
    l.val_at_tokens = last_evals.back().tokens;
  }
  return l;
}

StepTotals run_totals(const Observations& obs) {
  return obs.earlier_totals ? obs.earlier_totals->then(obs.own_totals) : obs.own_totals;
}

StabilityInfo summarize_stability(const std::vector<StepRecord>& steps,
                                  const std::vector<LossSpike>& spikes, const StepTotals& t,
                                  int64_t start_tokens, const EarlierPoints& earlier) {
  StabilityInfo s;
  s.loss_spikes = spikes;
  s.steps_counted = t.steps;
  s.clipped_steps = t.clipped_steps;
  s.nonfinite_steps = t.nonfinite_steps;
  s.grad_norm_max = t.grad_norm_max.value_or(kUnknown);
  if (!steps.empty())
    s.grad_norm_last = steps.back().grad_norm;
  else if (!earlier.curve.empty() && earlier.curve.back().tokens == start_tokens)
    s.grad_norm_last = earlier.curve.back().grad_norm;  // (a requeue rewriting a lost report)
  double dropped_sum = 0;
  int64_t moe_steps = 0;
  for (const StepRecord& r : steps) {
    if (!r.moe_aux_loss || !r.moe_dropped_fraction) continue;
    s.moe_aux_loss_last = r.moe_aux_loss;
    dropped_sum += *r.moe_dropped_fraction;
    ++moe_steps;
    s.moe_dropped_fraction_max =
        std::max(s.moe_dropped_fraction_max.value_or(0.0), *r.moe_dropped_fraction);
  }
  if (moe_steps > 0) s.moe_dropped_fraction_mean = dropped_sum / static_cast<double>(moe_steps);
  return s;
}

MemoryInfo summarize_memory(const std::vector<int64_t>& peak_bytes_per_rank,
                            const MemoryBreakdown& breakdown,
                            std::vector<MemoryBreakdown> by_stage) {
  MemoryInfo m;
  m.breakdown = breakdown;
  m.breakdown_by_stage = std::move(by_stage);
  if (peak_bytes_per_rank.empty()) return m;
  m.peak_bytes_per_rank_max =
      *std::max_element(peak_bytes_per_rank.begin(), peak_bytes_per_rank.end());
  const double sum = std::accumulate(peak_bytes_per_rank.begin(), peak_bytes_per_rank.end(), 0.0);
  m.peak_bytes_per_rank_mean = int64_t(std::llround(sum / double(peak_bytes_per_rank.size())));
  return m;
}

void fill_derived(RunReport& report, const Observations& obs, int curve_every) {
  report.run.steps_run = int64_t(obs.steps.size());
  report.run.steps_completed = report.run.resumed_from_step.value_or(0) + report.run.steps_run;
  report.throughput = compute_throughput(obs.steps, report.batch, report.model, report.hardware);
  report.loss = summarize_loss(obs.steps, obs.evals, curve_every, obs.start_tokens, obs.earlier);
  if (obs.data_passes && std::isfinite(*obs.data_passes)) report.data.passes = obs.data_passes;
  report.stability =
      summarize_stability(obs.steps, obs.spikes, run_totals(obs), obs.start_tokens, obs.earlier);
  report.memory = summarize_memory(obs.peak_bytes_per_rank, obs.memory_breakdown, obs.stage_memory);
  // Without the ranks' gathered medians (a failed run) only a single rank's run knows its
  // straggler.
  if (!obs.rank_median_step_times.empty())
    report.stragglers = find_straggler(obs.rank_median_step_times);
  else if (report.hardware.device_count <= 1 && !obs.steps.empty())
    report.stragglers = find_straggler({median_step_time(step_times(obs.steps))});
  else
    report.stragglers = {};
}

ReportBuilder::ReportBuilder(RunReport base, double spike_factor, int curve_every)
    : base_(std::move(base)), spikes_(spike_factor), curve_every_(curve_every) {}

void ReportBuilder::set_earlier(EarlierPoints points) {
  // the losses of the window's last steps before the resume (logged every logging.every_steps:
  // the points of 50 steps, not the last 50 points)
  const int64_t window = static_cast<int64_t>(spikes_.window());
  for (const EarlierPoints::Point& p : points.curve)
    if (p.step > points.curve.back().step - window) spikes_.remember(p.loss);
  obs_.earlier = std::move(points);
}

std::optional<LossSpike> ReportBuilder::record_step(const StepRecord& rec) {
  obs_.steps.push_back(rec);
  obs_.own_totals.add_step(rec.clipped, rec.nonfinite, rec.grad_norm, rec.loss);
  std::optional<LossSpike> spike = spikes_.observe(rec.step, rec.loss);
  if (spike) obs_.spikes.push_back(*spike);
  return spike;
}

void ReportBuilder::set_earlier_totals(std::optional<StepTotals> totals) {
  obs_.earlier_totals = totals;
  if (totals) {  // (the losses since the last line before the resume are this line's too)
    obs_.own_totals.loss_sum_since_line = totals->loss_sum_since_line;
    obs_.own_totals.losses_since_line = totals->losses_since_line;
  }
}

StepTotals ReportBuilder::totals() const {
  return run_totals(obs_);
}

double ReportBuilder::take_loss_mean() {
  StepTotals& t = obs_.own_totals;
  const double mean = t.losses_since_line > 0
                          ? t.loss_sum_since_line / static_cast<double>(t.losses_since_line)
                          : std::numeric_limits<double>::quiet_NaN();
  t.loss_sum_since_line = 0;
  t.losses_since_line = 0;
  return mean;
}

void ReportBuilder::set_start_tokens(int64_t tokens) {
  obs_.start_tokens = tokens;
}

void ReportBuilder::record_eval(const EvalRecord& rec) {
  obs_.evals.assign(1, rec);
}

void ReportBuilder::set_rank_median_step_times(std::vector<double> medians) {
  obs_.rank_median_step_times = std::move(medians);
}

void ReportBuilder::set_memory(std::vector<int64_t> peak_bytes_per_rank,
                               const MemoryBreakdown& breakdown) {
  obs_.peak_bytes_per_rank = std::move(peak_bytes_per_rank);
  obs_.memory_breakdown = breakdown;
}

RunReport ReportBuilder::finish(const std::string& status, const std::string& error) const {
  RunReport r = base_;
  fill_derived(r, obs_, curve_every_);
  r.run.status = status;
  r.run.error = error;
  r.run.finished_at = status == "running" ? "" : now_iso8601();  // (null until it ends)
  return r;
}

}  // namespace trainer::report
