#pragma once
// Declarations of the CUDA kernels' host launchers (definitions in kernels/*.cu). Every launcher
// enqueues on `stream`, checks the launch (CUDA_CHECK_LAUNCH) and returns without syncing.
// Pointers are device pointers; shapes and semantics match runtime/core/backend.h (row-major,
// backward ops ACCUMULATE, null gradient = not needed). Sizes are int64_t like the Backend's.
#ifndef TRAINER_CUDA_EMULATION  // tests/unit/kernels brings its own cudaStream_t
#include <cuda_runtime_api.h>
#endif

#include <cstdint>

namespace trainer::kernels {

// --- layers (layernorm_gelu.cu) ---
// out[N,C] = (inp - mean) * rstd * weight + bias (bias may be null); mean/rstd[N] may be null.
// OutT of the forward ops that feed matmuls (layernorm, gelu, attention): float, or uint16_t for
// bf16 bits rounded to nearest even (instantiated for both).
template <class OutT>
void layernorm_forward(OutT* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, cudaStream_t stream);
// dinp[N,C] += ..., dweight[C] += ..., dbias[C] += ...; the column sums are deterministic.
// One pass over dout and inp; scratch: column_sums_scratch_floats(N, C) floats (per-chunk partial
// sums, of layernorm_backward and bias_backward alike).
int64_t column_sums_scratch_floats(int64_t N, int64_t C);
// dinp_bf16 (may be null; only with dinp): dinp's new value rounded to bf16.
void layernorm_backward(float* dinp, uint16_t* dinp_bf16, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight, const float* mean,
                        const float* rstd, float* scratch, int64_t N, int64_t C,
                        cudaStream_t stream);
template <class OutT>
void gelu_forward(OutT* out, const float* inp, int64_t n, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                   cudaStream_t stream);  // dinp += gelu'(inp) * dout
// The fused GELU ops' fallback (runtime/cuda when cuBLASLt has no GELU epilogue for a shape),
// from the GEMM's fp32 sums: out = gelu(sum) and pre = sum; and dpre = gelu'(pre) * g
// (overwritten). T: float, or uint16_t for bf16 bits, each rounded once. With T = float, `pre`
// may be `sum` and `dpre` may be `g` (in place).
template <class T>
void gelu_forward_keep_input(T* out, T* pre, const float* sum, int64_t n, cudaStream_t stream);
template <class T>
void gelu_backward_from_sum(T* dpre, const T* pre, const float* g, int64_t n, cudaStream_t stream);
// dbias[OC] += sum over rows of dout[N,OC] (fixed order; scratch as for layernorm_backward;
// DoutT float, or uint16_t for a bf16 dout), and out[N,OC] += bias[OC].
template <class DoutT>
void bias_backward(float* dbias, const DoutT* dout, float* scratch, int64_t N, int64_t OC,
                   cudaStream_t stream);
void add_bias(float* out, const float* bias, int64_t N, int64_t OC, cudaStream_t stream);

// --- attention: qkv is QkvT, float or uint16_t for bf16 bits (bf16 compute; instantiated with
// a bf16 out only). dqkv is DqkvT: float, or uint16_t with a bf16 qkv (the fp32 sums rounded
// once). Backward overwrites every element of dqkv. ---
// attention.cu: the reference kernels, att[B,NH,T,T] materialised.
template <class OutT, class QkvT>
void attention_forward(OutT* out, float* att, const QkvT* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, cudaStream_t stream);
// dpre_scratch: B*NH*T*T floats of workspace (the pre-softmax gradient).
template <class QkvT, class DqkvT>
void attention_backward(DqkvT* dqkv, const float* dout, const QkvT* qkv, const float* att,
                        float* dpre_scratch, int64_t B, int64_t T, int64_t C, int64_t NH,
                        cudaStream_t stream);

// --- context-parallel attention (context_attention.cu; Backend::attention_forward_cp): the
// reference kernels over the sequence, att[B,NH,Tl,T] materialised (the flash ones: below) ---
// all [cp,B,Tl,width] (every cp rank's rows, rank order) -> seq [B,T,width] in sequence order.
template <class T>
void context_to_sequence(T* seq, const T* all, int64_t cp, int64_t B, int64_t Tl, int64_t width,
                         cudaStream_t stream);
// out[B,Tl,C] of cp rank `rank`'s queries over seq [B,T,3C] (T = cp * Tl; QkvT float, or
// uint16_t with a bf16 out).
template <class OutT, class QkvT>
void context_attention_forward(OutT* out, float* att, const QkvT* seq, int64_t rank, int64_t cp,
                               int64_t B, int64_t Tl, int64_t C, int64_t NH, cudaStream_t stream);
// dqkv_all [cp,B,Tl,3C] (overwritten): this rank's share of every rank's dqkv. Scratch: dseq
// B*T*3C floats, dpre B*NH*Tl*T floats.
template <class QkvT>
void context_attention_backward(float* dqkv_all, float* dseq_scratch, float* dpre_scratch,
                                const float* dout, const QkvT* seq, const float* att, int64_t rank,
                                int64_t cp, int64_t B, int64_t Tl, int64_t C, int64_t NH,
                                cudaStream_t stream);
// dqkv_all [cp,B,Tl,3C] from the sequence-order gradient dseq [B,T,3C]: the key and value
// columns of every rank's rows, the query columns of this rank's (the others' are zero here).
void context_grad_from_sequence(float* dqkv_all, const float* dseq, int64_t rank, int64_t cp,
                                int64_t B, int64_t Tl, int64_t C, cudaStream_t stream);

// --- attention (flash_attention.cu): FlashAttention-style, T x T never materialised ---
// lse[B,NH,T] is each row's log-sum-exp, all backward needs besides qkv, out and dout.
// Head sizes kFlashHeadSizes (runtime/core/attention_state.h): 16, 32, 64, 80, 96, 128.
template <class OutT, class QkvT>
void flash_attention_forward(OutT* out, float* lse, const QkvT* qkv, int64_t B, int64_t T,
                             int64_t C, int64_t NH, cudaStream_t stream);
// dsum_scratch: B*NH*T floats (rowsum(dout * out)). `out` is forward's output (float or bf16).
template <class OutT, class QkvT, class DqkvT>
void flash_attention_backward(DqkvT* dqkv, float* dsum_scratch, const float* dout, const QkvT* qkv,
                              const OutT* out, const float* lse, int64_t B, int64_t T, int64_t C,
                              int64_t NH, cudaStream_t stream);

// Context parallelism on the same kernels: cp rank `rank`'s Tl = 2L query rows (its chunks
// context_chunk(rank, cp, 0) and (.., 1) of L tokens) over the whole sequence seq [B,T,3C]
// (context_to_sequence, T = cp * Tl): out [B,Tl,C], lse [B,NH,Tl]. Backward writes into dseq
// [B,T,3C] the q gradient of this rank's positions and the k and v gradients of every position
// (zero where no query of this rank sees it); context_grad_from_sequence makes dqkv_all of it.
// dsum_scratch: B*NH*Tl floats.
template <class OutT, class QkvT>
void flash_context_attention_forward(OutT* out, float* lse, const QkvT* seq, int64_t rank,
                                     int64_t cp, int64_t B, int64_t Tl, int64_t C, int64_t NH,
                                     cudaStream_t stream);
template <class OutT, class QkvT>
void flash_context_attention_backward(float* dseq, float* dsum_scratch, const float* dout,
                                      const QkvT* seq, const OutT* out, const float* lse,
                                      int64_t rank, int64_t cp, int64_t B, int64_t Tl, int64_t C,
                                      int64_t NH, cudaStream_t stream);

// --- attention on tensor cores (flash_attention_tc.cu), for bf16 compute: the same contract as
// flash_attention_*, with q, k, v, P, dout and dS rounded to bf16 for the WMMA products ---
bool tc_attention_supports(int64_t head_size);  // 32, 64
template <class OutT, class QkvT>
void tc_attention_forward(OutT* out, float* lse, const QkvT* qkv, int64_t B, int64_t T, int64_t C,
                          int64_t NH, cudaStream_t stream);
template <class OutT, class QkvT, class DqkvT>
void tc_attention_backward(DqkvT* dqkv, float* dsum_scratch, const float* dout, const QkvT* qkv,
                           const OutT* out, const float* lse, int64_t B, int64_t T, int64_t C,
                           int64_t NH, cudaStream_t stream);

// --- attention on tensor cores with register-resident tiles (flash_attention_mma.cu: mma.sync,
// FlashAttention-2's layout), for bf16 compute: the contract and numerics of tc_attention_* ---
bool mma_attention_supports(int64_t head_size);  // 32, 64, 80, 96, 128
// rows_per_warp: 16 (the default) or 32 (each K/V fragment read feeds two 16-row slabs: half the
// shared-memory reads per product, more registers; head sizes above 64 always take 16); the outputs
// are bit for bit the same.
template <class OutT, class QkvT>
void mma_attention_forward(OutT* out, float* lse, const QkvT* qkv, int64_t B, int64_t T, int64_t C,
                           int64_t NH, cudaStream_t stream, int rows_per_warp = 16);
// scratch: mma_attention_backward_scratch_floats() floats (D, and bf16 copies of q and dout),
// 16-byte aligned.
int64_t mma_attention_backward_scratch_floats(int64_t B, int64_t T, int64_t C, int64_t NH);
// rows_per_warp: the dq kernel's, as the forward's (dk/dv keep 16 keys a warp).
template <class OutT, class QkvT, class DqkvT>
void mma_attention_backward(DqkvT* dqkv, float* scratch, const float* dout, const QkvT* qkv,
                            const OutT* out, const float* lse, int64_t B, int64_t T, int64_t C,
                            int64_t NH, cudaStream_t stream, int rows_per_warp = 16);
// Context parallelism on the same kernels (16 rows a warp), as flash_context_attention_* (the
// same contract, a bf16 out): where mma_context_attention_supports, i.e. the head size is one of
// theirs and each chunk (Tl / 2 rows) a whole number of their 32-row backward tiles. scratch:
// mma_attention_backward_scratch_floats(B, Tl, C, NH) floats, 16-byte aligned.
bool mma_context_attention_supports(int64_t head_size, int64_t Tl);
template <class OutT, class QkvT>
void mma_context_attention_forward(OutT* out, float* lse, const QkvT* seq, int64_t rank, int64_t cp,
                                   int64_t B, int64_t Tl, int64_t C, int64_t NH,
                                   cudaStream_t stream);
template <class OutT, class QkvT>
void mma_context_attention_backward(float* dseq, float* scratch, const float* dout, const QkvT* seq,
                                    const OutT* out, const float* lse, int64_t rank, int64_t cp,
                                    int64_t B, int64_t Tl, int64_t C, int64_t NH,
                                    cudaStream_t stream);

// --- embedding (embedding.cu) ---
// A negative token has no row (a vocabulary shard's other rows: out gets wpe only); a token >= V
// writes a NaN row instead of reading out of bounds.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t pos_offset, int64_t B, int64_t T, int64_t C, int64_t V,
                       cudaStream_t stream);
