// The mixture-of-experts blocks: the router's rules on a hand-made case, and the whole model's
// loss and backward (router, capacity drops, gates, experts, load-balancing loss) against a
// float64 reference written token by token (reference_gpt.h) and its finite differences.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"
#include "runtime/model/moe_router.h"
#include "tests/unit/model/finite_differences.h"
#include "tests/unit/model/reference_gpt.h"

using namespace trainer;

namespace {

model::GptDims moe_dims(int top_k, double capacity_factor) {
  model::GptDims d{11, 5, 2, 8, 2, 4};  // V, T, L, C, NH, F
  d.num_experts = 4;
  d.top_k = top_k;
  d.capacity_factor = capacity_factor;
  d.aux_loss_coef = 0.3;  // large, so that its gradient shows next to the loss's
  return d;
}

using Batch = testing::TokenBatch;
using testing::random_params;

}  // namespace

TEST_CASE("moe_router_takes_first_choices_first_and_drops_past_capacity", "[model][moe]") {
  model::GptDims d = moe_dims(2, 0.5);  // capacity ceil(0.5 * 4 * 2 / 4) = 1 per sequence
  d.num_experts = 4;
  const int T = 4;
  REQUIRE(d.expert_capacity(T) == 1);
  // tokens 0..3 of one sequence; first choices 0, 0, 1, 2; second choices 1, 2, 0, 3
  const std::vector<float> logits = {3,  2,  0, -1,  //
                                     3,  -1, 2, 0,   //
                                     2,  3,  0, -1,  //
                                     -1, 0,  3, 2};
  const model::MoeRouting r = model::route_tokens(logits.data(), d, 1, T);
  CHECK(r.expert == std::vector<int32_t>{0, 1, 0, 2, 1, 0, 2, 3});
  // first choices in token order: token 0 takes expert 0's slot, token 1's first choice (0) is
  // dropped, token 2 takes expert 1, token 3 expert 2; then second choices: token 0's (1) and
  // token 1's (2) and token 2's (0) are full, token 3's (3) is kept
  CHECK(r.slot == std::vector<int32_t>{0, -1, -1, -1, 1, -1, 2, 3});
  CHECK(r.token_of_slot == std::vector<int32_t>{0, 2, 3, 3});
  CHECK(r.dropped == 4);
  CHECK(r.expert_rows == std::vector<int32_t>{1, 1, 1, 1});
  // two such sequences: each expert's kept choices fill its first slots, sequence 0's first
  std::vector<float> twice = logits;
  twice.insert(twice.end(), logits.begin(), logits.end());
  const model::MoeRouting r2 = model::route_tokens(twice.data(), d, 2, T);
  CHECK(r2.expert_rows == std::vector<int32_t>{2, 2, 2, 2});
  CHECK(r2.token_of_slot == std::vector<int32_t>{0, 4, 2, 6, 3, 7, 3, 7});
  CHECK(r2.dropped == 8);
  // gates: the top two probabilities renormalized
  const double p0 = 1 / (1 + std::exp(-1.0));  // token 0: logits 3 and 2
  CHECK(r.gate[0] == Approx(p0));
  CHECK(r.gate[1] == Approx(1 - p0));
  CHECK(r.slot_gate[0] == r.gate[0]);
  // f_e counts every choice: expert 0 three of eight, 1 two, 2 two, 3 one
  CHECK(r.chosen_share == std::vector<float>{3 / 8.0f, 2 / 8.0f, 2 / 8.0f, 1 / 8.0f});
}

