#include "runtime/report/spike.h"

#include <cmath>
#include <vector>

#include "runtime/report/stats.h"

namespace trainer::report {

SpikeDetector::SpikeDetector(double spike_factor, int window, int min_history)
    : spike_factor_(spike_factor),
      window_(size_t(window > 0 ? window : 1)),
      min_history_(size_t(min_history > 0 ? min_history : 1)) {}

std::optional<LossSpike> SpikeDetector::observe(int64_t step, double loss) {
  if (!std::isfinite(loss)) return std::nullopt;
  std::optional<LossSpike> spike;
  if (history_.size() >= min_history_ && spike_factor_ > 0) {
    const double ref = median(std::vector<double>(history_.begin(), history_.end()));
    if (ref > 0 && loss > spike_factor_ * ref) spike = LossSpike{step, loss, loss / ref};
  }
  remember(loss);  // a spike joins the window too: the median shrugs off one outlier
  return spike;
}

void SpikeDetector::remember(double loss) {
  if (!std::isfinite(loss)) return;
  history_.push_back(loss);
  if (history_.size() > window_) history_.pop_front();
}

}  // namespace trainer::report