// Deterministic dwte without float atomics: positions bucketed by token and each bucket sorted,
// then each (token, column) sums its rows in position order. scratch:
// embedding_backward_scratch_ints().
int64_t embedding_backward_scratch_ints(int64_t BT, int64_t V);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int32_t* scratch, int64_t pos_offset, int64_t B, int64_t T, int64_t C,
                        int64_t V, cudaStream_t stream);

// --- loss (cross_entropy.cu) ---
// losses[N]; logits overwritten by dlogits * dloss_scale when dloss_scale != 0. target < 0:
// ignored; target >= V: loss NaN.
// Rows of logits are Vp >= V long; columns [V, Vp) are vocabulary padding (gradient 0).
// LogitT: float, or uint16_t for bf16 logits (read as fp32; dlogits rounded once).
template <class LogitT>
void softmax_cross_entropy(LogitT* logits, float* losses, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vp, float dloss_scale, cudaStream_t stream);
// The vocabulary-parallel halves (Backend::cross_entropy_shard_*): rows of Vp columns of which
// the first `classes` are classes, the rest padding; global column = vocab_start + local. A
// target >= vocab gets a NaN loss.
template <class LogitT>
void cross_entropy_shard_stats(float* stats, const LogitT* logits, const int32_t* targets,
                               int64_t N, int64_t classes, int64_t Vp, int64_t vocab_start,
                               cudaStream_t stream);
