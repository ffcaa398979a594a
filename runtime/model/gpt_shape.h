#pragma once
// The GPT's global dimensions and which part of it this rank holds (its tensor-parallel shard of
// heads and FFN columns, and its contiguous range of blocks for pipeline stages).
#include <algorithm>
#include <cstdint>

#include "runtime/config/run_config.h"
#include "runtime/core/attention_state.h"

namespace trainer::model {

struct GptDims {
  int vocab = 256;         // V
  int seq_len = 128;       // T (max positions)
  int n_layer = 4;         // L
  int d_model = 128;       // C
  int n_head = 4;          // NH
  int ffn_mult = 4;        // F: hidden = F*C
  int vocab_multiple = 1;  // wte and the logits have padded_vocab() rows / columns
  // Mixture of experts (model.moe): every block's MLP is `num_experts` expert MLPs behind a
  // router (0: dense). Each token goes to its top_k experts; each expert takes at most
  // expert_capacity(T) tokens of each sequence (the rest are dropped: the residual carries them).
  int num_experts = 0;
  int top_k = 2;
  double capacity_factor = 1.25;
  double aux_loss_coef = 0.01;

  int head_dim() const { return d_model / n_head; }
  // V rounded up to vocab_multiple (model.make_vocab_size_divisible_by): the rows past V are
  // padding, zero in wte and excluded from the loss.
  int padded_vocab() const {
    return config::ModelConfig::padded_vocab_size_of(vocab, vocab_multiple);
  }
  int ffn_hidden() const { return ffn_mult * d_model; }
  bool moe() const { return num_experts > 0; }
  // Slots per expert per sequence of T tokens: ceil(capacity_factor * T * top_k / num_experts),
  // at most T (a token picks an expert once); T for an infinite capacity_factor (dropless). Per
  // sequence, so that which tokens an expert drops does not depend on how sequences are split
  // over ranks or micro-batches.
  int expert_capacity(int T) const;
  // The slots per expert per sequence of a rank that holds T of each sequence's sequence_T tokens
  // (context parallelism: T = sequence_T / cp): the whole sequence's capacity, at most T.
  int expert_slots(int T, int sequence_T) const { return std::min(expert_capacity(sequence_T), T); }
  // The rows of one ep rank's block of the slot buffers (Activations' moe_*: ep blocks) for
  // `sequences` sequences of which a rank holds T tokens each: its E / ep experts' slots, but no
  // more than the tokens can fill, as a token picks an expert at most once: sequences * T *
  // min(top_k, E / ep). (The packed rows of a block, pack_expert_slots, fill it from its start;
  // dropless, this bounds the buffers by the top_k choices instead of num_experts times T.)
  int64_t expert_block_rows(int sequences, int T, int sequence_T, int ep) const {
    return moe_block_rows(num_experts / ep, top_k, sequences, T, expert_slots(T, sequence_T));
  }
  static int64_t moe_block_rows(int64_t local_experts, int64_t top_k, int64_t sequences, int64_t T,
                                int64_t slots_per_sequence) {
    return std::min(local_experts * sequences * slots_per_sequence,
                    sequences * T * std::min(top_k, local_experts));
  }
  static GptDims from_config(const config::ModelConfig& m);
};

struct GptShard {
  int tp_rank = 0, tp_size = 1;
  // The blocks this rank holds: num_layers of them, in `chunks` runs of num_layers / chunks
  // consecutive blocks, the first starting at first_layer and each next one chunk_stride blocks
  // further on. One chunk ([first_layer, first_layer + num_layers)) but under the interleaved
  // pipeline schedule, where a stage holds one chunk per virtual stage (Megatron's model chunks).
  int first_layer = 0, num_layers = 0;
  bool has_embedding = true;  // first pipeline stage (its first chunk)
  bool has_head = true;  // last pipeline stage (its last chunk: final norm + tied output layer)
  // Megatron's sequence parallelism (tp > 1): the residual stream and the layernorms run over
  // this rank's 1/tp of a micro-batch's rows; the column-parallel layers' inputs are gathered,
  // the row-parallel layers' partial sums reduce-scattered (instead of all-reduced).
  bool sequence_parallel = false;
  int chunks = 1, chunk_stride = 0;
  // Context parallelism: each sequence is cut into 2 * cp_size chunks, and this rank runs chunks
  // cp_rank and 2 * cp_size - 1 - cp_rank of it (Megatron's load balance). It holds every
  // parameter of its stage and tp slice: the cp ranks are replicas, as the dp ranks are, except
  // for the attention's keys and values, which they gather from each other.
  int cp_rank = 0, cp_size = 1;
  // Expert parallelism (GptDims::num_experts > 0): this rank holds experts [ep_rank * E / ep_size,
  // (ep_rank + 1) * E / ep_size) of every block; tokens reach the others' experts by all-to-all.
  int ep_rank = 0, ep_size = 1;

