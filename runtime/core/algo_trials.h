#pragma once
// AlgoTrials: picks the fastest of n interchangeable candidates (cuBLASLt's algorithms for one
// GEMM shape) from timings of real calls. Until it settles, each call takes the next candidate
// in turn; the caller times the call and reports it (record), possibly calls later (timings
// arrive when the device gets there). It settles when every candidate has `samples` timings:
// the winner is the one with the lowest median time (a cold first call or one lucky call does not
// decide), unless it beats candidate 0 (the heuristic's first choice) by less than `margin` (a
// fraction), when candidate 0 stays: noise must not move a shape off the heuristic's pick. Pure
// bookkeeping, no device calls: unit-tested on the cpu.
#include <vector>

namespace trainer {

class AlgoTrials {
 public:
  explicit AlgoTrials(int candidates, int samples = 3, double margin = 0.03);

  int candidates() const { return static_cast<int>(ms_.size()); }
  bool settled() const { return winner_ >= 0; }
  // The candidate the next call uses: the winner once settled, else the next in turn.
  int next();
  // A timing of a call that used `candidate` (ignored once settled, or for a dropped one).
  void record(int candidate, double ms);
  // The candidate refused the call: it leaves the race (indices above it shift down by one).
  void drop(int candidate);
  // Once settled: the winner's median time and candidate 0's (what the heuristic would have cost).
  double winner_ms() const;
  double first_ms() const;
  int winner() const { return winner_; }

 private:
  void settle_if_done();

  int samples_;
  double margin_;
  double median_ms(int candidate) const;

  std::vector<std::vector<double>> ms_;  // each candidate's timings (the first `samples`)
  int turn_ = 0;
  int winner_ = -1;
};

}  // namespace trainer
