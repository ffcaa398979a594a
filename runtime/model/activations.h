#pragma once
// Activations: every tensor the forward pass saves for backward, for one micro-batch of B
// sequences of T tokens, in one allocation. Sizes follow llm.c's ActivationTensors.
//
// Activation checkpointing (Recompute) trades memory for a second forward of what was dropped:
//   none:      every block keeps all of its tensors.
//   selective: the attention probabilities att [B,NH,T,T] (the largest tensor, and cheap to
//              recompute from qkv) and the attention output atty are one pair of buffers shared
//              by all blocks; backward recomputes a block's attention from its kept qkv before
//              its backward (Megatron's "selective" recompute).
//   full:      a block keeps only its output (the next block's input); everything inside a
//              block lives in one set of buffers shared by all blocks, and backward reruns the
//              block's forward before its backward.
// Recomputation repeats the same ops on the same inputs, so gradients are bit-identical.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/model/moe_router.h"
#include "runtime/model/param_layout.h"

namespace trainer::model {

enum class Recompute { none, selective, full };

// Each activation tensor starts at a multiple of this many bytes from the allocation (which the
// cuda arena aligns to 256 too): cuBLASLt's GEMM kernels and their plans are chosen for the
// operands' alignment, and 256 bytes is what they are tuned for.
inline constexpr size_t kActivationAlignment = 256;
// What a tensor of `bytes` takes in the activations' allocation.
constexpr size_t activation_footprint(size_t bytes) {
  return (bytes + kActivationAlignment - 1) / kActivationAlignment * kActivationAlignment;
}
// "none" | "selective" | "full" (the config's activation_checkpointing); throws on anything else.
Recompute parse_recompute(const std::string& name);

struct BlockActivations {
  // (sequence parallelism: [RL,C] this rank's rows, RL = B*T/tp, for the residual stream, ln1
  // and ln2, and [RL] for the layernorms' statistics)
  Tensor residual_in;  // [B,T,C] block input (points into the previous block's output)
  // ln1, atty, ln2, fch_gelu (and lnf) feed only matmuls, and fch only the fused GELU ops:
  // stored in Activations::matmul_input.
  Tensor ln1, ln1_mean, ln1_rstd;  // [B,T,C], [B,T], [B,T] (sequence parallel: [RL,C], [RL])
  Tensor qkv;                      // [B,T,3C/tp], in matmul_input (attention reads it)
  Tensor atty;                     // [B,T,C/tp] attention output before projection
  // Backend::attention_state_shape: [B,NH/tp,T,T] probabilities or [B,NH/tp,T] lse (context
  // parallelism: attention_cp_state_shape)
  Tensor att;
  Tensor residual_mid;  // [B,T,C] x + attn(x)
  Tensor ln2, ln2_mean, ln2_rstd;
  Tensor fch, fch_gelu;  // [B,T,4C/tp] (empty in a mixture-of-experts block)
  Tensor residual_out;   // [B,T,C]
  // Mixture of experts (GptDims::moe(); empty otherwise). N = B*T tokens, K = top_k, S = ep *
  // GptDims::expert_block_rows slots (MoeRouting's packed layout: a block per ep rank of its E/ep
  // experts' kept rows, from its start, pack_expert_slots; a block holds the fewer of those
  // experts' B * capacity slots and B*T * min(K, E/ep) rows). Under expert parallelism the
  // experts' side holds, block i, what ep rank i sent this rank's experts (its first rows
  // filled): S rows too.
  Tensor router_logits;  // [N, E] fp32
  // The routing's tables, views of one buffer (moe_tables, 32-bit words) that one upload fills:
  Tensor moe_tables;
  Tensor moe_slot;       // [N, K] int32: each choice's slot, -1 dropped
  Tensor moe_gate;       // [N, K] fp32
  Tensor moe_token;      // [S] int32: each slot's token, -1 empty
  Tensor moe_slot_gate;  // [S] fp32: each slot's gate
  Tensor moe_in;         // [S, C] matmul_input: the experts' input rows
  Tensor moe_pre,
      moe_act;      // [S, 4C] matmul_input: the experts' hidden layer, before and after GELU
  Tensor moe_out;   // [S, C] fp32: the experts' outputs
  Tensor moe_back;  // [S, C] fp32: the same, back on the tokens' side (moe_out when ep = 1)
  // ep > 1: the slots in use of each expert ([E] int32, MoeRouting::expert_rows), and of this
  // rank's experts in every ep rank's run ([ep, E / ep]) after their all-to-all
  Tensor moe_rows, moe_rows_in;
  std::shared_ptr<MoeRouting> routing;  // the host's record of the routing, for backward
};

// The mixture of experts' buffers that live within one forward or backward (empty without it),
// [S, ...] as in BlockActivations. "Token side": in MoeRouting's slot order, on the rank that
// holds the tokens; "expert side": after the all-to-all, on the rank that holds the experts
// (one buffer serves both when ep = 1).
struct MoeScratch {
  Tensor dispatch;    // [S, C] matmul_input: the token side's rows before the all-to-all (ep > 1)
  Tensor dy;          // [S, C] matmul_input: the experts' output gradient, token side
  Tensor dy_experts;  // [S, C] matmul_input: the same, expert side (dy when ep = 1)
  Tensor dpre;        // [S, 4C] matmul_input
  Tensor dx;          // [S, C] fp32: the experts' input gradient, expert side
  Tensor dx_tokens;   // [S, C] fp32: the same, token side (dx when ep = 1)
  Tensor dgate;       // [N, K] fp32
  Tensor dlogits;     // [N, E] fp32
  // context parallelism: this rank's choice_stats (moe_router.h) and every cp rank's, [cp, ...],
  // fp32 words (empty at cp 1)
  Tensor route_stats, route_stats_all;
};

struct GradScratch {
  Tensor dresidual;  // [B,T,C] running gradient of the residual stream ([RL,C] under sp)
  // [B,T,C] bf16 under bf16 compute (empty in fp32): dresidual rounded, as the projections'
  // backward GEMMs read it; each layernorm backward whose result a projection reads next writes
  // it with dresidual (no cast pass): every one but the first block's ln1, so it is stale after
  // backward.
  Tensor dresidual_mm;
  Tensor dln, datty;  // per-block temporaries, reused by every block
  Tensor dqkv, dfch;  // the same, in matmul_input (Backend::attention_backward and
                      // matmul_gelu_backward write them so)
};

// Sequence parallelism's buffers (empty without it): this rank's rows are RL = B * T / tp.
struct SequenceParallelScratch {
  Tensor ln_rows;       // [RL, C] matmul_input: the final layernorm's output rows
  Tensor ln_whole;      // [B, T, C] matmul_input: a block's ln1 or ln2 rows gathered
  Tensor partial;       // [B, T, C] a row-parallel layer's partial sums before the reduce-scatter
  Tensor dresidual;     // [B, T, C] the running gradient gathered (fp32: the GEMMs' input in fp32
                        // compute, and the embedding's backward); both in grad.dln's memory
  Tensor dresidual_mm;  // [B, T, C] bf16: its rounding gathered, as the GEMMs read it
  Tensor dln_rows;      // [RL, C] this rank's rows of a layernorm's input gradient
};

// Context parallelism's buffers (empty without it; cp = GptShard::cp_size): every cp rank's qkv
// rows gathered, and attention's gradient of them before its reduce-scatter.
struct ContextParallelScratch {
  Tensor qkv_all;    // [cp, B, T, 3C/tp] in matmul_input (T: this rank's tokens)
  Tensor dqkv_all;   // [cp, B, T, 3C/tp] fp32 (Backend::attention_backward_cp)
  Tensor dqkv_rows;  // [B, T, 3C/tp] fp32 under bf16 compute: the reduce-scatter's sum, which
                     // grad.dqkv receives rounded (empty in fp32, where grad.dqkv receives it)
};

class Activations {
 public:
  // matmul_input: the dtype of the tensors only matmuls read (ln1, atty, ln2, fch, fch_gelu,
  // lnf, dqkv and dfch), of qkv and of the logits: bf16 under bf16 compute, which also halves their
  // memory. fp8_sums: fp8 compute's scratch is wanted (see below). scratch_of: another set whose
  // scratch (grad, sp and fp8_sums: what lives only within one forward or backward) this one
  // uses instead of its own; a pipeline stage's slots run one pass at a time. with_head: the
  // head's tensors (lnf, logits, losses) too, where the layout has the head (false: a slot of
  // the stage's other chunks; GptShard::chunks).
  Activations(Backend& be, const ParamLayout& layout, int B, int T,
              Recompute recompute = Recompute::none, DType matmul_input = DType::f32,
              bool fp8_sums = false, const Activations* scratch_of = nullptr,
              bool with_head = true);
  ~Activations();
  Activations(const Activations&) = delete;
  Activations& operator=(const Activations&) = delete;