// Context parallelism: each cp rank routes its two chunks of every sequence (Megatron's load
// balance) from every rank's choice counts; together they keep and drop exactly the choices the
// whole sequence's routing does, with the same gates, shares and balance loss (on every rank), and
// their logits' gradients are the whole routing's.
TEST_CASE("moe_router_packs_each_ep_ranks_kept_choices_at_its_blocks_start", "[model][moe]") {
  // Over ep ranks, rank j's experts' rows go to block j; packed, the block's kept choices come
  // first (expert after expert), so that one transfer of rows_to_rank[j] rows carries them all.
  // A block holds its experts' slots (capacity 2 of 4 tokens per expert and sequence: 2 * 3 per
  // expert), or dropless (every expert 4 a sequence) no more than the tokens fill: 3 * 4 tokens
  // times min(top_k, its experts) rows, where a token can reach min(top_k 2, its experts).
  for (const double capacity : {1.0, std::numeric_limits<double>::infinity()}) {
    const model::GptDims d = moe_dims(2, capacity);
    const bool dropless = std::isinf(capacity);
    const int T = 4, sequences = 3;
    SplitMix64 rng(5);
    std::vector<float> logits(size_t(sequences * T * d.num_experts));
    for (float& v : logits) v = float(rng.next() % 1000) / 250.0f;
    const model::MoeRouting unpacked = model::route_tokens(logits.data(), d, sequences, T);
    CHECK((unpacked.dropped == 0 || !dropless));
    for (const int ep : {1, 2, 4}) {
      INFO("ep " << ep << (dropless ? ", dropless" : ", capacity factor 1"));
      model::MoeRouting r = unpacked;
      model::pack_expert_slots(r, ep);
      const int64_t local = d.num_experts / ep, block = r.block_rows;
      const int64_t expected_block = dropless ? 12 * std::min<int64_t>(2, local) : local * 6;
      CHECK(block == expected_block);
      CHECK(block == d.expert_block_rows(sequences, T, T, ep));  // what Activations allocates
      CHECK(r.token_of_slot.size() == size_t(ep * block));
      CHECK(r.slot_gate.size() == size_t(ep * block));
      REQUIRE(r.rows_to_rank.size() == size_t(ep));
      for (int j = 0; j < ep; ++j) {
        int64_t kept = 0;
        for (int64_t e = j * local; e < (j + 1) * local; ++e) kept += r.expert_rows[size_t(e)];
        CHECK(r.rows_to_rank[size_t(j)] == kept);
        for (int64_t s = j * block; s < (j + 1) * block; ++s)  // filled first, then empty
          CHECK((r.token_of_slot[size_t(s)] >= 0) == (s - j * block < kept));
      }
      // every choice keeps its token, gate and expert (its block, in expert order), and the
      // dropped stay dropped
      for (size_t c = 0; c < r.slot.size(); ++c) {
        INFO("choice " << c);
        REQUIRE((r.slot[c] >= 0) == (unpacked.slot[c] >= 0));
        if (r.slot[c] < 0) continue;
        const int64_t s = r.slot[c], e = r.expert[c], j = e / local;
        CHECK(r.token_of_slot[size_t(s)] == int32_t(c / size_t(d.top_k)));
        CHECK(r.slot_gate[size_t(s)] == r.gate[c]);
        int64_t first = j * block;  // expert e's run in its block
        for (int64_t f = j * local; f < e; ++f) first += r.expert_rows[size_t(f)];
        CHECK(s >= first);
        CHECK(s < first + r.expert_rows[size_t(e)]);
        // an expert's rows keep their order (the priority order)
        CHECK(s - first == unpacked.slot[c] - e * unpacked.slots_per_expert());
      }
    }
  }
}