template <class LogitT>
void cross_entropy_shard_finish(LogitT* logits, float* losses, const float* all_stats, int64_t R,
                                const int32_t* targets, int64_t N, int64_t classes, int64_t Vp,
                                int64_t vocab_start, int64_t vocab, float dloss_scale,
                                cudaStream_t stream);

// --- fp8 (fp8.cu; runtime/core/fp8_recipe.h) ---
// out[n] = e4m3(x * scale) for bf16 x, with the scale that tensor_state (kFp8TensorFloats floats)
// gives this call; *amax is raised to amax(|x|) (a NaN *amax counts as nothing) and the state
// stays. *scale and *descale receive that
// scale and its inverse (the GEMM's descale: cuBLASLt refuses one that is not 16-byte aligned,
// seen on an H200 with cuBLASLt 13.1); partials: kReducePartials floats of workspace.
void fp8_quantize_delayed(uint8_t* out, const uint16_t* x, int64_t n, const float* tensor_state,
                          float* amax, float* scale, float* descale, float* partials,
                          cudaStream_t stream);
// Part i of states ([parts, kFp8TensorFloats]) pushes amaxes[i] into its history.
void fp8_push_amaxes(float* states, const float* amaxes, int64_t parts, cudaStream_t stream);

// --- mixture of experts (moe.cu): Backend::moe_gather_rows, moe_combine_rows, moe_gate_grad.
// OutT/InT: float, or uint16_t for bf16 bits (out rounded once); scale and weight may be null. ---
template <class OutT, class InT>
void moe_gather_rows(OutT* out, const InT* inp, const int32_t* token_of_slot, const float* scale,
                     int64_t S, int64_t C, cudaStream_t stream);
