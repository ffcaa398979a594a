#include "runtime/model/moe_router.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/check.h"

namespace trainer::model {

MoeRouting route_tokens(const float* logits, const GptDims& dims, int sequences, int T) {
  const int E = dims.num_experts, K = dims.top_k;
  TRAINER_CHECK(E > 0 && K >= 1 && K <= E, "route_tokens: top_k " << K << " of " << E);
  MoeRouting r;
  r.sequences = sequences;
  r.T = T;
  r.experts = E;
  r.top_k = K;
  r.capacity = dims.expert_capacity(T);
  const int64_t N = r.tokens();
  r.probs.resize(static_cast<size_t>(N * E));
  r.expert.resize(static_cast<size_t>(N * K));
  r.gate.resize(r.expert.size());
  r.slot.assign(r.expert.size(), -1);
  r.token_of_slot.assign(static_cast<size_t>(r.slots()), -1);
  r.slot_gate.assign(r.token_of_slot.size(), 0.0f);
  r.chosen_share.assign(static_cast<size_t>(int64_t{sequences} * E), 0.0f);

  std::vector<int> order(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    const float* z = logits + n * E;
    float* p = r.probs.data() + n * E;
    const float top = *std::max_element(z, z + E);
    double total = 0;
    for (int e = 0; e < E; ++e) total += std::exp(static_cast<double>(z[e]) - top);
    for (int e = 0; e < E; ++e)
      p[e] = static_cast<float>(std::exp(static_cast<double>(z[e]) - top) / total);
    for (int e = 0; e < E; ++e) order[static_cast<size_t>(e)] = e;
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double chosen = 0;
    for (int k = 0; k < K; ++k) chosen += p[order[static_cast<size_t>(k)]];
    for (int k = 0; k < K; ++k) {
      const int e = order[static_cast<size_t>(k)];
      r.expert[static_cast<size_t>(n * K + k)] = e;
      r.gate[static_cast<size_t>(n * K + k)] = K == 1 ? p[e] : static_cast<float>(p[e] / chosen);
    }
  }

  r.expert_rows.assign(static_cast<size_t>(E), 0);
  std::vector<int> used(static_cast<size_t>(E));  // of the sequence
  for (int s = 0; s < sequences; ++s) {
    std::fill(used.begin(), used.end(), 0);
    float* share = r.chosen_share.data() + int64_t{s} * E;
    for (int k = 0; k < K; ++k) {
      for (int t = 0; t < T; ++t) {
        const int64_t n = int64_t{s} * T + t;
        const size_t choice = static_cast<size_t>(n * K + k);
        const int e = r.expert[choice];
        share[e] += 1.0f / static_cast<float>(T * K);
        int& count = used[static_cast<size_t>(e)];
        if (count == r.capacity) {
          ++r.dropped;
          continue;
        }
        ++count;
        const int64_t slot = e * r.slots_per_expert() + r.expert_rows[static_cast<size_t>(e)]++;
        r.slot[choice] = static_cast<int32_t>(slot);
        r.token_of_slot[static_cast<size_t>(slot)] = static_cast<int32_t>(n);
        r.slot_gate[static_cast<size_t>(slot)] = r.gate[choice];
      }
    }
    for (int e = 0; e < E; ++e) {
      double mean_prob = 0;
      for (int t = 0; t < T; ++t)
        mean_prob += r.probs[static_cast<size_t>((int64_t{s} * T + t) * E + e)];
      r.balance_loss_sum += E * static_cast<double>(share[e]) * mean_prob / T;
    }
  }
  r.expert_rows_in = r.expert_rows;
  return r;
}

void router_backward(const MoeRouting& r, const float* dgate, double balance_scale,
                     float* dlogits) {
  const int E = r.experts, K = r.top_k;
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t n = 0; n < r.tokens(); ++n) {
    const float* p = r.probs.data() + n * E;
    const float* share = r.chosen_share.data() + n / r.T * E;
    for (int e = 0; e < E; ++e) dp[static_cast<size_t>(e)] = balance_scale * E * share[e] / r.T;
    const size_t first = static_cast<size_t>(n * K);
    // the gates' part: a dropped choice's gate reaches nothing (its dgate is not read)
    auto dg = [&](int k) {
      return r.slot[first + static_cast<size_t>(k)] < 0 ? 0.0
                                                        : static_cast<double>(dgate[first + k]);
    };
    if (K == 1) {
      dp[static_cast<size_t>(r.expert[first])] += dg(0);
    } else {  // gate_j = p_j / Z over the chosen: dp_i = (dgate_i - sum_j dgate_j gate_j) / Z
      double chosen = 0, weighted = 0;
      for (int k = 0; k < K; ++k) {
        chosen += p[r.expert[first + static_cast<size_t>(k)]];
        weighted += dg(k) * r.gate[first + static_cast<size_t>(k)];
      }
      for (int k = 0; k < K; ++k)
        dp[static_cast<size_t>(r.expert[first + static_cast<size_t>(k)])] +=
            (dg(k) - weighted) / chosen;
    }
    double dot = 0;
    for (int e = 0; e < E; ++e) dot += p[e] * dp[static_cast<size_t>(e)];
    for (int e = 0; e < E; ++e)
      dlogits[n * E + e] = static_cast<float>(p[e] * (dp[static_cast<size_t>(e)] - dot));
  }
}

}  // namespace trainer::model
