#pragma once
// Fused softmax + cross-entropy of the cpu reference, templated on the scalar type.
#include <cmath>
#include <cstdint>

#include "runtime/cpu/ops_common.h"

namespace trainer::cpu {

// losses[N] = logsumexp(logits[i]) - logits[i, target[i]] (natural log). When dloss_scale != 0,
// logits[N,V] is overwritten in place with (softmax - onehot(target)) * dloss_scale. A target
// < 0 is ignored: loss 0 and, when writing gradients, a zero row. Targets must be < V.
template <class Real>
void softmax_cross_entropy(Real* logits, Real* losses, const int32_t* targets, int64_t N, int64_t V,
                           Real dloss_scale) {
  TRAINER_PARALLEL_FOR_IF(N * V >= kParallelMinWork)
  for (int64_t i = 0; i < N; ++i) {
    Real* z = logits + i * V;
    const int64_t target = targets[i];
    if (target < 0) {
      losses[i] = 0;
      if (dloss_scale != Real(0))
        for (int64_t j = 0; j < V; ++j) z[j] = 0;
      continue;
    }
    Real maxv = z[0];
    for (int64_t j = 1; j < V; ++j) maxv = std::max(maxv, z[j]);
    Real sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(z[j] - maxv);
    const Real log_sum = std::log(sum);
    losses[i] = log_sum + maxv - z[target];
    if (dloss_scale == Real(0)) continue;
    for (int64_t j = 0; j < V; ++j) {
      const Real p = std::exp(z[j] - maxv - log_sum);
      z[j] = (p - (j == target ? Real(1) : Real(0))) * dloss_scale;
    }
  }
}

}  // namespace trainer::cpu
