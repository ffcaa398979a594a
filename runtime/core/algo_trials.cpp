#include "runtime/core/algo_trials.h"

#include <algorithm>

#include "runtime/core/check.h"

namespace trainer {

AlgoTrials::AlgoTrials(int candidates, int samples, double margin)
    : samples_(samples), margin_(margin), ms_(static_cast<size_t>(std::max(candidates, 0))) {
  TRAINER_CHECK(
      candidates >= 0 && samples >= 1 && margin >= 0,
      "AlgoTrials: " << candidates << " candidates, " << samples << " samples, margin " << margin);
  settle_if_done();
}

int AlgoTrials::next() {
  if (settled() || ms_.empty()) return std::max(winner_, 0);
  const int n = candidates();
  // the next candidate in turn that still lacks timings (records may lag behind the calls)
  for (int i = 0; i < n; ++i) {
    const int c = (turn_ + i) % n;
    if (static_cast<int>(ms_[static_cast<size_t>(c)].size()) < samples_) {
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
  auto& taken = ms_[static_cast<size_t>(candidate)];
  if (static_cast<int>(taken.size()) < samples_) taken.push_back(ms);
  settle_if_done();
}

void AlgoTrials::drop(int candidate) {
  TRAINER_CHECK(candidate >= 0 && candidate < candidates(),
                "AlgoTrials: drop(" << candidate << ") of " << candidates());
  ms_.erase(ms_.begin() + candidate);
  if (winner_ == candidate)
    winner_ = -1;
  else if (winner_ > candidate)
    --winner_;
  turn_ = candidates() == 0 ? 0 : turn_ % candidates();
  if (!settled()) settle_if_done();
}

void AlgoTrials::settle_if_done() {
  if (ms_.empty()) return;
  for (const auto& taken : ms_)
    if (static_cast<int>(taken.size()) < samples_) return;
  int fastest = 0;
  for (int c = 1; c < candidates(); ++c)
    if (median_ms(c) < median_ms(fastest)) fastest = c;
  winner_ = median_ms(fastest) < median_ms(0) * (1.0 - margin_) ? fastest : 0;
}

double AlgoTrials::median_ms(int candidate) const {
  std::vector<double> sorted = ms_[static_cast<size_t>(candidate)];
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

double AlgoTrials::winner_ms() const {
  return settled() ? median_ms(winner_) : 0.0;
}
double AlgoTrials::first_ms() const {
  return settled() ? median_ms(0) : 0.0;
}

}  // namespace trainer
