#pragma once
// Backend: the table of ops every device implements (cpu reference, cuda). Everything above this
// interface (model, parallelism, optimizer) is written once.
//
// Conventions (all ops):
// - Activations are row-major [B*T, C]; "N" below is the number of rows (B*T).
// - Linear weights are [out, in] (PyTorch / GPT-2 / llm.c layout), so y = x W^T + b.
// - Backward ops ACCUMULATE (+=) into parameter gradients (gradient accumulation is free) and
//   into the input gradients of layernorm and gelu (the residual stream adds up there). The
//   three ops whose input gradient is a GEMM's or attention's own output OVERWRITE it:
//   matmul_backward's dinp, matmul_gelu_backward's dpre and attention_backward's dqkv. Their
//   callers need no zero-fill, and the GEMM no read of it (beta 0), saving two passes over each
//   such activation gradient per layer. (softmax_cross_entropy writes dlogits over the logits.)
// - An empty Tensor (data == nullptr) for an optional argument (bias, a gradient not needed)
//   means "absent".
// - Mixed precision: everything is fp32 except the operands of the linear layers, which may be
//   bf16 (precision.compute: bf16). matmul_forward/backward take inp and weight both fp32 or
//   both bf16; with bf16 operands the GEMMs accumulate in fp32 and matmul_backward rounds dout
//   to bf16 for its two GEMMs (as autocast does) and sums that rounded dout into dbias (in fp32:
//   the dweight GEMM's bias-gradient epilogue on cuda, as llm.c). The ops that
//   produce matmul inputs (layernorm_forward, gelu_forward, attention_forward) may write a bf16
//   `out`: computed in fp32, rounded once to nearest even. Every gradient stays fp32, except
//   three activation gradients that may take the activation's dtype (Megatron's bf16
//   activations): the MLP's hidden one (the fused GELU ops below), the logits' (a bf16
//   matmul_forward output, softmax_cross_entropy in place) and attention's dqkv (a bf16 qkv);
//   matmul_backward then takes such a bf16 dout as it is. The residual gradient stays fp32;
//   layernorm_backward may also write it rounded to bf16 (dinp_bf16), as the next
//   matmul_backward would read it.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "runtime/core/attention_state.h"
#include "runtime/core/device_timer.h"
#include "runtime/core/tensor.h"

namespace trainer {

struct AdamWParams {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0;
  int64_t step = 1;  // 1-based step count for bias correction
  // The gradients are read times this: global-norm clipping's coefficient, applied in the update
  // instead of a pass that rewrites them (the same fp32 product either way).
  float grad_scale = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual DeviceType device() const = 0;

  // --- memory ---
  virtual void* alloc(size_t bytes) = 0;
  // Memory for a buffer whose ranges release() and acquire() hand back and take again, held whole
  // at first (the model's buffers start released instead: alloc_released, below): on the cuda
  // backend, pages that a release unmaps; elsewhere alloc()'s. free() takes it back.
  virtual void* alloc_releasable(size_t bytes) { return alloc(bytes); }
  // The same, released from the start (ZeRO 2 and 3's gradients, acquired unit by unit; ZeRO 3's
  // params and bf16 copy, of which a rank acquires its shard and each unit as it is gathered): it
  // holds no memory until acquired, and reads 0 then. `bytes`: fp32 elements (a multiple of 4).
  virtual void* alloc_released(size_t bytes);
  virtual void free(void* p) = 0;
  virtual void zero(Tensor t) = 0;
  virtual void copy(Tensor dst, const Tensor& src) = 0;  // same numel and dtype
  virtual void to_host(void* dst, const Tensor& src) = 0;
  virtual void from_host(Tensor dst, const void* src) = 0;
  virtual void synchronize() {}
  // Marks on this backend's stream of work for profiling (PhaseProfiler). The default, the host
  // clock, is right for a backend whose ops are done when they return.
  virtual std::unique_ptr<DeviceTimer> make_timer() { return make_host_timer(); }
  // `t` (fp32, or bf16: `fill` rounded) is no longer needed (ZeRO's released ranges): afterwards
  // it reads `fill`, except where the backend handed whole pages back to the system (the cpu
  // backend), which read 0.
  virtual void release(Tensor t, float fill) = 0;
  // `t`, released before, is used again (ZeRO gathers a unit's params; backward writes a unit's
  // gradients): whatever of it the backend handed back is taken back and reads 0. Every read or
  // write of a released range comes after this. A no-op on a backend whose released memory stays
  // usable (the cpu backend's pages come back as they are written).
  virtual void acquire(Tensor t) { (void)t; }
  // Bytes of `t` held in memory now: all of them, unless the backend releases pages.
  virtual int64_t resident_bytes(const Tensor& t) { return static_cast<int64_t>(t.nbytes()); }
  // The most device memory this backend has held (the report's peak per rank); nullopt for a
  // backend whose memory is the process's own, whose peak is then the host's (peak RSS).
  virtual std::optional<int64_t> peak_device_bytes() const { return std::nullopt; }
  // Which implementation runs each family of ops where this backend has a choice (the report's
  // hardware.kernels, so that two runs' reports say what differed): family -> description.
  virtual std::map<std::string, std::string> kernels() const { return {}; }

