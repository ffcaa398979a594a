#pragma once
// Online loss-spike detection: a step's loss is a spike when it exceeds spike_factor times the
// median of the previous `window` finite losses, once at least `min_history` have been seen.
// The training loop feeds every step and logs a warning when observe() returns a spike.
#include <cstdint>
#include <deque>
#include <optional>

namespace trainer::report {

struct LossSpike {
  int64_t step = 0;
  double loss = 0;
  double ratio = 0;  // loss / running median
};

class SpikeDetector {
 public:
  // (a median of 3 already shrugs off one outlier: a run's first steps are watched too)
  explicit SpikeDetector(double spike_factor = 3.0, int window = 50, int min_history = 3);

  // Non-finite losses are ignored here (they are counted as nonfinite steps elsewhere).
  std::optional<LossSpike> observe(int64_t step, double loss);
  // A loss from before this process (a resumed job's earlier steps): into the window, unjudged.
  void remember(double loss);
  size_t window() const { return window_; }

 private:
  double spike_factor_;
  size_t window_;
  size_t min_history_;
  std::deque<double> history_;
};

}  // namespace trainer::report
