#pragma once
// Gpt: a GPT-2 decoder with explicit forward and backward (no autograd graph), llm.c style.
// It holds this rank's shard (ParamLayout): its blocks, its tensor-parallel part of each layer,
// its context-parallel share of each sequence. It knows where its shard's math needs the rest of
// the model (a row-parallel sum, the sequence-parallel rows, the cp keys); the collectives
// themselves come in through Hooks, set by the parallel layer, as do the gradient buckets and
// ZeRO's parameter gathering. gpt.cpp: init, forward and backward; gpt_parallel_comms.cpp: the
// calls into the hooks; gpt_activation_slots.cpp: the activations; gpt_fp8.cpp: fp8 compute;
// gpt_moe.cpp: mixture of experts.
#include <functional>
#include <memory>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/core/backend_buffer.h"
#include "runtime/core/phase_profiler.h"
#include "runtime/model/activations.h"
#include "runtime/model/param_layout.h"
#include "runtime/model/state_memory.h"

namespace trainer::model {

struct Hooks {
  // Sums a partial activation (or input gradient) over the tensor-parallel group. Null: tp = 1.
  std::function<void(Tensor)> tp_all_reduce;
  // Every tp rank's rows (`rows`, any dtype) into `whole`, in rank order (sequence parallelism's
  // gathers; at any tp > 1 the cross-entropy's statistics); and sequence parallelism's sum over
  // the tp group of `whole` (fp32), of which this rank keeps its rows.
  std::function<void(const Tensor& rows, Tensor whole)> tp_all_gather;
  std::function<void(const Tensor& whole, Tensor rows)> tp_reduce_scatter;
  // Context parallelism (GptShard::cp_size > 1): every cp rank's `rows` (any dtype) into `whole`
  // ([cp, ...], rank order); and the sum over the cp group of `whole` (fp32), of which this rank
  // keeps its block in `rows`.
  std::function<void(const Tensor& rows, Tensor whole)> cp_all_gather;
  std::function<void(const Tensor& whole, Tensor rows)> cp_reduce_scatter;
  // Expert parallelism (GptShard::ep_size > 1): `send` (any dtype, [ep, ...]) cut into ep equal
  // blocks, block j to ep rank j; `recv` receives block i from ep rank i. Null: ep = 1.
  std::function<void(const Tensor& send, Tensor recv)> ep_all_to_all;
  // The same over row blocks of variable fill: send and recv [ep * block, ...]; the first
  // send_rows[j] rows of send's block j go to ep rank j, and recv's block i receives
  // recv_rows[i] rows from ep rank i at its start (the rest of each block is left as it is).
  std::function<void(const Tensor& send, Tensor recv, const std::vector<int64_t>& send_rows,
                     const std::vector<int64_t>& recv_rows)>
      ep_all_to_all_rows;
  // Called when every gradient of `unit` (see ParamLayout) is final for this micro-batch.
  std::function<void(int unit)> unit_grads_ready;
  // Called before a unit's parameters are read (forward or backward): ZeRO-3 gathers them here.
  std::function<void(int unit, bool backward)> before_unit;
  // fp8 compute: takes the max of a training micro-batch's amaxes (fp32, backend memory; at the
  // end of backward) over the amax group, the ranks that hold the same layers, so that their
  // scaling states stay equal. Null: dp = tp = 1. The experts' amaxes go to
  // fp8_expert_amax_all_reduce where it is set (expert parallelism: the ranks that hold the same
  // experts are not the dense layers' group), with the rest otherwise.
  std::function<void(Tensor amaxes)> fp8_amax_all_reduce;
  std::function<void(Tensor amaxes)> fp8_expert_amax_all_reduce;
};

class Gpt {
 public:
  Gpt(Backend& be, const GptDims& dims, const GptShard& shard,
      StateMemory memory = StateMemory::whole);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  // GPT-2 init from `seed`: N(0, 0.02), residual projections scaled by 1/sqrt(2L), biases zero,
  // norms one. Each global tensor is drawn from its own stream and this rank keeps its slice, so
  // the weights do not depend on the parallel layout.
  void init_weights(uint64_t seed);
  // The same weights, drawn and written only within `ranges` of params() (the flat elements
  // [begin, end) of each; a tensor that meets none is not drawn at all): ZeRO 3's owned shards.
  // The bf16 copy is left alone (ZeRO 3 rounds a unit's at its gather).
  struct ElementRange {
    int64_t begin = 0, end = 0;
  };
  void init_weights_within(uint64_t seed, const std::vector<ElementRange>& ranges);

