#include "runtime/core/op_shapes.h"

#include <algorithm>

#include "runtime/core/op_checks.h"

namespace trainer {

namespace {

LinearDims linear_forward_dims(const char* op, const Tensor& out, const Tensor& inp,
                               const Tensor& weight, const Tensor& bias) {
  LinearDims d{};
  weight_dims(weight, d.OC, d.C, op);
  d.N = rows_of(inp, d.C, op, "inp");
  check_numel(out, d.N * d.OC, op, "out");
  if (!bias.empty()) check_numel(bias, d.OC, op, "bias");
  return d;
}

LinearDims linear_backward_dims(const char* op, const Tensor& dinp, const Tensor& dweight,
                                const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                                const Tensor& weight) {
  LinearDims d{};
  weight_dims(weight, d.OC, d.C, op);
  d.N = rows_of(inp, d.C, op, "inp");
  check_numel(dout, d.N * d.OC, op, "dout");
  if (!dinp.empty()) check_numel(dinp, d.N * d.C, op, "dinp");
  if (!dweight.empty()) check_numel(dweight, d.OC * d.C, op, "dweight");
  if (!dbias.empty()) check_numel(dbias, d.OC, op, "dbias");
  return d;
}

}  // namespace

LinearDims matmul_forward_dims(const Tensor& out, const Tensor& inp, const Tensor& weight,
                               const Tensor& bias, const Tensor& residual) {
  const char* op = "matmul_forward";
  const LinearDims d = linear_forward_dims(op, out, inp, weight, bias);
  if (!residual.empty()) {
    check_numel(residual, d.N * d.OC, op, "residual");
    TRAINER_CHECK(residual.dtype == DType::f32 && out.dtype == DType::f32,
                  op << ": residual must be f32 with an f32 out, got residual "
                     << dtype_name(residual.dtype) << " and out " << dtype_name(out.dtype));
  }
  return d;
}

LinearDims matmul_backward_dims(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                                const Tensor& dout, const Tensor& inp, const Tensor& weight) {
  return linear_backward_dims("matmul_backward", dinp, dweight, dbias, dout, inp, weight);
}

LinearDims matmul_gelu_forward_dims(const Tensor& out, const Tensor& pre, const Tensor& inp,
                                    const Tensor& weight, const Tensor& bias) {
  const char* op = "matmul_gelu_forward";
  const LinearDims d = linear_forward_dims(op, out, inp, weight, bias);
  check_numel(pre, d.N * d.OC, op, "pre");
  return d;
}

LinearDims matmul_gelu_backward_dims(const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                                     const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                     const Tensor& pre) {
  const char* op = "matmul_gelu_backward";
  TRAINER_CHECK(!dpre.empty(), op << ": dpre is required");
  const LinearDims d = linear_backward_dims(op, dpre, dweight, dbias, dout, inp, weight);
  check_numel(pre, d.N * d.C, op, "pre");
  return d;
}

RowDims layernorm_forward_dims(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                               const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  const char* op = "layernorm_forward";
  const int64_t C = last_dim(inp), N = rows_of(inp, C, op, "inp");
  check_numel(out, N * C, op, "out");
  check_numel(weight, C, op, "weight");
  if (!bias.empty()) check_numel(bias, C, op, "bias");
  if (!mean.empty()) check_numel(mean, N, op, "mean");
  if (!rstd.empty()) check_numel(rstd, N, op, "rstd");
  return {N, C};
}

RowDims layernorm_backward_dims(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                                const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                const Tensor& mean, const Tensor& rstd, const Tensor& dinp_bf16) {
  const char* op = "layernorm_backward";
  const int64_t C = last_dim(inp), N = rows_of(inp, C, op, "inp");
  check_numel(dout, N * C, op, "dout");
  check_numel(weight, C, op, "weight");
  check_numel(mean, N, op, "mean");
  check_numel(rstd, N, op, "rstd");
  if (!dinp.empty()) check_numel(dinp, N * C, op, "dinp");
  if (!dweight.empty()) check_numel(dweight, C, op, "dweight");
  if (!dbias.empty()) check_numel(dbias, C, op, "dbias");
  if (!dinp_bf16.empty()) {
    TRAINER_CHECK(!dinp.empty(), op << ": dinp_bf16 needs dinp");
    check_bf16_copy(dinp_bf16, N * C, op, "dinp_bf16");
  }
  return {N, C};
}

int64_t elementwise_dims(const char* op, const Tensor& inp, const Tensor& a, const char* a_name,
                         const Tensor& b, const char* b_name) {
  check_numel(a, inp.numel(), op, a_name);
  if (!b.empty()) check_numel(b, inp.numel(), op, b_name);
  return inp.numel();
}

AttentionDims attention_forward_dims(const Tensor& out, const Tensor& att, const Tensor& qkv,
                                     int n_head, const Backend& be) {
  const char* op = "attention_forward";
  AttentionDims d{};
  attention_dims(qkv, n_head, d.B, d.T, d.C, op);
  check_numel(out, d.B * d.T * d.C, op, "out");
  check_numel(att, be.attention_state_shape(d.B, n_head, d.T, d.C / n_head).numel(), op, "att");
  return d;
}

AttentionDims attention_backward_dims(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                      const Tensor& out, const Tensor& att, int n_head,
                                      const Backend& be) {
  const char* op = "attention_backward";
  AttentionDims d{};
  attention_dims(qkv, n_head, d.B, d.T, d.C, op);
  check_numel(dqkv, d.B * d.T * 3 * d.C, op, "dqkv");
  check_numel(dout, d.B * d.T * d.C, op, "dout");
  check_numel(out, d.B * d.T * d.C, op, "out");
  check_numel(att, be.attention_state_shape(d.B, n_head, d.T, d.C / n_head).numel(), op, "att");
  return d;
}

ContextAttentionDims attention_forward_cp_dims(const Tensor& out, const Tensor& att,
                                               const Tensor& qkv_all, ContextSplit split,
                                               int n_head, const Backend& be) {
  const char* op = "attention_forward_cp";
  TRAINER_CHECK(qkv_all.shape.rank == 4 && qkv_all.shape[0] == split.size && split.size > 0 &&
                    split.rank >= 0 && split.rank < split.size && qkv_all.shape[3] % 3 == 0,
                op << ": qkv_all " << qkv_all.shape.str() << " must be [cp, B, Tl, 3C] with cp = "
                   << split.size << " (rank " << split.rank << ")");
  ContextAttentionDims d{qkv_all.shape[0], qkv_all.shape[1], qkv_all.shape[2],
                         qkv_all.shape[3] / 3};
  TRAINER_CHECK(d.Tl % 2 == 0, op << ": Tl = " << d.Tl << " must be even (two chunks per rank)");
  TRAINER_CHECK(n_head > 0 && d.C % n_head == 0,
                op << ": C = " << d.C << " is not divisible by n_head = " << n_head);
  check_qkv_dtype(qkv_all, out.dtype, op);
  check_numel(out, d.B * d.Tl * d.C, op, "out");
  check_numel(att,
              be.attention_cp_state_shape(d.B, n_head, d.Tl, d.cp * d.Tl, d.C / n_head).numel(), op,
              "att");
  return d;
}

ContextAttentionDims attention_backward_cp_dims(const Tensor& dqkv_all, const Tensor& dout,
                                                const Tensor& qkv_all, const Tensor& out,
                                                const Tensor& att, ContextSplit split, int n_head,
                                                const Backend& be) {
  const char* op = "attention_backward_cp";
  const ContextAttentionDims d = attention_forward_cp_dims(out, att, qkv_all, split, n_head, be);
  TRAINER_CHECK(dqkv_all.dtype == DType::f32,
                op << ": dqkv_all must be f32, got " << dtype_name(dqkv_all.dtype));
  check_numel(dqkv_all, qkv_all.numel(), op, "dqkv_all");
  check_numel(dout, d.B * d.Tl * d.C, op, "dout");
  return d;
}

EmbeddingDims embedding_forward_dims(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                     const Tensor& wpe, int64_t pos_offset) {
  const char* op = "embedding_forward";
  EmbeddingDims d{};
  batch_and_seq(tokens, out, d.B, d.T, op);
  weight_dims(wte, d.V, d.C, op);
  check_numel(out, d.B * d.T * d.C, op, "out");
  if (!wpe.empty()) check_positions(wpe, pos_offset, d.T, d.C, op);
  return d;
}

EmbeddingDims embedding_backward_dims(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                      const Tensor& tokens, int64_t pos_offset) {
  const char* op = "embedding_backward";
  EmbeddingDims d{};
  batch_and_seq(tokens, dout, d.B, d.T, op);
  d.C = last_dim(dout);
  check_numel(dout, d.B * d.T * d.C, op, "dout");
  if (!dwte.empty()) {
    TRAINER_CHECK(dwte.shape.rank == 2 && dwte.shape[1] == d.C,
                  op << ": dwte " << dwte.shape.str() << " must be [V, " << d.C << "]");
    d.V = dwte.shape[0];
  }
  if (!dwpe.empty()) check_positions(dwpe, pos_offset, d.T, d.C, op);
  return d;
}

CrossEntropyDims softmax_cross_entropy_dims(const Tensor& logits, const Tensor& losses,
                                            const Tensor& targets, int64_t vocab) {
  const char* op = "softmax_cross_entropy";
  const int64_t Vp = last_dim(logits), N = rows_of(logits, Vp, op, "logits");
  check_numel(losses, N, op, "losses");
  check_numel(targets, N, op, "targets");
  TRAINER_CHECK(vocab >= 1 && vocab <= Vp, op << ": vocab " << vocab << " must be in [1, " << Vp
                                              << "] (the logits' row length)");
  return {N, vocab, Vp};
}

namespace {

CrossEntropyShardDims cross_entropy_shard_dims(const char* op, const Tensor& logits,
                                               const Tensor& stats, const Tensor& targets,
                                               int64_t vocab_start, int64_t vocab) {
  const int64_t Vp = last_dim(logits), N = rows_of(logits, Vp, op, "logits");
  check_numel(targets, N, op, "targets");
  TRAINER_CHECK(vocab >= 1 && vocab_start >= 0, op << ": vocab " << vocab << " and vocab_start "
                                                   << vocab_start << " must be >= 1 and >= 0");
  const int64_t per_shard = N * 3;
  TRAINER_CHECK(stats.dtype == DType::f32 && stats.numel() >= per_shard &&
                    (N == 0 || stats.numel() % per_shard == 0),
                op << ": stats " << stats.shape.str() << " must be fp32 [R, " << N << ", 3]");
  const int64_t classes = std::clamp<int64_t>(vocab - vocab_start, 0, Vp);
  return {N, classes, Vp, N == 0 ? 1 : stats.numel() / per_shard};
}

}  // namespace

CrossEntropyShardDims cross_entropy_shard_stats_dims(const Tensor& stats, const Tensor& logits,
                                                     const Tensor& targets, int64_t vocab_start,
                                                     int64_t vocab) {
  const char* op = "cross_entropy_shard_stats";
  const CrossEntropyShardDims d =
      cross_entropy_shard_dims(op, logits, stats, targets, vocab_start, vocab);
  TRAINER_CHECK(d.R == 1, op << ": stats " << stats.shape.str() << " must be [" << d.N << ", 3]");
  return d;
}

CrossEntropyShardDims cross_entropy_shard_finish_dims(const Tensor& logits, const Tensor& losses,
                                                      const Tensor& all_stats,
                                                      const Tensor& targets, int64_t vocab_start,
                                                      int64_t vocab) {
  const char* op = "cross_entropy_shard_finish";
  const CrossEntropyShardDims d =
      cross_entropy_shard_dims(op, logits, all_stats, targets, vocab_start, vocab);
  check_numel(losses, d.N, op, "losses");
  return d;
}

MoeRowDims moe_gather_rows_dims(const Tensor& out, const Tensor& inp, const Tensor& token_of_slot,
                                const Tensor& scale) {
  const char* op = "moe_gather_rows";
  MoeRowDims d{};
  d.C = last_dim(inp);
  d.N = rows_of(inp, d.C, op, "inp");
  d.S = rows_of(out, d.C, op, "out");
  check_numel(token_of_slot, d.S, op, "token_of_slot");
  if (!scale.empty()) check_numel(scale, d.S, op, "scale");
  return d;
}

namespace {

// out [N,C] (or dout), inp [S,C], slot [N,K]
MoeRowDims moe_token_side_dims(const char* op, const Tensor& tokens, const char* tokens_name,
                               const Tensor& inp, const Tensor& slot) {
  MoeRowDims d{};
  d.C = last_dim(tokens);
  d.N = rows_of(tokens, d.C, op, tokens_name);
  d.S = rows_of(inp, d.C, op, "inp");
  TRAINER_CHECK(d.N > 0 && slot.numel() % d.N == 0, op << ": slot holds " << slot.numel()
                                                       << " elements, not a multiple of the " << d.N
                                                       << " token rows");
  d.K = slot.numel() / d.N;
  return d;
}

}  // namespace

MoeRowDims moe_combine_rows_dims(const Tensor& out, const Tensor& inp, const Tensor& slot,
                                 const Tensor& weight) {
  const char* op = "moe_combine_rows";
  const MoeRowDims d = moe_token_side_dims(op, out, "out", inp, slot);
  if (!weight.empty()) check_numel(weight, d.N * d.K, op, "weight");
  return d;
}

MoeRowDims moe_gate_grad_dims(const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                              const Tensor& slot) {
  const char* op = "moe_gate_grad";
  const MoeRowDims d = moe_token_side_dims(op, dout, "dout", inp, slot);
  check_numel(dweight, d.N * d.K, op, "dweight");
  return d;
}

}  // namespace trainer