  // --- GEMM ---
  // C[M,N] = alpha * op(A) op(B) + beta * C, row-major; op(X) = X or X^T. Batched with strides
  // (elements) when batch > 1.
  struct Gemm {
    bool trans_a = false, trans_b = false;
    int64_t m = 0, n = 0, k = 0;
    float alpha = 1, beta = 0;
    const float* a = nullptr;
    const float* b = nullptr;
    float* c = nullptr;
    int64_t lda = 0, ldb = 0, ldc = 0;
    int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  };
  virtual void gemm(const Gemm& g) = 0;

  // out[N,OC] = inp[N,C] weight[OC,C]^T + bias[OC] (+ residual[N,OC]). out is fp32, or bf16
  // with bf16 operands (the fp32 sum, bias included, rounded once: the logits of bf16 compute).
  // residual (optional; fp32 with an fp32 out; may be out itself) is added in the same pass: the
  // residual stream's add folded into the GEMM (cuBLASLt reads it as C with beta 1), instead of
  // a separate pass that re-reads and re-writes out.
  virtual void matmul_forward(Tensor out, const Tensor& inp, const Tensor& weight,
                              const Tensor& bias, const Tensor& residual = Tensor()) = 0;
  // fp8 forward of a linear layer (precision.compute: fp8; runtime/core/fp8_recipe.h): inp[N,C]
  // and weight[OC,C], both bf16, are quantized to e4m3 with the scales of `fp8_state` (fp32,
  // kFp8StateFloats: the input's part, then the weight's), multiplied and descaled:
  // out[N,OC] = inp W^T + bias, fp32 or bf16 (the fp32 sum with the bias rounded once, as
  // matmul_forward's bf16 out). The cpu emulation accumulates in fp32; cuBLASLt's fp8
  // GEMM runs with fast accumulation (Transformer Engine's forward setting: partial sums are
  // promoted to fp32 less often), within the fp8 rounding that dominates both. fp8_amax[0..1]
  // (fp32) are raised to amax(|inp|) and amax(|weight|) (max with what they hold, NaN counting as
  // nothing), so that the calls between two pushes, a pipeline schedule's pieces included,
  // report the amax of all their inputs; the state does not move. The backward of such a
  // layer is matmul_backward on the bf16 operands. A backend without fp8 (supports_fp8() false)
  // throws.
  virtual bool supports_fp8() const { return false; }
  virtual void matmul_forward_fp8(Tensor out, const Tensor& inp, const Tensor& weight,
                                  const Tensor& bias, const Tensor& fp8_state, Tensor fp8_amax) = 0;
  // Moves n tensor parts of fp8 states on (fp8_states: n * kFp8TensorFloats fp32, amaxes: n
  // fp32, already reduced over the amax group): part i pushes amaxes[i] into its history.
  virtual void fp8_push_amaxes(Tensor fp8_states, const Tensor& amaxes) = 0;
  // dinp[N,C] = dout weight, OVERWRITTEN (the GEMM's own output: no zero-fill and re-read);
  // dweight[OC,C] += dout^T inp and dbias[OC] += sum_rows(dout), accumulated (micro-batches add
  // up). Any gradient may be empty (not wanted). dout is fp32, or bf16 with bf16 operands (then
  // the GEMMs and dbias read it as it is).
  virtual void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                               const Tensor& inp, const Tensor& weight) = 0;

  // The MLP's hidden layer, a linear and its GELU in one op (the cuda backend fuses the GELU into
  // the GEMM's epilogue, cuBLASLt's GELU_AUX_BIAS): pre[N,OC] = inp weight^T + bias and
  // out[N,OC] = gelu(pre), both from the fp32 sum. pre and out have the operands' dtype (bf16:
  // each rounded once to nearest even); inp, weight, bias as matmul_forward.
  virtual void matmul_gelu_forward(Tensor out, Tensor pre, const Tensor& inp, const Tensor& weight,
                                   const Tensor& bias) = 0;
  // matmul_backward of the linear after that GELU, carried through the GELU (cuBLASLt's DGELU
  // epilogue): dpre[N,C] = (dout weight) * gelu'(pre), OVERWRITTEN (not accumulated: it is the
  // GEMM's own output), in pre's dtype (bf16: rounded once from fp32); dweight += dout^T inp and
  // dbias += sum_rows(dout) as matmul_backward. inp is gelu(pre), the forward's `out`.
  virtual void matmul_gelu_backward(Tensor dpre, Tensor dweight, Tensor dbias, const Tensor& dout,
                                    const Tensor& inp, const Tensor& weight, const Tensor& pre) = 0;

