#pragma once
// What a run's steps add up to by a step, for its report's stability section: carried in
// checkpoints (manifest.json's "step_totals") so that a resumed run's report counts every step of
// the run, not only the steps its own process ran.
#include <cmath>
#include <cstdint>
#include <optional>

namespace trainer {

struct StepTotals {
  int64_t steps = 0;  // the steps these figures count
  int64_t clipped_steps = 0;
  int64_t nonfinite_steps = 0;
  std::optional<double> grad_norm_max;  // none before a finite norm
  // The finite losses since the last metrics.jsonl line (its next line's loss_mean takes them in).
  double loss_sum_since_line = 0;
  int64_t losses_since_line = 0;

  // One more step: whether it was clipped or skipped (non-finite), its gradient norm and loss
  // (counted where finite).
  void add_step(bool clipped, bool nonfinite, double grad_norm, double loss) {
    ++steps;
    clipped_steps += clipped ? 1 : 0;
    nonfinite_steps += nonfinite ? 1 : 0;
    if (std::isfinite(grad_norm) && (!grad_norm_max || grad_norm > *grad_norm_max))
      grad_norm_max = grad_norm;
    if (std::isfinite(loss)) {
      loss_sum_since_line += loss;
      ++losses_since_line;
    }
  }

  // The totals of these steps followed by `later`'s (whose losses since a line are the last).
  StepTotals then(const StepTotals& later) const {
    StepTotals t{steps + later.steps,
                 clipped_steps + later.clipped_steps,
                 nonfinite_steps + later.nonfinite_steps,
                 grad_norm_max,
                 later.loss_sum_since_line,
                 later.losses_since_line};
    if (later.grad_norm_max && (!t.grad_norm_max || *later.grad_norm_max > *t.grad_norm_max))
      t.grad_norm_max = later.grad_norm_max;
    return t;
  }
};

}  // namespace trainer