TEST_CASE("moe_router_under_context_parallelism_equals_the_whole_sequence", "[model][moe]") {
  for (const int top_k : {1, 2})
    for (const int cp : {2, 4}) {
      INFO("top_k " << top_k << ", cp " << cp);
      const model::GptDims d = moe_dims(top_k, 0.75);
      const int S = 3, T = 16, E = d.num_experts, L = T / (2 * cp);
      std::vector<float> logits(static_cast<size_t>(S * T * E)),
          dgate(static_cast<size_t>(S * T * top_k));
      SplitMix64 rng(11);
      for (float& v : logits) v = static_cast<float>(rng.normal());
      for (float& v : dgate) v = static_cast<float>(rng.normal());
      const model::MoeRouting whole = model::route_tokens(logits.data(), d, S, T);
      REQUIRE(whole.dropped > 0);
      std::vector<float> whole_dlogits(logits.size());
      model::router_backward(whole, dgate.data(), 0.7, whole_dlogits.data());
      // rank q's rows: per sequence its chunks context_chunk(q, cp, 0) and (q, cp, 1)
      const auto global_token = [&](int q, int64_t row) {
        const int64_t s = row / (2 * L), h = row % (2 * L) / L, t = row % L;
        return s * T + context_chunk(q, cp, static_cast<int>(h)) * L + t;
      };
      std::vector<model::MoeRouting> ranks;
      std::vector<float> all_stats;
      for (int q = 0; q < cp; ++q) {
        std::vector<float> mine(static_cast<size_t>(S * 2 * L * E));
        for (int64_t row = 0; row < S * 2 * L; ++row)
          for (int e = 0; e < E; ++e)
            mine[static_cast<size_t>(row * E + e)] =
                logits[static_cast<size_t>(global_token(q, row) * E + e)];
        ranks.push_back(model::route_choices(mine.data(), d, S, 2 * L, T));
        const std::vector<float> st = model::choice_stats(ranks.back(), 2);
        REQUIRE(static_cast<int64_t>(st.size()) == model::choice_stats_floats(d, S, 2));
        all_stats.insert(all_stats.end(), st.begin(), st.end());
      }
      int64_t dropped = 0;
      for (int q = 0; q < cp; ++q) {
        INFO("cp rank " << q);
        model::MoeRouting& r = ranks[static_cast<size_t>(q)];
        model::assign_slots(r, all_stats.data(), model::SequenceChunks::context_parallel(q, cp));
        dropped += r.dropped;
        CHECK(r.balance_loss_sum == Approx(whole.balance_loss_sum).epsilon(1e-12));
        CHECK(r.chosen_share == whole.chosen_share);
        std::vector<float> dg(static_cast<size_t>(S * 2 * L * top_k)),
            dlogits(static_cast<size_t>(S * 2 * L * E));
        for (int64_t row = 0; row < S * 2 * L; ++row)
          for (int k = 0; k < top_k; ++k)
            dg[static_cast<size_t>(row * top_k + k)] =
                dgate[static_cast<size_t>(global_token(q, row) * top_k + k)];
        model::router_backward(r, dg.data(), 0.7, dlogits.data());
        for (int64_t row = 0; row < S * 2 * L; ++row) {
          const int64_t n = global_token(q, row);
          INFO("row " << row << " = token " << n);
          for (int k = 0; k < top_k; ++k) {
            const size_t mine = static_cast<size_t>(row * top_k + k),
                         theirs = static_cast<size_t>(n * top_k + k);
            CHECK(r.expert[mine] == whole.expert[theirs]);
            CHECK(r.gate[mine] == whole.gate[theirs]);
            CHECK((r.slot[mine] >= 0) == (whole.slot[theirs] >= 0));  // kept or dropped alike
          }
          for (int e = 0; e < E; ++e)
            CHECK(dlogits[static_cast<size_t>(row * E + e)] ==
                  Approx(whole_dlogits[static_cast<size_t>(n * E + e)]).margin(1e-7));
        }
        // every kept choice has its slot among this rank's, each slot at most once
        std::vector<int> used(static_cast<size_t>(r.slots()), 0);
        for (int32_t slot : r.slot)
          if (slot >= 0) ++used[static_cast<size_t>(slot)];
        for (int u : used) CHECK(u <= 1);
      }
      CHECK(dropped == whole.dropped);
    }
}

TEST_CASE("moe_router_gradient_matches_finite_differences", "[model][moe]") {
  for (int top_k : {1, 2}) {
    const model::GptDims d = moe_dims(top_k, 0.75);
    const int S = 2, T = 5, E = d.num_experts;
    std::vector<float> logits(static_cast<size_t>(S * T * E)),
        dgate(static_cast<size_t>(S * T * top_k));
    SplitMix64 rng(3);
    for (float& v : logits) v = static_cast<float>(rng.normal());
    for (float& v : dgate) v = static_cast<float>(rng.normal());
    const model::MoeRouting r = model::route_tokens(logits.data(), d, S, T);
    REQUIRE(r.dropped > 0);
    const double balance_scale = 0.7;
    std::vector<float> analytic(logits.size());
    model::router_backward(r, dgate.data(), balance_scale, analytic.data());
    // the objective: sum of dgate * gate over the kept choices, plus balance_scale times the
    // balance loss, with the choices (a discrete function of the logits) held
    auto objective = [&](const std::vector<float>& z) {
      const model::MoeRouting q = model::route_tokens(z.data(), d, S, T);
      REQUIRE(q.slot == r.slot);
      double v = balance_scale * q.balance_loss_sum;
      for (size_t i = 0; i < dgate.size(); ++i)
        if (q.slot[i] >= 0) v += double{dgate[i]} * q.gate[i];
      return v;
    };
    for (size_t i = 0; i < logits.size(); ++i) {
      std::vector<float> up = logits, down = logits;
      const float h = 1e-2f;
      up[i] += h;
      down[i] -= h;
      const double fd = (objective(up) - objective(down)) / (2.0 * h);
      INFO("top_k " << top_k << ", logit " << i);
      CHECK(analytic[i] == Approx(fd).margin(2e-4).epsilon(2e-2));
    }
  }
}