  // Sets the micro-batch size the activations are allocated for, and what backward recomputes
  // instead of keeping (activation checkpointing; see activations.h). `slots` sets of them: a
  // pipeline stage keeps the micro-batches in flight (use_activation_slot picks the one that
  // forward and backward use); they share one scratch (the running gradient, stage_output_grad()
  // included: it is received just before its slot's backward, and sent right after it).
  void allocate_activations(int B, int T, Recompute recompute = Recompute::none, int slots = 1);
  // A model of several chunks (GptShard::chunks; the interleaved pipeline schedule): a slot
  // holds one chunk's blocks, for any chunk; `slots` of them without the head's tensors, then
  // `head_slots` with them (for the last chunk of a stage with the head).
  void allocate_activations(int B, int T, Recompute recompute, int slots, int head_slots);
  // The slot forward() and backward() use, for model chunk `chunk` (0 unless GptShard::chunks).
  void use_activation_slot(int slot, int chunk = 0);
  int activation_slots() const { return static_cast<int>(act_slots_.size()); }

  // Forward over inputs/targets [B*T] (host ints). Returns the mean loss over the B*T tokens.
  // When dloss_scale != 0 (training) the loss gradient (softmax - onehot) * dloss_scale is
  // prepared for backward(). A pipeline stage without the embedding reads stage_input() instead
  // of the inputs, and one without the head stops at stage_output() and returns 0 (it has no
  // loss). Context parallelism: T is this rank's tokens of each sequence, its two chunks
  // (GptShard::context_chunk) one after the other.
  double forward(const int32_t* inputs, const int32_t* targets, float dloss_scale);
  // Accumulates parameter gradients of the last forward into grads() (in fp8 compute between
  // begin_fp8_amaxes() and end_fp8_amaxes()). A stage without the head starts from
  // stage_output_grad(); one without the embedding ends with stage_input_grad(). grads_final:
  // whether this backward makes the gradients of its units final, when Hooks::unit_grads_ready
  // hears of them (false for a pipeline chunk's pieces before its last).
  void backward(bool grads_final = true);
  // fp8 compute: the forwards (and full recompute's reruns) after begin_fp8_amaxes() quantize
  // with the scales the states give and raise one set of amaxes; end_fp8_amaxes() reduces those
  // over the amax group (Hooks::fp8_amax_all_reduce) and moves the states on. TrainStep brackets
  // each training micro-batch; PipelineRunner a whole schedule, so that its pieces quantize as
  // the micro-batch's one forward would (the same scales, and the max over the pieces is the
  // micro-batch's amax), whatever the order of their forwards and backwards. An evaluation
  // forward outside a bracket leaves the states. No-ops in other precisions.
  void begin_fp8_amaxes();
  void end_fp8_amaxes();
  // Pipeline stages' boundary tensors in the current activation slot, fp32, [B,T,C] (sequence
  // parallelism: this rank's rows, [RL,C]): the first block's input (what the previous stage
  // sends), the last block's output (what goes to the next stage), and the gradients of both
  // (the running gradient: the output's before backward, the input's after it).
  Tensor stage_input() const;
  Tensor stage_output() const;
  Tensor stage_output_grad() const;
  Tensor stage_input_grad() const { return stage_output_grad(); }

