#include "runtime/model/moe_router.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/core/check.h"

namespace trainer::model {

SequenceChunks SequenceChunks::context_parallel(int cp_rank, int cp_size) {
  SequenceChunks c;
  c.chunks = 2 * cp_size;
  c.held = 2;
  c.ranks = cp_size;
  c.rank = cp_rank;
  c.chunk_of.clear();
  for (int q = 0; q < cp_size; ++q)
    for (int half = 0; half < 2; ++half)
      c.chunk_of.push_back(static_cast<int>(context_chunk(q, cp_size, half)));
  return c;
}

MoeRouting route_choices(const float* logits, const GptDims& dims, int sequences, int T,
                         int sequence_T) {
  const int E = dims.num_experts, K = dims.top_k;
  TRAINER_CHECK(E > 0 && K >= 1 && K <= E, "route_tokens: top_k " << K << " of " << E);
  TRAINER_CHECK(T >= 1 && sequence_T % T == 0,
                "route_tokens: " << T << " tokens of a sequence of " << sequence_T);
  MoeRouting r;
  r.sequences = sequences;
  r.T = T;
  r.sequence_T = sequence_T;
  r.experts = E;
  r.top_k = K;
  r.capacity = dims.expert_capacity(sequence_T);
  r.slots_per_sequence = dims.expert_slots(T, sequence_T);
  const int64_t N = r.tokens();
  r.probs.resize(static_cast<size_t>(N * E));
  r.expert.resize(static_cast<size_t>(N * K));
  r.gate.resize(r.expert.size());

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
  return r;
}

namespace {

// choice_stats' floats per sequence and chunk: the counts [K, E], then E doubles
int64_t stats_record_floats(int experts, int top_k) {
  return int64_t{top_k} * experts + 2 * int64_t{experts};
}

}  // namespace

int64_t choice_stats_floats(const GptDims& dims, int sequences, int held_chunks) {
  return int64_t{sequences} * held_chunks * stats_record_floats(dims.num_experts, dims.top_k);
}

std::vector<float> choice_stats(const MoeRouting& r, int held_chunks) {
  const int E = r.experts, K = r.top_k, L = r.T / held_chunks;
  const int64_t record = stats_record_floats(E, K);
  std::vector<float> out(static_cast<size_t>(int64_t{r.sequences} * held_chunks * record), 0.0f);
  std::vector<double> prob_sum(static_cast<size_t>(E));
  for (int s = 0; s < r.sequences; ++s)
    for (int h = 0; h < held_chunks; ++h) {
      float* counts = out.data() + (int64_t{s} * held_chunks + h) * record;
      std::fill(prob_sum.begin(), prob_sum.end(), 0.0);
      for (int t = 0; t < L; ++t) {
        const int64_t n = int64_t{s} * r.T + int64_t{h} * L + t;
        for (int k = 0; k < K; ++k) counts[k * E + r.expert[static_cast<size_t>(n * K + k)]] += 1;
        for (int e = 0; e < E; ++e)
          prob_sum[static_cast<size_t>(e)] += r.probs[static_cast<size_t>(n * E + e)];
      }
      std::memcpy(counts + int64_t{K} * E, prob_sum.data(), prob_sum.size() * sizeof(double));
    }
  return out;
}

void assign_slots(MoeRouting& r, const float* all_stats, const SequenceChunks& ch) {
  const int E = r.experts, K = r.top_k, L = r.T / ch.held;
  TRAINER_CHECK(L * ch.held == r.T && L * ch.chunks == r.sequence_T &&
                    ch.chunk_of.size() == static_cast<size_t>(ch.ranks * ch.held),
                "assign_slots: " << ch.held << " of " << ch.chunks << " chunks per sequence, "
                                 << r.T << " of " << r.sequence_T << " tokens");
  const int64_t record = stats_record_floats(E, K),
                per_rank = int64_t{r.sequences} * ch.held * record;
  r.slot.assign(r.expert.size(), -1);
  r.token_of_slot.assign(static_cast<size_t>(r.slots()), -1);
  r.slot_gate.assign(r.token_of_slot.size(), 0.0f);
  r.chosen_share.assign(static_cast<size_t>(int64_t{r.sequences} * E), 0.0f);
  r.expert_rows.assign(static_cast<size_t>(E), 0);
  r.balance_loss_sum = 0;
  r.dropped = 0;
  // the sequence's tables by chunk: count[c][k][e], and prob_sum[c][e]
  std::vector<double> count(static_cast<size_t>(int64_t{ch.chunks} * K * E)),
      prob_sum(static_cast<size_t>(int64_t{ch.chunks} * E));
  std::vector<int64_t> place(static_cast<size_t>(E));  // a choice's place in the priority order
  for (int s = 0; s < r.sequences; ++s) {
    for (int q = 0; q < ch.ranks; ++q)
      for (int h = 0; h < ch.held; ++h) {
        const int64_t c = ch.chunk_of[static_cast<size_t>(q * ch.held + h)];
        const float* st = all_stats + q * per_rank + (int64_t{s} * ch.held + h) * record;
        for (int64_t i = 0; i < int64_t{K} * E; ++i)
          count[static_cast<size_t>(c * K * E + i)] = st[i];
        std::memcpy(prob_sum.data() + c * E, st + int64_t{K} * E, sizeof(double) * E);
      }
    // f_e over the sequence's sequence_T * K choices, P_e its mean probability (chunk by chunk)
    float* share = r.chosen_share.data() + int64_t{s} * E;
    for (int e = 0; e < E; ++e) {
      double chose = 0, mean_prob = 0;
      for (int64_t c = 0; c < ch.chunks; ++c) {
        for (int k = 0; k < K; ++k) chose += count[static_cast<size_t>((c * K + k) * E + e)];
        mean_prob += prob_sum[static_cast<size_t>(c * E + e)];
      }
      share[e] = static_cast<float>(chose / (static_cast<double>(r.sequence_T) * K));
      r.balance_loss_sum += E * static_cast<double>(share[e]) * mean_prob / r.sequence_T;
    }
    // GShard's priority: every first choice in token order, then every second choice, ...; a
    // choice keeps its expert if fewer than `capacity` choices of it come before
    for (int k = 0; k < K; ++k)
      for (int h = 0; h < ch.held; ++h) {
        const int64_t mine = ch.chunk_of[static_cast<size_t>(ch.rank * ch.held + h)];
        for (int e = 0; e < E; ++e) {
          int64_t before = 0;
          for (int64_t c = 0; c < ch.chunks; ++c)
            for (int j = 0; j < K; ++j)
              if (j < k || (j == k && c < mine))
                before += static_cast<int64_t>(count[static_cast<size_t>((c * K + j) * E + e)]);
          place[static_cast<size_t>(e)] = before;
        }
        for (int t = 0; t < L; ++t) {
          const int64_t n = int64_t{s} * r.T + int64_t{h} * L + t;
          const size_t choice = static_cast<size_t>(n * K + k);
          const int e = r.expert[choice];
          if (place[static_cast<size_t>(e)]++ >= r.capacity) {
            ++r.dropped;
            continue;
          }
          const int64_t slot = e * r.slots_per_expert() + r.expert_rows[static_cast<size_t>(e)]++;
          r.slot[choice] = static_cast<int32_t>(slot);
          r.token_of_slot[static_cast<size_t>(slot)] = static_cast<int32_t>(n);
          r.slot_gate[static_cast<size_t>(slot)] = r.gate[choice];
        }
      }
  }
  r.expert_rows_in = r.expert_rows;
}

MoeRouting route_tokens(const float* logits, const GptDims& dims, int sequences, int T) {
  MoeRouting r = route_choices(logits, dims, sequences, T, T);
  assign_slots(r, choice_stats(r, 1).data(), SequenceChunks{});
  return r;
}

void pack_expert_slots(MoeRouting& r, int ep) {
  const int64_t E = r.experts, local = E / ep, per = r.slots_per_expert();
  TRAINER_CHECK(ep >= 1 && local * ep == E,
                "pack_expert_slots: " << E << " experts over ep " << ep);
  r.block_rows = GptDims::moe_block_rows(local, r.top_k, r.sequences, r.T, r.slots_per_sequence);
  // where each expert's first kept row goes: its block's start, after its block's earlier experts
  std::vector<int64_t> start(static_cast<size_t>(E));
  r.rows_to_rank.assign(static_cast<size_t>(ep), 0);
  for (int64_t e = 0; e < E; ++e) {
    int64_t& sent = r.rows_to_rank[static_cast<size_t>(e / local)];
    start[static_cast<size_t>(e)] = e / local * r.block_rows + sent;
    sent += r.expert_rows[static_cast<size_t>(e)];
  }
  for (const int64_t sent : r.rows_to_rank)  // (a token picks an expert at most once)
    TRAINER_CHECK(sent <= r.block_rows, "pack_expert_slots: " << sent << " rows for one ep rank, "
                                                              << r.block_rows << " in its block");
  std::vector<int32_t> token_of_slot(static_cast<size_t>(ep * r.block_rows), -1);
  std::vector<float> slot_gate(token_of_slot.size(), 0.0f);
  for (int32_t& s : r.slot) {
    if (s < 0) continue;  // dropped
    const int64_t e = s / per, packed = start[static_cast<size_t>(e)] + s % per;
    token_of_slot[static_cast<size_t>(packed)] = r.token_of_slot[static_cast<size_t>(s)];
    slot_gate[static_cast<size_t>(packed)] = r.slot_gate[static_cast<size_t>(s)];
    s = static_cast<int32_t>(packed);
  }
  r.token_of_slot = std::move(token_of_slot);
  r.slot_gate = std::move(slot_gate);
}

void router_backward(const MoeRouting& r, const float* dgate, double balance_scale,
                     float* dlogits) {
  const int E = r.experts, K = r.top_k;
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t n = 0; n < r.tokens(); ++n) {
    const float* p = r.probs.data() + n * E;
    const float* share = r.chosen_share.data() + n / r.T * E;
    for (int e = 0; e < E; ++e)  // P_e is the mean over the whole sequence
      dp[static_cast<size_t>(e)] = balance_scale * E * share[e] / r.sequence_T;
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
