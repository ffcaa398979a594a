#pragma once
// The mixture-of-experts router's token choice, on the host: from the router logits [N, E] of a
// micro-batch (N = sequences * T tokens) to each token's experts, their gates and the dispatch
// slots, and back (the logits' gradient). The arithmetic is O(N * E), small next to the experts'
// GEMMs, and written once for every backend; the backends move the token rows (Backend::moe_*).
//
// Rules (Switch Transformer / GShard / Mixtral):
//  - probs = softmax(logits); each token picks its top_k experts (ties: the lower index).
//  - gate: top_k 1: the probability itself (Switch: the router learns from the loss through it);
//    top_k > 1: the top_k probabilities renormalized to sum to one (Mixtral, Megatron's default).
//  - capacity: expert e takes at most GptDims::expert_capacity(T) tokens of each sequence, in
//    GShard's priority order (every token's first choice, in token order, then every second
//    choice, ...); a choice past capacity is dropped: it adds nothing and gets no gradient, and
//    the residual stream carries the token on.
//  - under context parallelism a rank holds two chunks of each sequence; the capacity and the
//    balance loss are still the whole sequence's: the ranks exchange, per chunk, how many
//    tokens chose each expert as which choice and the sum of their probabilities (choice_stats),
//    from which each places its own choices in the sequence's priority order (assign_slots).
//  - load-balancing loss (Switch), per sequence s: E * sum_e f_e * P_e, where f_e is the share of
//    the sequence's T * top_k choices that picked e (before dropping) and P_e the mean
//    probability of e; the model adds aux_loss_coef times its mean over sequences to the loss.
#include <cstdint>
#include <vector>

#include "runtime/model/gpt_shape.h"

namespace trainer::model {

struct MoeRouting {
  int sequences = 0, experts = 0, top_k = 0;
  int T = 0;           // the tokens of each sequence this rank holds (its rows: sequences * T)
  int sequence_T = 0;  // the whole sequence's (T * cp under context parallelism)
  int capacity = 0;    // the choices an expert keeps per sequence (of sequence_T tokens)
  int slots_per_sequence = 0;          // this rank's slots per expert per sequence
  std::vector<float> probs;            // [N, E]
  std::vector<int32_t> expert;         // [N, K] the chosen experts, best first
  std::vector<float> gate;             // [N, K]
  std::vector<int32_t> slot;           // [N, K] the dispatch slot, or -1: dropped
  std::vector<int32_t> token_of_slot;  // [slots()] the token (row) in each slot, or -1: empty
  std::vector<float> slot_gate;        // [slots()] the gate of the choice in each slot (0: empty)
  std::vector<int32_t> expert_rows;    // [E] slots in use: each expert's first ones
  // Expert parallelism: the slots in use of this rank's experts in every ep rank's run,
  // [ep, E / ep] (Gpt fills it from an all-to-all of expert_rows); expert_rows when ep = 1.
  std::vector<int32_t> expert_rows_in;
  // After pack_expert_slots: the rows this rank sends to each ep rank's experts and receives
  // for its own from each ([ep]; at ep 1 one each, the kept choices), and the rows of each ep
  // rank's block of the packed slots (GptDims::expert_block_rows; ep blocks in all).
  std::vector<int64_t> rows_to_rank, rows_from_rank;
  int64_t block_rows = 0;
  std::vector<float> chosen_share;  // [sequences, E] f_e
  double balance_loss_sum = 0;      // sum over sequences of E * sum_e f_e * P_e
  int64_t dropped = 0;              // choices past capacity

  int64_t tokens() const { return int64_t{sequences} * T; }
  // Before pack_expert_slots (on the host only): expert e's slots are the run
  // [e * slots_per_expert(), (e + 1) * slots_per_expert()), in expert order; the choices it keeps
  // fill its first expert_rows[e] of them, sequence after sequence. (pack_expert_slots moves them
  // into the device's layout, ep blocks of block_rows.)
  int64_t slots_per_expert() const { return int64_t{sequences} * slots_per_sequence; }
  int64_t slots() const { return slots_per_expert() * experts; }
};

// How a rank's rows cut the sequences: each sequence is `chunks` equal chunks of which each of
// `ranks` ranks holds `held`, its rows per sequence being its chunks chunk_of[rank * held + h]
// for h = 0.. held - 1. One rank, one chunk without context parallelism; with it (Megatron's load
// balance, attention_state.h's context_chunk) 2 cp chunks, two held by each cp rank.
struct SequenceChunks {
  int chunks = 1, held = 1, ranks = 1, rank = 0;
  std::vector<int> chunk_of = {0};
  static SequenceChunks context_parallel(int cp_rank, int cp_size);
};

// Step 1: each token's probabilities, top_k experts and gates, for `sequences` sequences of which
// the logits [sequences * T, E] (fp32) hold T tokens each, of sequence_T; no slots yet.
MoeRouting route_choices(const float* logits, const GptDims& dims, int sequences, int T,
                         int sequence_T);
// What the ranks of a sequence exchange: per sequence and held chunk, the count of its tokens
// whose k-th choice is e [K, E], then the sum of its tokens' probabilities [E] as doubles (two
// floats each); choice_stats_floats of them.
int64_t choice_stats_floats(const GptDims& dims, int sequences, int held_chunks);
std::vector<float> choice_stats(const MoeRouting& r, int held_chunks);
// Step 2: from every rank's choice_stats, rank after rank (all_stats), this rank's choices'
// places in each sequence's priority order, so its kept choices and slots, the shares f_e, the
// balance loss (the whole sequence's, the same on every rank of it) and the dropped count (this
// rank's choices).
void assign_slots(MoeRouting& r, const float* all_stats, const SequenceChunks& chunks);

// Routes `sequences` whole sequences of T tokens from their router logits [sequences * T, E].
MoeRouting route_tokens(const float* logits, const GptDims& dims, int sequences, int T);

// Step 3, for the dispatch over `ep` expert-parallel ranks (1: none): ep rank j holds experts
// [j * E / ep, (j + 1) * E / ep). Moves their kept choices to the start of block j of the packed
// slots (ep blocks of block_rows, GptDims::expert_block_rows: no more than the tokens can fill,
// fewer than the E / ep experts' slots when dropless), expert after expert (an expert's in their
// order), so that one transfer of rows_to_rank[j] rows carries exactly what rank j's experts take;
// sets rows_to_rank and block_rows. token_of_slot and slot_gate become the packed slots'. The
// receiving side's block i holds, the same way, its experts' rows from rank i (expert_rows_in[i];
// Gpt sets rows_from_rank).
void pack_expert_slots(MoeRouting& r, int ep);

// dlogits [N, E] (OVERWRITTEN): the gradient through the softmax of the gates' gradient dgate
// [N, K] (the loss's derivative by each choice's gate; dropped choices' are ignored), plus
// balance_scale times the derivative of balance_loss_sum.
void router_backward(const MoeRouting& r, const float* dgate, double balance_scale, float* dlogits);

}  // namespace trainer::model