TEST_CASE("moe_gpt_loss_and_backward_match_float64_finite_differences", "[model][moe]") {
  // capacity factor 0.75: some choices are dropped; top_k 1 and 2 take different gate rules
  for (int top_k : {1, 2}) {
    const model::GptDims dims = moe_dims(top_k, 0.75);
    Batch f;
    cpu::CpuBackend be;
    model::Gpt gpt(be, dims, model::GptShard::whole(dims));
    const int64_t n = gpt.layout().total_numel();
    const auto p32 = random_params(n);
    be.from_host(gpt.params(), p32.data());
    gpt.allocate_activations(f.B, f.T);
    be.zero(gpt.grads());
    const double lm = gpt.forward(f.inputs.data(), f.targets.data(), 1.0f / float(f.B * f.T));
    const double aux = gpt.take_moe_balance_loss() / f.B;  // (a sum over the sequences)
    const int64_t dropped = gpt.take_moe_dropped();
    gpt.backward();
    std::vector<float> analytic(static_cast<size_t>(n));
    be.to_host(analytic.data(), gpt.grads());

    std::vector<double> p64(p32.begin(), p32.end());
    auto loss64 = [&] {
      return testing::reference_gpt_loss<double>(gpt.layout(), p64, f.inputs, f.targets, f.B, f.T);
    };
    const double ref = loss64();
    INFO("top_k " << top_k << ": fp32 model " << lm << " + " << aux << " vs float64 " << ref << "; "
                  << dropped << " choices dropped");
    REQUIRE(dropped > 0);
    REQUIRE(aux > 0);
    REQUIRE(std::abs(lm + aux - ref) <= 1e-5 * std::abs(ref));

    testing::check_gradient_against_finite_differences(gpt.layout(), p64, analytic, loss64);
  }
}

// The slot buffers hold no more rows than the top_k choices of the micro-batch's tokens can fill:
// dropless (an expert's capacity a whole sequence) they are B * T * top_k rows, not
// num_experts * B * T; with a capacity factor, the fewer of the experts' slots and that.
TEST_CASE("moe_slot_buffers_hold_at_most_the_tokens_top_k_choices", "[model][moe]") {
  cpu::CpuBackend be;
  const int B = 2, T = 8;  // 16 tokens, top_k 2: 32 choices
  const double dropless = std::numeric_limits<double>::infinity();
  struct Case {
    int experts;
    double capacity_factor;
    int64_t rows;
  };
  // capacity ceil(cf * T * top_k / E) per expert and sequence: E 8, cf 0.5: 1 (16 slots);
  // E 8, cf 1: 2 (32); E 8, cf 1.25: 3 (48 slots, of which 32 can be filled); E 4, cf 1: 4 (32)
  for (const Case c : {Case{8, dropless, 32}, Case{4, dropless, 32}, Case{8, 0.5, 16},
                       Case{8, 1.0, 32}, Case{8, 1.25, 32}, Case{4, 1.0, 32}}) {
    INFO(c.experts << " experts, capacity factor " << c.capacity_factor);
    model::GptDims d = moe_dims(2, c.capacity_factor);
    d.seq_len = T;
    d.num_experts = c.experts;
    const model::ParamLayout layout(d, model::GptShard::whole(d));
    const model::Activations a(be, layout, B, T);
    CHECK(a.blocks.front().moe_in.shape[0] == c.rows);
    CHECK(a.blocks.front().moe_token.numel() == c.rows);
  }
}
