#pragma once
// Fused softmax + cross-entropy of the cpu reference, templated on the scalar type.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

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

// Vocabulary-parallel cross-entropy (Megatron's): each tensor-parallel rank holds the logits of
// its columns [v0, v0 + Vl) of the padded vocabulary, logits[N, Vl], of which the first `classes`
// are classes (global index < V: op_shapes' CrossEntropyShardDims::V) and the rest padding. Two
// halves around an all-gather of every rank's statistics over the tp group.
inline constexpr int64_t kCrossEntropyStats = 3;  // per row: max, sum of exp(z - max), target logit

// stats[N, 3]: for each row, the max m of this shard's class logits (-inf when it has none), the
// sum of exp(z - m) over them, and the target's logit when this shard holds it (else 0).
// Targets < 0 (ignored rows) read nothing.
template <class Real>
void cross_entropy_shard_stats(Real* stats, const Real* logits, const int32_t* targets, int64_t N,
                               int64_t Vl, int64_t classes, int64_t v0) {
  TRAINER_PARALLEL_FOR_IF(N * Vl >= kParallelMinWork)
  for (int64_t i = 0; i < N; ++i) {
    const Real* z = logits + i * Vl;
    Real* st = stats + i * kCrossEntropyStats;
    Real maxv = -std::numeric_limits<Real>::infinity(), sum = 0;
    for (int64_t j = 0; j < classes; ++j) maxv = std::max(maxv, z[j]);
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(z[j] - maxv);
    const int64_t local_target = int64_t{targets[i]} - v0;
    const bool held = targets[i] >= 0 && local_target >= 0 && local_target < classes;
    st[0] = maxv;
    st[1] = sum;
    st[2] = held ? z[local_target] : Real(0);
  }
}

// all_stats[R, N, 3]: the R shards' stats in rank order (every rank holds the same, so every rank
// computes the same losses). losses[i] = log(S) + M - z_target, M the max of the shards' maxes,
// S = sum over r in order of s_r exp(m_r - M). When dloss_scale != 0, logits is overwritten with
// (softmax - onehot(target)) * dloss_scale on this shard's class columns and 0 on its padding. A
// target < 0 is ignored: loss 0 and a zero gradient row.
template <class Real>
void cross_entropy_shard_finish(Real* logits, Real* losses, const Real* all_stats, int64_t R,
                                const int32_t* targets, int64_t N, int64_t Vl, int64_t classes,
                                int64_t v0, Real dloss_scale) {
  const bool write_grad = dloss_scale != Real(0);
  TRAINER_PARALLEL_FOR_IF(N * Vl >= kParallelMinWork)
  for (int64_t i = 0; i < N; ++i) {
    Real* z = logits + i * Vl;
    if (write_grad)
      for (int64_t j = classes; j < Vl; ++j) z[j] = 0;
    const int64_t target = targets[i];
    if (target < 0) {
      losses[i] = 0;
      if (write_grad)
        for (int64_t j = 0; j < classes; ++j) z[j] = 0;
      continue;
    }
    Real maxv = -std::numeric_limits<Real>::infinity(), sum = 0, z_target = 0;
    for (int64_t r = 0; r < R; ++r)
      maxv = std::max(maxv, all_stats[(r * N + i) * kCrossEntropyStats]);
    for (int64_t r = 0; r < R; ++r) {
      const Real* st = all_stats + (r * N + i) * kCrossEntropyStats;
      if (st[0] != -std::numeric_limits<Real>::infinity()) sum += st[1] * std::exp(st[0] - maxv);
      z_target += st[2];
    }
    losses[i] = std::log(sum) + maxv - z_target;
    if (!write_grad) continue;
    const Real inv_sum = Real(1) / sum;
    const int64_t local_target = target - v0;
    for (int64_t j = 0; j < classes; ++j)
      z[j] =
          (std::exp(z[j] - maxv) * inv_sum - (j == local_target ? Real(1) : Real(0))) * dloss_scale;
  }
}

}  // namespace trainer::cpu