  const ParamLayout& layout() const { return layout_; }
  Tensor params() const { return params_; }  // fp32 master weights
  Tensor grads() const { return grads_; }    // fp32 gradients, same layout
  Tensor param(const ParamSpec& p) const;    // view of one tensor in params()
  Tensor grad(const ParamSpec& p) const;
  // bf16 compute: the matmuls read a bf16 copy of the weights (refreshed from the fp32 master
  // weights) and bf16 activations (ln1, atty, ln2, fch_gelu, lnf are stored in bf16, and so are
  // the MLP's pre-activation fch and its gradient, which only the fused GELU ops touch, qkv, and
  // the logits and their gradient, as Megatron's); every other op, every parameter gradient, the
  // loss (from the logits' values, in fp32) and the optimizer stay fp32. Reallocates the
  // activations.
  void set_compute_bf16(bool on);
  // fp8 compute: bf16 compute, and the blocks' linear layers (the four of a dense block; the
  // attention's two and each expert's two of a mixture-of-experts block, Transformer Engine's
  // GroupedLinear) run their forward GEMM in fp8 e4m3 with per-tensor delayed scaling
  // (Backend::matmul_forward_fp8; one state per layer, new here; runtime/core/fp8_recipe.h).
  // Their backward stays bf16. (Runs offer it only where Backend::supports_fp8(); the cpu
  // backend's emulation serves the tests.)
  void set_compute_fp8(bool on);
  bool compute_fp8() const { return fp8_; }
  // The fp8 delayed-scaling states for checkpoints (host copy; the same on every rank of the
  // amax group), for the whole model: [n_layer, 4 linears, kFp8StateFloats] in global layer
  // order, then under a mixture of experts [n_layer, num_experts, 2 (fc, proj), kFp8StateFloats]
  // in global expert order; this rank's layers and experts filled and every other float 0 (a
  // pipeline stage's, an ep rank's; the states are never negative, so a max over the ranks
  // assembles the model's). set_... takes such a vector back (a resume, at any pp and ep) and
  // reads this rank's parts from it; one of another size leaves the states new and returns false.
  std::vector<float> fp8_scaling_state() const;
  bool set_fp8_scaling_state(const std::vector<float>& model_states);
  // True while the fp8 states are new: no training step moved them and no checkpoint set them.
  bool fp8_states_new() const { return fp8_ && fp8_new_; }
  // Gives new fp8 states the whole weights' scales before the first step. A new weight part
  // would scale its first call by the amax of the weight it is given, which under tensor
  // parallelism is this rank's slice only; the max over the amax group of `weight_amaxes` (per
  // local linear, fp8_linears() of them in fp8_linear_index order: the amax of the master
  // weights this rank holds valid, 0 for none or for a MoE block's unused MLP linears) is the
  // whole weight's, and pushed into the history it sets the scale that one process's first call
  // takes (rounded to bf16 first, as the GEMMs read the weights).
  void seed_fp8_weight_scales(const std::vector<float>& weight_amaxes);
  // fp8 compute's linear layers on this rank: each local block's four (l * 4 + which: qkv, attn
  // proj, fc, fc proj; a mixture-of-experts block leaves fc and fc proj unused), then each local
  // block's local experts' two (fp8_expert_linear).
  int64_t fp8_linears() const;
  int64_t fp8_expert_linear(int local_layer, int local_expert, int which) const;
  void refresh_compute_weights();  // call after every optimizer step
  // The same for flat elements [begin, begin + n) only (ZeRO-3: a unit just gathered).
  void refresh_compute_weights(int64_t begin, int64_t n);
  // The bf16 weight copy (an empty Tensor in fp32 compute, where the matmuls read params()), and
  // its bytes. An optimizer may write it directly (AdamW::step) instead of a refresh.
  Tensor bf16_copy() const { return bf16_ ? compute_params_ : Tensor(); }
  size_t compute_copy_bytes() const { return bf16_ ? compute_params_.nbytes() : 0; }
  // Mixture of experts: the load-balancing loss (moe_router.h) of every sequence the training
  // and evaluation forwards since the last call ran, times aux_loss_coef, summed over the
  // sequences and this rank's blocks; and back to 0. (Divided by the sequences, it is the mean
  // the gradient follows; the loss forward() returns is the language model's.)
  double take_moe_balance_loss();
  // Choices past an expert's capacity since the last call, over this rank's blocks; back to 0.
  int64_t take_moe_dropped();
  Activations& activations() { return *acts_; }
  size_t activation_bytes() const;  // every slot's
  Hooks& hooks() { return hooks_; }
  // Times every op of forward and backward as a phase ("fwd.qkv", "bwd.attention",
  // "recompute.ln1", summed over layers) with its math FLOPs while `profiler` is in a step. Null:
  // off.
  void set_profiler(PhaseProfiler* profiler) { profiler_ = profiler; }
  Backend& backend() { return be_; }

