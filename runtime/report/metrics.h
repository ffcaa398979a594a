#pragma once
// metrics.jsonl (one JSON object per logged step, flushed per line) and the console progress line.
#include <cstdio>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/report/records.h"

namespace trainer::report {

// Per-step throughput as logged: tokens_per_second = tokens_per_step / step_time_s.
struct StepRates {
  double tokens_per_second = 0;
  double mfu = 0;  // fraction; NaN when the peak is unknown (written as null)
};

StepRates step_rates(int64_t tokens_per_step, double step_time_s, double flops_per_token,
                     double peak_tflops_per_device, int device_count);

// Writes <out_dir>/metrics.jsonl (creating out_dir), one line per logged step. A run that starts
// after `first_step` steps (a resume) continues the file from there: lines of later steps, which
// an earlier run logged after that checkpoint before it died, are dropped, as are all lines when
// first_step is 0, so the file never holds a step twice. Each process's first line carries its
// run's `run_id`: kept lines of another run (an out_dir reused by another experiment, into which
// this run resumed) are dropped too, and foreign_run() names that run.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& out_dir, int first_step, std::string run_id = "");
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Fields: step, tokens, loss, grad_norm, lr, step_time_s, tokens_per_second, mfu
  // [, loss_mean] [, val_loss]. loss_mean: the mean of the finite losses of the steps since the
  // previous line (this one's included), as Megatron logs its loss (null where none was finite;
  // ReportBuilder::take_loss_mean, whose sums a checkpoint carries across a resume).
  void write(const StepRecord& rec, const StepRates& rates,
             std::optional<double> val_loss = std::nullopt,
             std::optional<double> loss_mean = std::nullopt);
  const std::string& path() const { return path_; }
  // The kept lines' loss points and evals (non-finite losses, written as null, left out).
  const EarlierPoints& earlier() const { return earlier_; }
  // The run_id of the lines dropped as another run's; "" when none were.
  const std::string& foreign_run() const { return foreign_run_; }

 private:
  std::string path_;
  EarlierPoints earlier_;
  std::string run_id_, foreign_run_;
  bool run_id_written_ = false;
  std::FILE* file_ = nullptr;
  void keep_points(const nlohmann::json& line);
};

// The JSON text of one metrics line (no newline).
std::string metrics_line(const StepRecord& rec, const StepRates& rates,
                         std::optional<double> val_loss = std::nullopt,
                         std::optional<double> loss_mean = std::nullopt);

// "step   10/300 | loss 4.1234 | grad_norm 1.23 | lr 3.00e-04 | 12.3k tok/s | mfu 1.2% |
//  45 ms/step | eta 00:12:34"; eta = (total_steps - step) * step_time_s.
std::string progress_line(const StepRecord& rec, int64_t total_steps, const StepRates& rates,
                          std::optional<double> val_loss = std::nullopt);

// 12345 -> "12.3k", 2.5e6 -> "2.50M"; 3 significant digits.
std::string human_count(double value);
// 754 s -> "00:12:34"; hours grow past 99 as needed.
std::string hms(double seconds);

}  // namespace trainer::report