  int B, T;
  Recompute recompute;
  DType matmul_input;
  bool with_head = true;
  int chunk = 0;           // the model chunk using the set now (Gpt::use_activation_slot)
  Tensor inputs, targets;  // [B,T] int32
  // [B,T,C] embedding output (under sequence parallelism this rank's rows, [B*T/tp, C])
  Tensor encoded;
  std::vector<BlockActivations> blocks;  // the chunk's, in order
  Tensor lnf, lnf_mean, lnf_rstd;
  // [B,T,V/tp] this tp rank's vocabulary columns (GptShard::vocab_start), in matmul_input
  // (dlogits after a training forward)
  Tensor logits;
  Tensor losses;  // [B,T]
  // tp > 1: the vocabulary-parallel cross-entropy's statistics, this rank's [B*T, 3] and every
  // tp rank's [tp, B*T, 3] (Backend::cross_entropy_shard_stats); empty at tp 1
  Tensor ce_stats, ce_all_stats;
  GradScratch grad;
  SequenceParallelScratch sp;
  ContextParallelScratch cp;
  MoeScratch moe;
  // fp8 compute: the fc layer's fp8 GEMM's fp32 sums before they pass through the GELU,
  // [B,T,4C/tp]; empty otherwise. (The other fp8 GEMMs write their outputs themselves.)
  Tensor fp8_sums;
  size_t bytes() const { return bytes_; }

  // What attention keeps per layer for B sequences of this rank's T tokens.
  static Shape attention_state(const Backend& be, const ParamLayout& layout, int B, int T);
  // The bytes the constructor allocates for these arguments when attention keeps
  // `attention_state` per layer (Backend::attention_state_shape), without allocating: the
  // estimate of `trainer plan`.
  // own_scratch false: a set that shares another's scratch (the constructor's scratch_of).
  static size_t bytes_needed(const ParamLayout& layout, int B, int T, Recompute recompute,
                             DType matmul_input, const Shape& attention_state,
                             bool fp8_sums = false, bool own_scratch = true, bool with_head = true);

 private:
  Activations(int B, int T, Recompute recompute, DType matmul_input,
              bool with_head);  // views only, no memory
  Backend* be_ = nullptr;
  void* memory_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace trainer::model