  int layers_per_chunk() const { return num_layers / chunks; }
  // The global index of local block `local` (0 <= local < num_layers; ascending).
  int global_layer(int local) const {
    const int per = layers_per_chunk();
    if (per == 0) return first_layer + local;  // (no blocks: last_global_layer is first - 1)
    return first_layer + local / per * chunk_stride + local % per;
  }
  int last_global_layer() const { return global_layer(num_layers - 1); }
  // The sequences of a B-sequence micro-batch whose rows this rank's residual stream holds (a
  // mixture of experts routes them): B / tp_size under sequence parallelism, else B.
  int row_sequences(int B) const { return sequence_parallel ? B / tp_size : B; }
  // Context parallelism: which of the sequence's 2 * cp_size chunks is this rank's first (half 0)
  // or second (half 1).
  int context_chunk(int half) const {
    return static_cast<int>(trainer::context_chunk(cp_rank, cp_size, half));
  }

  // Vocabulary parallelism (Megatron's): wte's padded_vocab rows, and so the logits' columns, are
  // cut into tp_size equal runs and this rank holds run tp_rank, [vocab_start, + vocab_rows).
  int64_t vocab_rows(const GptDims& d) const { return d.padded_vocab() / tp_size; }
  int64_t vocab_start(const GptDims& d) const { return vocab_rows(d) * tp_rank; }

  static GptShard whole(const GptDims& d) { return {0, 1, 0, d.n_layer, true, true, false}; }
  // Every layer, tp slice `tp_rank` of `tp_size` (no pipeline stages).
  static GptShard tp_slice(const GptDims& d, int tp_rank, int tp_size,
                           bool sequence_parallel = false) {
    return {tp_rank, tp_size, 0, d.n_layer, true, true, sequence_parallel && tp_size > 1};
  }
  // Pipeline stage `pp_rank` of `pp_size` of tp slice `tp_rank` of `tp_size`. The n_layer blocks
  // are cut into pp_size * virtual_stages runs of consecutive blocks (the virtual stages); stage
  // s holds runs s, s + pp_size, s + 2 pp_size, ... (one, when virtual_stages is 1). The first
  // stage also holds the embeddings, the last the final norm and the head, tied to a copy of wte.
  static GptShard stage(const GptDims& d, int pp_rank, int pp_size, int tp_rank = 0,
                        int tp_size = 1, bool sequence_parallel = false, int virtual_stages = 1) {
    GptShard s = tp_slice(d, tp_rank, tp_size, sequence_parallel);
    const int per_chunk = d.n_layer / (pp_size * virtual_stages);
    s.chunks = virtual_stages;
    s.chunk_stride = pp_size * per_chunk;
    s.num_layers = per_chunk * virtual_stages;
    s.first_layer = pp_rank * per_chunk;
    s.has_embedding = pp_rank == 0;
    s.has_head = pp_rank == pp_size - 1;
    return s;
  }
};

}  // namespace trainer::model
