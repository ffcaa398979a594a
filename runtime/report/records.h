#pragma once
// Raw observations the training loop records on rank 0 (global values), one per step or eval.
// Everything in report.json's throughput/loss/stability sections is derived from these.
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace trainer::report {

struct StepRecord {
  int64_t step = 0;      // 1-based optimizer step
  int64_t tokens = 0;    // tokens seen so far, including this step
  double loss = 0;       // mean over the global batch
  double grad_norm = 0;  // before clipping
  double lr = 0;
  double step_time_s = 0;
  bool clipped = false;    // grad_norm exceeded train.grad_clip
  bool nonfinite = false;  // loss or grad_norm was NaN/inf (the step was skipped)
  // Mixture of experts only: the load-balancing loss (already in the gradients, not in `loss`)
  // and the share of the top_k choices that went past an expert's capacity.
  std::optional<double> moe_aux_loss, moe_dropped_fraction;
};

struct EvalRecord {
  int64_t step = 0;
  int64_t tokens = 0;
  double val_loss = 0;
};

// What earlier runs of a resumed job logged before its checkpoint (metrics.jsonl's lines up to
// it): their losses and their evals, in step order (a non-finite value, written as null, is NaN).
struct EarlierPoints {
  struct Point {
    int64_t step = 0, tokens = 0;
    double loss = 0;
    double grad_norm = std::numeric_limits<double>::quiet_NaN();  // (NaN also when not logged)
  };
  std::vector<Point> curve;
  std::vector<EvalRecord> evals;
};

}  // namespace trainer::report
