#pragma once
// A seeded random first-order Markov chain over the vocabulary, whose entropy rate is known
// exactly, so a model's loss can be checked against its floor.
//
// Each state i has k distinct random successors with random weights (the sparse matrix Q). The
// chain we sample is P = (1 - eps) Q + eps U, U uniform over the vocabulary: the uniform part makes
// it irreducible and aperiodic whatever Q is, so the stationary distribution pi is unique, and
//   H = -sum_i pi_i sum_j P_ij ln P_ij     (nats/token)
// is exactly the entropy rate of the sampled stream.
#include <cstdint>
#include <vector>

#include "runtime/data/rng.h"

namespace trainer::data {

struct MarkovParams {
  int64_t vocab_size = 256;
  uint64_t seed = 7;
  int successors = 8;     // k: distinct successors per state (capped at vocab_size)
  double epsilon = 0.01;  // weight of the uniform mix-in
};

class MarkovChain {
 public:
  explicit MarkovChain(const MarkovParams& params);

  int64_t vocab_size() const { return vocab_; }
  // Exact P[from -> to].
  double probability(int64_t from, int64_t to) const;
  // Exact entropy rate in nats/token.
  double entropy_rate() const { return entropy_rate_; }
  const std::vector<double>& stationary() const { return pi_; }

  int32_t sample_stationary(Rng& rng) const;
  int32_t sample_next(int32_t from, Rng& rng) const;

 private:
  void build_transitions(uint64_t seed);
  void solve_stationary();
  double compute_entropy_rate() const;
  double row_entropy(int64_t i) const;

  int64_t vocab_;
  int k_;
  double eps_;
  std::vector<int32_t> successor_;  // [vocab * k]
  std::vector<double> q_;           // [vocab * k] Q's row probabilities
  std::vector<double> q_cdf_;       // [vocab * k] running sums of q_, last of each row exactly 1
  std::vector<double> pi_;
  std::vector<double> pi_cdf_;
  double entropy_rate_ = 0;
};

}  // namespace trainer::data