 private:
  struct BlockWeights;
  BlockWeights block_weights(int local_layer, bool grads) const;
  // The chunk of the slot in use: its first local block, whether it starts with the embedding
  // and ends with the head, and local block l's activations in the slot.
  int chunk_first_layer() const;
  bool runs_embedding() const;
  bool runs_head() const;
  BlockActivations& block_acts(int local_layer);
  void block_forward(int local_layer);
  void block_backward(int local_layer);
  void recompute_block(int local_layer);  // what activation checkpointing dropped
  void head_backward();  // the loss's gradient through the head and ln_f into grad.dresidual
  // The embedding (forward: into encoded; backward: from the running gradient `dout`), at each
  // token's place in the sequence (context parallelism: chunk by chunk).
  // Vocabulary-parallel (tp > 1): each tp rank looks up the tokens of its rows of wte (the inputs
  // as vocab_inputs() maps them) and the partial sums are all-reduced, or reduce-scattered to
  // rows under sequence parallelism; the positions enter on tp rank 0 only.
  void embedding_forward();
  void embedding_backward(const Tensor& dout);
  const int32_t* vocab_inputs(const int32_t* inputs);
  // The loss over this rank's logits: fused at tp 1, else the vocabulary-parallel halves around
  // an all-gather of their statistics over tp.
  void cross_entropy(float dloss_scale);
  // A block's attention (context parallelism: over every cp rank's keys and values, gathered).
  void attention_forward(BlockActivations& a);
  void attention_backward(BlockActivations& a);
  Tensor weight_view(const std::string& name, bool grad) const;  // fp32 master or gradient
  Tensor matmul_weight(const std::string& name) const;           // the compute copy
  // matmul_forward, or in fp8 compute matmul_forward_fp8 with linear `which` (0-3: qkv, attn
  // proj, fc, fc proj) of local layer l's scaling state; plus `residual` when given (fp32 out).
  void linear_forward(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                      int local_layer, int which, const Tensor& residual = Tensor());
  // matmul_forward_fp8 with the state and amaxes of fp8 linear `linear` (fp8_linears() order).
  void fp8_linear_forward(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                          int64_t linear);
  // The MLP's hidden layer of local layer l: fch = fc(ln2), fch_gelu = gelu(fch).
  void mlp_hidden_forward(BlockActivations& a, const Tensor& ln2, const Tensor& weight,
                          const Tensor& bias, int l);
  // A mixture-of-experts block's MLP: residual_out = residual_mid + sum over the token's kept
  // choices of gate * expert(ln2); backward from d(residual_out) in grad.dresidual, leaving
  // d(ln2) in grad.dln.
  // Under sequence parallelism each tp rank routes the whole sequences of its rows (B / tp of
  // them), the experts whole on every tp rank (their gradients summed over tp, as the
  // layernorms'); dln: where the block's MLP input gradient goes (this rank's rows).
  void moe_forward(BlockActivations& a, int local_layer);
  // a.routing: the routing of this rank's rows from a.router_logits (on the host); under context
  // parallelism after an all-gather of the cp ranks' choice counts (the capacity counts whole
  // sequences).
  void route(BlockActivations& a);
  void moe_backward(BlockActivations& a, int local_layer, const Tensor& dln);
  // The experts' MLPs over the expert side's slot rows (one GEMM pair per (ep rank, expert)).
  void experts_forward(BlockActivations& a, int local_layer);
  void experts_backward(BlockActivations& a, int local_layer);
  void ep_all_to_all(const Tensor& send, Tensor recv);  // Hooks::ep_all_to_all, timed
  void ep_all_to_all_rows(const Tensor& send, Tensor recv, const std::vector<int64_t>& send_rows,
                          const std::vector<int64_t>& recv_rows);  // the same, timed
  void reallocate_activations();  // at the same size, for a change of compute precision
  // A phase named "<pass>.<op>" (pass: fwd, bwd or recompute), or nothing when not profiling.
  PhaseProfiler::Scope phase(const char* op, double flops = 0) const;
  void call_before(int unit, bool backward);
  void tp_all_reduce(Tensor t);  // Hooks::tp_all_reduce, when there is one
  // Hooks::tp_all_gather and tp_reduce_scatter (sequence parallelism; the gather also for the
  // vocabulary-parallel loss), timed;
  void tp_all_gather(const Tensor& rows, Tensor whole);
  void tp_reduce_scatter(const Tensor& whole, Tensor rows);
  void cp_all_gather(const Tensor& rows, Tensor whole);  // Hooks::cp_all_gather, timed
  // a row-parallel layer's output: its partial sums (the bias on tp rank 0) plus `residual` on
  // this rank's rows, reduce-scattered into `out` (this rank's rows);
  void sp_row_parallel(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                       int local_layer, int which, const Tensor& residual);
  // the running gradient gathered as the GEMMs read it (its bf16 rounding under bf16 compute),
  // [B*T, C];
  Tensor sp_gather_dresidual();
  // A column-parallel layer's backward from its output gradient `dout` and its layernorm input
  // `ln` (gathered again under sequence parallelism): weight gradients, and the input gradient
  // in grad.dln summed over tp (under sequence parallelism: its rows in sp.dln_rows).
  void column_parallel_backward(const char* op, const Tensor& ln, const Tensor& dout,
                                Tensor dweight, Tensor dbias, const Tensor& weight);
  Tensor sp_rows(const Tensor& whole) const;  // this rank's rows of a [B,T,C] tensor, [RL, C]
  void call_ready(int unit);
  bool grads_final_ = true;  // the backward's (call_ready is silent otherwise)