  // --- layers ---
  // out[N,C] = (inp - mean) * rstd * weight + bias; mean[N], rstd[N] saved for backward. eps 1e-5.
  virtual void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, const Tensor& inp,
                                 const Tensor& weight, const Tensor& bias) = 0;
  // dinp, dweight, dbias (each optional) accumulate. dinp_bf16 (optional; bf16, dinp's numel,
  // needs dinp): also receives dinp's new value rounded to bf16, in the same pass: the residual
  // gradient as the next backward GEMMs read it under bf16 compute, with no cast pass of its own.
  virtual void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                                  const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, Tensor dinp_bf16 = Tensor()) = 0;
  // GELU, tanh approximation (GPT-2).
  virtual void gelu_forward(Tensor out, const Tensor& inp) = 0;
  virtual void gelu_backward(Tensor dinp, const Tensor& inp, const Tensor& dout) = 0;

  // Causal self-attention over qkv[B,T,3*C] (q, k, v each [B,T,NH,HS], C = NH*HS) -> out[B,T,C].
  // Scaled by 1/sqrt(HS). `att` is what forward saves for backward, of attention_state_shape():
  // the softmax probabilities [B,NH,T,T] (the cpu reference, the default), or only each row's
  // log-sum-exp [B,NH,T] (a FlashAttention-style kernel that never materialises T x T). Backward
  // also reads forward's `out` (flash kernels need rowsum(dout * out)); `out` may be bf16, and
  // then qkv may be too (bf16 compute: read as fp32 values). Backward OVERWRITES dqkv (every
  // element: the q, k and v gradients of each head); dqkv is fp32, or bf16 with a bf16 qkv
  // (each element the fp32 sum rounded once; the qkv layer's matmul_backward then reads it as
  // it is, with no cast pass).
  virtual Shape attention_state_shape(int64_t B, int64_t NH, int64_t T, int64_t HS) const {
    (void)HS;
    return attention_state_shape_of(false, B, NH, T);
  }
  virtual void attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head) = 0;
  virtual void attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& out, const Tensor& att, int n_head) = 0;

  // Context parallelism (parallel.cp > 1): causal attention over a sequence of T tokens of which
  // each of the split.size ranks (ContextSplit) holds Tl = T / cp: chunks r and 2cp - 1 - r of 2cp
  // equal chunks, in that order (Megatron's load balance: every rank sees as many (query, key)
  // pairs). qkv_all [cp,B,Tl,3C] is every rank's qkv in rank order (their all-gather over the cp
  // group: keys and values gathered whole, Llama 3's context parallelism); out [B,Tl,C] receives
  // this rank's rows, and att (attention_cp_state_shape) what backward reads. Backward OVERWRITES
  // dqkv_all [cp,B,Tl,3C], fp32: this rank's share of every rank's gradient (its own queries' in
  // its block, and in each block the keys' and values' that its queries saw), whose sum over the
  // cp group (a reduce-scatter) is each rank's dqkv. qkv_all and out may be bf16 as in
  // attention_forward. A backend without it (supports_context_parallel() false) throws.
  virtual bool supports_context_parallel() const { return false; }
  // The probabilities [B,NH,Tl,T] (the default), or a flash kernel's row log-sum-exp [B,NH,Tl].
  virtual Shape attention_cp_state_shape(int64_t B, int64_t NH, int64_t Tl, int64_t T,
                                         int64_t HS) const {
    (void)HS;
    return Shape{B, NH, Tl, T};
  }
  virtual void attention_forward_cp(Tensor out, Tensor att, const Tensor& qkv_all,
                                    ContextSplit split, int n_head);
  virtual void attention_backward_cp(Tensor dqkv_all, const Tensor& dout, const Tensor& qkv_all,
                                     const Tensor& out, const Tensor& att, ContextSplit split,
                                     int n_head);
  // out[B,T,C] = wte[tokens[b,t]] + wpe[pos_offset + t]. wpe may be empty (no positions). A
  // negative token has no row in this wte (a vocabulary-parallel embedding: another tensor-parallel
  // rank's): out gets its position only, and dwte nothing. Tokens must be < wte's rows.
  virtual void embedding_forward(Tensor out, const Tensor& tokens, const Tensor& wte,
                                 const Tensor& wpe, int64_t pos_offset) = 0;
  virtual void embedding_backward(Tensor dwte, Tensor dwpe, const Tensor& dout,
                                  const Tensor& tokens, int64_t pos_offset) = 0;

  // Fused softmax + cross-entropy over logits[N,Vp] whose first `vocab` columns are the classes
  // (the rest is vocabulary padding: outside the softmax, gradient 0). Writes losses[N] (natural
  // log) and, when dloss_scale != 0, overwrites logits with dlogits = (softmax -
  // onehot(target)) * dloss_scale. Targets < 0 are ignored (loss 0, gradient 0). logits may be
  // bf16 (bf16 compute, as Megatron's): read as fp32, every sum in fp32, dlogits rounded once.
  virtual void softmax_cross_entropy(Tensor logits, Tensor losses, const Tensor& targets,
                                     float dloss_scale, int64_t vocab) = 0;

  // Vocabulary-parallel cross-entropy (Megatron's): logits[N,Vl] are this tensor-parallel rank's
  // columns [vocab_start, vocab_start + Vl) of the padded vocabulary (the classes: the columns
  // < vocab), and the loss comes in two halves around an all-gather of stats over the tp group.
  // Stats: stats[N,3] fp32 = per row, the max m of this shard's class logits (-inf when it has
  // none), the sum of exp(z - m) over them, and the target's logit when this shard holds it (else
  // 0). logits may be bf16.
  virtual void cross_entropy_shard_stats(Tensor stats, const Tensor& logits, const Tensor& targets,
                                         int64_t vocab_start, int64_t vocab) = 0;
  // Finish: all_stats[R,N,3] = the R shards' stats in rank order. Writes losses[N] (the whole
  // vocabulary's loss, the same on every rank) and, when dloss_scale != 0, this shard's dlogits
  // as softmax_cross_entropy does (padding columns 0; targets < 0 ignored).
  virtual void cross_entropy_shard_finish(Tensor logits, Tensor losses, const Tensor& all_stats,
                                          const Tensor& targets, float dloss_scale,
                                          int64_t vocab_start, int64_t vocab) = 0;

  // --- mixture of experts: moving token rows to and from the experts' slots (the routing itself
  // runs on the host: runtime/model/moe_router.h) ---
  // Dispatch: out[s] = scale[s] * inp[token_of_slot[s]], and 0 where token_of_slot[s] < 0 (an
  // empty slot). out [S,C] fp32, or bf16 (rounded once); inp [N,C] fp32 or bf16; token_of_slot
  // [S] int32; scale [S] fp32, or empty (1).
  virtual void moe_gather_rows(Tensor out, const Tensor& inp, const Tensor& token_of_slot,
                               const Tensor& scale) = 0;
  // Combine: out[n] += sum over k with slot[n,k] >= 0 of weight[n,k] * inp[slot[n,k]], in k
  // order. out [N,C] and inp [S,C] fp32; slot [N,K] int32; weight [N,K] fp32, or empty (1).
  virtual void moe_combine_rows(Tensor out, const Tensor& inp, const Tensor& slot,
                                const Tensor& weight) = 0;
  // The combine's weight gradient: dweight[n,k] = dot(dout[n], inp[slot[n,k]]), 0 where
  // slot[n,k] < 0, OVERWRITTEN. dweight [N,K], dout [N,C], inp [S,C], all fp32.
  virtual void moe_gate_grad(Tensor dweight, const Tensor& dout, const Tensor& inp,
                             const Tensor& slot) = 0;

  // --- optimizer and utilities ---
  // AdamW with decoupled weight decay on fp32 params/grads/moments (all same numel). When
  // `params_bf16` is given (bf16, same numel) the updated params are also written there, rounded
  // to nearest even: the bf16 weight copy of bf16 compute, in the same pass.
  virtual void adamw_step(Tensor params, const Tensor& grads, Tensor m, Tensor v,
                          const AdamWParams& p, Tensor params_bf16 = Tensor()) = 0;
  virtual void scale(Tensor x, float alpha) = 0;                  // x *= alpha
  virtual void axpy(Tensor y, const Tensor& x, float alpha) = 0;  // y += alpha * x
  virtual double sum_squares(const Tensor& x) = 0;                // sum x^2 in fp64 accumulation
  virtual double sum(const Tensor& x) = 0;
  // Round fp32 values to the nearest-even bfloat16 (stored in dst's dtype: f32 keeps the rounded
  // value in fp32 storage, which is how the cpu backend emulates bf16 compute).
  virtual void round_to_bf16(Tensor dst, const Tensor& src) = 0;
};

// Creates a backend by name ("cpu", "cuda"); throws with the list of available ones.
std::unique_ptr<Backend> make_backend(const std::string& name, int local_rank);
bool cuda_backend_available();

}  // namespace trainer
