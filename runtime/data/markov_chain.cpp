#include "runtime/data/markov_chain.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/check.h"

namespace trainer::data {
namespace {

constexpr uint64_t kChainTag = 0x636861696e;  // "chain"

// Index of the first cumulative value above u in cdf[0, n) (cdf ends at 1 and u < 1).
int64_t search_cdf(const double* cdf, int64_t n, double u) {
  const double* it = std::upper_bound(cdf, cdf + n, u);
  return std::min<int64_t>(it - cdf, n - 1);
}

}  // namespace

MarkovChain::MarkovChain(const MarkovParams& params)
    : vocab_(params.vocab_size),
      k_(static_cast<int>(std::min<int64_t>(params.successors, params.vocab_size))),
      eps_(params.epsilon) {
  TRAINER_CHECK(vocab_ >= 1 && vocab_ <= (int64_t{1} << 31), "vocab_size " << vocab_);
  TRAINER_CHECK(k_ >= 1, "successors " << params.successors);
  TRAINER_CHECK(eps_ > 0 && eps_ < 1, "epsilon " << eps_);
  build_transitions(derive_seed({params.seed, kChainTag}));
  solve_stationary();
  entropy_rate_ = compute_entropy_rate();
}

void MarkovChain::build_transitions(uint64_t seed) {
  Rng rng(seed);
  const auto n = static_cast<size_t>(vocab_ * k_);
  successor_.resize(n);
  q_.resize(n);
  q_cdf_.resize(n);
  for (int64_t i = 0; i < vocab_; ++i) {
    int32_t* succ = &successor_[static_cast<size_t>(i * k_)];
    double* q = &q_[static_cast<size_t>(i * k_)];
    for (int j = 0; j < k_; ++j) {
      int32_t s;  // distinct successors, by rejection (k is small)
      do s = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab_)));
      while (std::find(succ, succ + j, s) != succ + j);
      succ[j] = s;
      const double w = 1.0 - rng.uniform();  // (0, 1]; cubed so that rows are skewed (learnable)
      q[j] = w * w * w;
    }
    double total = 0;
    for (int j = 0; j < k_; ++j) total += q[j];
    double running = 0;
    for (int j = 0; j < k_; ++j) {
      q[j] /= total;
      running += q[j];
      q_cdf_[static_cast<size_t>(i * k_ + j)] = running;
    }
    q_cdf_[static_cast<size_t>(i * k_ + k_ - 1)] = 1.0;
  }
}

// Power iteration pi <- pi P in double. P's uniform part contracts the error by (1 - eps) per step
// at worst; in practice the random Q mixes in a few dozen steps.
void MarkovChain::solve_stationary() {
  const auto V = static_cast<size_t>(vocab_);
  std::vector<double> pi(V, 1.0 / static_cast<double>(vocab_)), next(V);
  for (int iter = 0; iter < 100000; ++iter) {
    std::fill(next.begin(), next.end(), eps_ / static_cast<double>(vocab_));
    for (size_t i = 0; i < V; ++i) {
      const double mass = (1.0 - eps_) * pi[i];
      for (int j = 0; j < k_; ++j) {
        const size_t e = i * static_cast<size_t>(k_) + static_cast<size_t>(j);
        next[static_cast<size_t>(successor_[e])] += mass * q_[e];
      }
    }
    double total = 0, change = 0;
    for (double p : next) total += p;
    for (size_t i = 0; i < V; ++i) {
      next[i] /= total;
      change += std::abs(next[i] - pi[i]);
    }
    pi.swap(next);
    if (change < 1e-14) break;
  }
  pi_ = pi;
  pi_cdf_.resize(V);
  double running = 0;
  for (size_t i = 0; i < V; ++i) pi_cdf_[i] = (running += pi_[i]);
  pi_cdf_[V - 1] = 1.0;
}

double MarkovChain::probability(int64_t from, int64_t to) const {
  double p = eps_ / static_cast<double>(vocab_);
  for (int j = 0; j < k_; ++j) {
    const size_t e = static_cast<size_t>(from * k_ + j);
    if (successor_[e] == to) p += (1.0 - eps_) * q_[e];
  }
  return p;
}

// -sum_j P_ij ln P_ij: the k successors exactly, the other vocab - k states in closed form.
double MarkovChain::row_entropy(int64_t i) const {
  const double floor_p = eps_ / static_cast<double>(vocab_);
  double h = -static_cast<double>(vocab_ - k_) * floor_p * std::log(floor_p);
  for (int j = 0; j < k_; ++j) {
    const double p = floor_p + (1.0 - eps_) * q_[static_cast<size_t>(i * k_ + j)];
    h -= p * std::log(p);
  }
  return h;
}

double MarkovChain::compute_entropy_rate() const {
  double h = 0;
  for (int64_t i = 0; i < vocab_; ++i) h += pi_[static_cast<size_t>(i)] * row_entropy(i);
  return h;
}

int32_t MarkovChain::sample_stationary(Rng& rng) const {
  return static_cast<int32_t>(search_cdf(pi_cdf_.data(), vocab_, rng.uniform()));
}

int32_t MarkovChain::sample_next(int32_t from, Rng& rng) const {
  if (rng.uniform() < eps_) return static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab_)));
  const size_t row = static_cast<size_t>(from) * static_cast<size_t>(k_);
  return successor_[row + static_cast<size_t>(search_cdf(&q_cdf_[row], k_, rng.uniform()))];
}

}  // namespace trainer::data