  Backend& be_;
  ParamLayout layout_;
  Tensor params_, grads_;
  Tensor compute_params_;  // params_ itself in fp32 compute, a bf16 copy in bf16 compute
  bool bf16_ = false;
  StateMemory memory_ = StateMemory::whole;  // (the constructor's)
  void* alloc_state(size_t bytes);           // params or the bf16 copy, as memory_ says
  bool fp8_ = false;
  bool fp8_new_ = false;
  BackendBuffer fp8_states_;            // fp8 compute: [fp8_linears(), kFp8StateFloats]
  BackendBuffer fp8_amaxes_;            // since begin_fp8_amaxes(): [fp8_linears(), input/weight]
  bool fp8_amaxes_open_ = false;        // between begin_fp8_amaxes() and end_fp8_amaxes()
  void push_fp8_amaxes();               // reduced over the amax group, into the states
  Tensor fp8_sums(const Shape& shape);  // a view of Activations::fp8_sums
  std::vector<std::unique_ptr<Activations>> act_slots_;
  int plain_slots_ = 0, head_slots_ = 0;  // allocate_activations
  Activations* acts_ = nullptr;           // the slot in use
  Hooks hooks_;
  PhaseProfiler* profiler_ = nullptr;
  const char* pass_ = "fwd";
  float dloss_scale_ = 0;
  // tp > 1: the inputs as this rank's wte shard indexes them (-1: another shard's row)
  std::vector<int32_t> shard_inputs_;
  double moe_balance_loss_ = 0;  // take_moe_balance_loss
  int64_t moe_dropped_ = 0;
};

}  // namespace trainer::model
