// CpuBackend: the layer ops (matmul, layernorm, gelu, attention, embedding, cross-entropy).
// Each checks its shapes (runtime/core/op_shapes.h), then calls the fp32 instantiation of
// runtime/cpu/ops.h; bf16 operands and outputs go through staging_ (backend.h).
#include <algorithm>

#include "runtime/core/op_shapes.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/tensor_checks.h"

namespace trainer::cpu {

// Staging slots: inp 0, weight 1, dout 2 (widened when bf16, or rounded to bf16 when fp32 under
// bf16 operands), an op's bf16 output 3, a second bf16 output or input 4.
void CpuBackend::matmul_forward(Tensor out, const Tensor& inp, const Tensor& weight,
                                const Tensor& bias, const Tensor& residual) {
  const char* op = "matmul_forward";
  const LinearDims d = matmul_forward_dims(out, inp, weight, bias, residual);
  check_linear_activation_dtype(out, matmul_operand_dtype(inp, weight, op), op, "out");
  cpu::matmul_forward(staging_.output(out, 3, op, "out"), staging_.input(inp, 0, op, "inp"),
                      staging_.input(weight, 1, op, "weight"), opt_f32(bias, op, "bias"), d.N, d.C,
                      d.OC, opt_f32(residual, op, "residual"));
  staging_.commit(out, 3);
}

void CpuBackend::matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                                 const Tensor& inp, const Tensor& weight) {
  const char* op = "matmul_backward";
  const LinearDims d = matmul_backward_dims(dinp, dweight, dbias, dout, inp, weight);
  linear_backward(op, opt_f32(dinp, op, "dinp"), dweight, dbias, dout, inp, weight, d);
}

void CpuBackend::linear_backward(const char* op, float* dinp, Tensor dweight, Tensor dbias,
                                 const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                 const LinearDims& d) {
  const DType operands = matmul_operand_dtype(inp, weight, op);
  check_linear_activation_dtype(dout, operands, op, "dout");
  const float* dy = staging_.input(dout, 2, op, "dout");
  // bf16 operands: the GEMMs and dbias see dout rounded to bf16 (a bf16 dout already is)
  const bool round = operands == DType::bf16 && dout.dtype == DType::f32;
  const float* dy_gemm = round ? staging_.rounded(dy, d.N * d.OC, 2) : dy;  // dy is dout's own
  cpu::matmul_backward(dinp, opt_f32(dweight, op, "dweight"), static_cast<float*>(nullptr), dy_gemm,
                       staging_.input(inp, 0, op, "inp"), staging_.input(weight, 1, op, "weight"),
                       d.N, d.C, d.OC, 0.0f);  // dinp overwritten (backend.h)
  if (!dbias.empty()) cpu::bias_backward(need_f32(dbias, op, "dbias"), dy_gemm, d.N, d.OC);
}

void CpuBackend::matmul_gelu_forward(Tensor out, Tensor pre, const Tensor& inp,
                                     const Tensor& weight, const Tensor& bias) {
  const char* op = "matmul_gelu_forward";
  const LinearDims d = matmul_gelu_forward_dims(out, pre, inp, weight, bias);
  gelu_operand_dtype(inp, weight, out, "out", pre, "pre", op);
  float* sum = staging_.output(pre, 3, op, "pre");
  cpu::matmul_forward(sum, staging_.input(inp, 0, op, "inp"),
                      staging_.input(weight, 1, op, "weight"), opt_f32(bias, op, "bias"), d.N, d.C,
                      d.OC);
  cpu::gelu_forward(staging_.output(out, 4, op, "out"), sum, d.N * d.OC);
  staging_.commit(out, 4);
  staging_.commit(pre, 3);
}

void CpuBackend::matmul_gelu_backward(Tensor dpre, Tensor dweight, Tensor dbias, const Tensor& dout,
                                      const Tensor& inp, const Tensor& weight, const Tensor& pre) {
  const char* op = "matmul_gelu_backward";
  const LinearDims d = matmul_gelu_backward_dims(dpre, dweight, dbias, dout, inp, weight, pre);
  gelu_operand_dtype(inp, weight, dpre, "dpre", pre, "pre", op);
  float* g = staging_.output(dpre, 3, op, "dpre");
  linear_backward(op, g, dweight, dbias, dout, inp, weight, d);
  cpu::gelu_backward_in_place(g, staging_.input(pre, 4, op, "pre"), d.N * d.C);
  staging_.commit(dpre, 3);
}

void CpuBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, const Tensor& inp,
                                   const Tensor& weight, const Tensor& bias) {
  const char* op = "layernorm_forward";
  const RowDims d = layernorm_forward_dims(out, mean, rstd, inp, weight, bias);
  cpu::layernorm_forward(staging_.output(out, 3, op, "out"), opt_f32(mean, op, "mean"),
                         opt_f32(rstd, op, "rstd"), need_f32(inp, op, "inp"),
                         need_f32(weight, op, "weight"), opt_f32(bias, op, "bias"), d.N, d.C);
  staging_.commit(out, 3);
}

void CpuBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                                    const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                    const Tensor& rstd, Tensor dinp_bf16) {
  const char* op = "layernorm_backward";
  const RowDims d =
      layernorm_backward_dims(dinp, dweight, dbias, dout, inp, weight, mean, rstd, dinp_bf16);
  cpu::layernorm_backward(opt_f32(dinp, op, "dinp"), opt_f32(dweight, op, "dweight"),
                          opt_f32(dbias, op, "dbias"), need_f32(dout, op, "dout"),
                          need_f32(inp, op, "inp"), need_f32(weight, op, "weight"),
                          need_f32(mean, op, "mean"), need_f32(rstd, op, "rstd"), d.N, d.C);
  if (!dinp_bf16.empty()) round_to_bf16(dinp_bf16, dinp);  // a second pass is fine on cpu
}

void CpuBackend::gelu_forward(Tensor out, const Tensor& inp) {
  const char* op = "gelu_forward";
  const int64_t n = elementwise_dims(op, inp, out, "out");
  cpu::gelu_forward(staging_.output(out, 3, op, "out"), need_f32(inp, op, "inp"), n);
  staging_.commit(out, 3);
}

void CpuBackend::gelu_backward(Tensor dinp, const Tensor& inp, const Tensor& dout) {
  const char* op = "gelu_backward";
  const int64_t n = elementwise_dims(op, inp, dinp, "dinp", dout, "dout");
  cpu::gelu_backward(need_f32(dinp, op, "dinp"), need_f32(inp, op, "inp"),
                     need_f32(dout, op, "dout"), n);
}

void CpuBackend::attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head) {
  const char* op = "attention_forward";
  const AttentionDims d = attention_forward_dims(out, att, qkv, n_head, *this);
  check_qkv_dtype(qkv, out.dtype, op);
  cpu::attention_forward(staging_.output(out, 3, op, "out"), need_f32(att, op, "att"),
                         staging_.input(qkv, 0, op, "qkv"), d.B, d.T, d.C, int64_t{n_head});
  staging_.commit(out, 3);
}

void CpuBackend::attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                                    const Tensor& out, const Tensor& att, int n_head) {
  const char* op = "attention_backward";
  const AttentionDims d = attention_backward_dims(dqkv, dout, qkv, out, att, n_head, *this);
  check_qkv_dtype(qkv, out.dtype, op);
  check_dqkv_dtype(dqkv, qkv, op);
  float* g = staging_.output(dqkv, 3, op, "dqkv");
  std::fill_n(g, dqkv.numel(), 0.0f);  // overwritten (backend.h); cpu::attention_backward adds
  cpu::attention_backward(g, need_f32(dout, op, "dout"), staging_.input(qkv, 0, op, "qkv"),
                          need_f32(att, op, "att"), d.B, d.T, d.C, int64_t{n_head});
  staging_.commit(dqkv, 3);
}

void CpuBackend::attention_forward_cp(Tensor out, Tensor att, const Tensor& qkv_all,
                                      ContextSplit split, int n_head) {
  const char* op = "attention_forward_cp";
  const ContextAttentionDims d = attention_forward_cp_dims(out, att, qkv_all, split, n_head, *this);
  cpu::attention_forward_cp(staging_.output(out, 3, op, "out"), need_f32(att, op, "att"),
                            staging_.input(qkv_all, 0, op, "qkv_all"), int64_t{split.rank}, d.cp,
                            d.B, d.Tl, d.C, int64_t{n_head});
  staging_.commit(out, 3);
}

