#pragma once
// Fused softmax + cross-entropy of the cpu reference, templated on the scalar type.
#include <cmath>
#include <cstdint>

#include "runtime/cpu/ops_common.h"

namespace trainer::cpu {

// losses[N] = logsumexp(logits[i, :V]) - logits[i, target[i]] (natural log). When
// dloss_scale != 0, logits is overwritten in place with (softmax - onehot(target)) * dloss_scale.
// Rows are Vp >= V long (Vp = 0: V); columns [V, Vp) are vocabulary padding: outside the softmax,
// and their gradient is 0. A target < 0 is ignored: loss 0 and, when writing gradients, a zero
// row. Targets must be < V.
template <class Real>
void softmax_cross_entropy(Real* logits, Real* losses, const int32_t* targets, int64_t N, int64_t V,
                           Real dloss_scale, int64_t Vp = 0) {
  if (Vp == 0) Vp = V;
  TRAINER_PARALLEL_FOR_IF(N * Vp >= kParallelMinWork)
  for (int64_t i = 0; i < N; ++i) {
    Real* z = logits + i * Vp;
    const int64_t target = targets[i];
    if (dloss_scale != Real(0))
      for (int64_t j = V; j < Vp; ++j) z[j] = 0;
    if (target < 0) {
      losses[i] = 0;
      if (dloss_scale != Real(0))
        for (int64_t j = 0; j < V; ++j) z[j] = 0;
      continue;
    }
    Real maxv = z[0];
    for (int64_t j = 1; j < V; ++j) maxv = std::max(maxv, z[j]);
    const Real z_target = z[target];
    const bool write_grad = dloss_scale != Real(0);
    Real sum = 0;
    for (int64_t j = 0; j < V; ++j) {
      const Real e = std::exp(z[j] - maxv);
      sum += e;
      if (write_grad) z[j] = e;  // reused below: one exp per logit
    }
    losses[i] = std::log(sum) + maxv - z_target;
    if (!write_grad) continue;
    const Real inv_sum = Real(1) / sum;
    for (int64_t j = 0; j < V; ++j)
      z[j] = (z[j] * inv_sum - (j == target ? Real(1) : Real(0))) * dloss_scale;
  }
}

}  // namespace trainer::cpu