void moe_combine_rows(float* out, const float* inp, const int32_t* slot, const float* weight,
                      int64_t N, int64_t K, int64_t C, cudaStream_t stream);
void moe_gate_grad(float* dweight, const float* dout, const float* inp, const int32_t* slot,
                   int64_t N, int64_t K, int64_t C, cudaStream_t stream);

// --- optimizer and utilities (optim_util.cu) ---
// bias_correction1/2 = 1 - beta^step, computed by the caller in double like the cpu reference.
// The gradients are read times grad_scale (global-norm clipping's coefficient). params_bf16 (may
// be null): also receives the updated params rounded to bf16, in the same pass.
void adamw_step(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, float bias_correction1,
                float bias_correction2, float grad_scale, uint16_t* params_bf16,
                cudaStream_t stream);
void fill(float* x, float value, int64_t n, cudaStream_t stream);
void fill(uint16_t* x, float value, int64_t n, cudaStream_t stream);  // bf16 bits of value
void scale(float* x, float alpha, int64_t n, cudaStream_t stream);
void axpy(float* y, const float* x, float alpha, int64_t n, cudaStream_t stream);
// Sum of x^2 (squares=true) or of x in fp64 over a fixed grid: the same bits on every run.
// partials: kReducePartials doubles of workspace; result: one double on the device.
inline constexpr int kReducePartials = 256;
void sum_fp64(double* result, double* partials, const float* x, int64_t n, bool squares,
              cudaStream_t stream);
// fp32 -> bf16 round to nearest even (bits identical to the cpu backend's), kept in fp32 or
// stored as bf16 bits; and bf16 bits -> fp32.
void round_to_bf16_f32(float* dst, const float* src, int64_t n, cudaStream_t stream);
void cast_f32_to_bf16(uint16_t* dst, const float* src, int64_t n, cudaStream_t stream);
void cast_bf16_to_f32(float* dst, const uint16_t* src, int64_t n, cudaStream_t stream);

}  // namespace trainer::kernels