void CpuBackend::attention_backward_cp(Tensor dqkv_all, const Tensor& dout, const Tensor& qkv_all,
                                       const Tensor& out, const Tensor& att, ContextSplit split,
                                       int n_head) {
  const char* op = "attention_backward_cp";
  const ContextAttentionDims d =
      attention_backward_cp_dims(dqkv_all, dout, qkv_all, out, att, split, n_head, *this);
  cpu::attention_backward_cp(need_f32(dqkv_all, op, "dqkv_all"), need_f32(dout, op, "dout"),
                             staging_.input(qkv_all, 0, op, "qkv_all"), need_f32(att, op, "att"),
                             int64_t{split.rank}, d.cp, d.B, d.Tl, d.C, int64_t{n_head});
}

void CpuBackend::embedding_forward(Tensor out, const Tensor& tokens, const Tensor& wte,
                                   const Tensor& wpe, int64_t pos_offset) {
  const char* op = "embedding_forward";
  const EmbeddingDims d = embedding_forward_dims(out, tokens, wte, wpe, pos_offset);
  const int32_t* tok = need_i32(tokens, op, "tokens");
  check_tokens(tok, d.B * d.T, d.V, op, "tokens", true);
  cpu::embedding_forward(need_f32(out, op, "out"), tok, need_f32(wte, op, "wte"),
                         opt_f32(wpe, op, "wpe"), pos_offset, d.B, d.T, d.C);
}

void CpuBackend::embedding_backward(Tensor dwte, Tensor dwpe, const Tensor& dout,
                                    const Tensor& tokens, int64_t pos_offset) {
  const char* op = "embedding_backward";
  const EmbeddingDims d = embedding_backward_dims(dwte, dwpe, dout, tokens, pos_offset);
  const int32_t* tok = need_i32(tokens, op, "tokens");
  if (!dwte.empty()) check_tokens(tok, d.B * d.T, d.V, op, "tokens", true);
  cpu::embedding_backward(opt_f32(dwte, op, "dwte"), opt_f32(dwpe, op, "dwpe"),
                          need_f32(dout, op, "dout"), tok, pos_offset, d.B, d.T, d.C);
}

void CpuBackend::softmax_cross_entropy(Tensor logits, Tensor losses, const Tensor& targets,
                                       float dloss_scale, int64_t vocab) {
  const char* op = "softmax_cross_entropy";
  const CrossEntropyDims d = softmax_cross_entropy_dims(logits, losses, targets, vocab);
  const int32_t* tgt = need_i32(targets, op, "targets");
  check_tokens(tgt, d.N, d.V, op, "targets", true);
  cpu::softmax_cross_entropy(staging_.in_out(logits, 3, op, "logits"),
                             need_f32(losses, op, "losses"), tgt, d.N, d.V, dloss_scale, d.Vp);
  if (dloss_scale != 0) staging_.commit(logits, 3);  // the dlogits
}

void CpuBackend::cross_entropy_shard_stats(Tensor stats, const Tensor& logits,
                                           const Tensor& targets, int64_t vocab_start,
                                           int64_t vocab) {
  const char* op = "cross_entropy_shard_stats";
  const CrossEntropyShardDims d =
      cross_entropy_shard_stats_dims(stats, logits, targets, vocab_start, vocab);
  const int32_t* tgt = need_i32(targets, op, "targets");
  check_tokens(tgt, d.N, vocab, op, "targets", true);
  cpu::cross_entropy_shard_stats(need_f32(stats, op, "stats"),
                                 staging_.input(logits, 0, op, "logits"), tgt, d.N, d.Vp, d.V,
                                 vocab_start);
}

void CpuBackend::cross_entropy_shard_finish(Tensor logits, Tensor losses, const Tensor& all_stats,
                                            const Tensor& targets, float dloss_scale,
                                            int64_t vocab_start, int64_t vocab) {
  const char* op = "cross_entropy_shard_finish";
  const CrossEntropyShardDims d =
      cross_entropy_shard_finish_dims(logits, losses, all_stats, targets, vocab_start, vocab);
  const int32_t* tgt = need_i32(targets, op, "targets");
  check_tokens(tgt, d.N, vocab, op, "targets", true);
  cpu::cross_entropy_shard_finish(
      staging_.in_out(logits, 3, op, "logits"), need_f32(losses, op, "losses"),
      need_f32(all_stats, op, "all_stats"), d.R, tgt, d.N, d.Vp, d.V, vocab_start, dloss_scale);
  if (dloss_scale != 0) staging_.commit(logits, 3);  // the dlogits
}

}  // namespace trainer::cpu
