#include "runtime/core/algo_trials.h"

#include <algorithm>
#include <limits>

#include "runtime/core/check.h"

namespace trainer {

AlgoTrials::AlgoTrials(int candidates, int samples, double margin)
    : samples_(samples),
      margin_(margin),
      best_ms_(static_cast<size_t>(candidates), std::numeric_limits<double>::infinity()),
      count_(static_cast<size_t>(candidates), 0) {
  TRAINER_CHECK(
      candidates >= 0 && samples >= 1 && margin >= 0,
      "AlgoTrials: " << candidates << " candidates, " << samples << " samples, margin " << margin);
  settle_if_done();
}

int AlgoTrials::next() {
  if (settled() || best_ms_.empty()) return std::max(winner_, 0);
  const int n = candidates();
  // the next candidate in turn that still lacks timings (records may lag behind the calls)
  for (int i = 0; i < n; ++i) {
    const int c = (turn_ + i) % n;
    if (count_[static_cast<size_t>(c)] < samples_) {
      turn_ = (c + 1) % n;
      return c;
    }
  }
  const int c = turn_;
  turn_ = (turn_ + 1) % n;
  return c;
}

void AlgoTrials::record(int candidate, double ms) {
  if (settled() || candidate < 0 || candidate >= candidates()) return;
  const auto c = static_cast<size_t>(candidate);
  best_ms_[c] = std::min(best_ms_[c], ms);
  ++count_[c];
  settle_if_done();
}

void AlgoTrials::drop(int candidate) {
  TRAINER_CHECK(candidate >= 0 && candidate < candidates(),
                "AlgoTrials: drop(" << candidate << ") of " << candidates());
  best_ms_.erase(best_ms_.begin() + candidate);
  count_.erase(count_.begin() + candidate);
  if (winner_ == candidate)
    winner_ = -1;
  else if (winner_ > candidate)
    --winner_;
  turn_ = candidates() == 0 ? 0 : turn_ % candidates();
  if (!settled()) settle_if_done();
}

void AlgoTrials::settle_if_done() {
  if (best_ms_.empty()) return;
  if (std::any_of(count_.begin(), count_.end(), [&](int k) { return k < samples_; })) return;
  const auto fastest = std::min_element(best_ms_.begin(), best_ms_.end()) - best_ms_.begin();
  winner_ = best_ms_[static_cast<size_t>(fastest)] < best_ms_[0] * (1.0 - margin_)
                ? static_cast<int>(fastest)
                : 0;
}

double AlgoTrials::winner_ms() const {
  return settled() ? best_ms_[static_cast<size_t>(winner_)] : 0.0;
}
double AlgoTrials::first_ms() const {
  return settled() ? best_ms_[0] : 0.0;
}

}  // namespace trainer
