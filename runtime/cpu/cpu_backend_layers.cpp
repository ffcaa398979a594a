// CpuBackend: the layer ops (matmul, layernorm, gelu, attention, embedding, cross-entropy).
// Each checks its shapes, then calls the fp32 instantiation of runtime/cpu/ops.h.
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/tensor_checks.h"

namespace trainer::cpu {

void CpuBackend::matmul_forward(Tensor out, const Tensor& inp, const Tensor& weight,
                                const Tensor& bias) {
  const char* op = "matmul_forward";
  int64_t OC, C;
  weight_dims(weight, OC, C, op);
  const int64_t N = rows_of(inp, C, op, "inp");
  check_numel(out, N * OC, op, "out");
  if (!bias.empty()) check_numel(bias, OC, op, "bias");
  cpu::matmul_forward(need_f32(out, op, "out"), need_f32(inp, op, "inp"),
                      need_f32(weight, op, "weight"), opt_f32(bias, op, "bias"), N, C, OC);
}

void CpuBackend::matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                                 const Tensor& inp, const Tensor& weight) {
  const char* op = "matmul_backward";
  int64_t OC, C;
  weight_dims(weight, OC, C, op);
  const int64_t N = rows_of(inp, C, op, "inp");
  check_numel(dout, N * OC, op, "dout");
  if (!dinp.empty()) check_numel(dinp, N * C, op, "dinp");
  if (!dweight.empty()) check_numel(dweight, OC * C, op, "dweight");
  if (!dbias.empty()) check_numel(dbias, OC, op, "dbias");
  cpu::matmul_backward(opt_f32(dinp, op, "dinp"), opt_f32(dweight, op, "dweight"),
                       opt_f32(dbias, op, "dbias"), need_f32(dout, op, "dout"),
                       need_f32(inp, op, "inp"), need_f32(weight, op, "weight"), N, C, OC);
}

void CpuBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, const Tensor& inp,
                                   const Tensor& weight, const Tensor& bias) {
  const char* op = "layernorm_forward";
  const int64_t C = last_dim(inp), N = rows_of(inp, C, op, "inp");
  check_numel(out, N * C, op, "out");
  check_numel(weight, C, op, "weight");
  if (!bias.empty()) check_numel(bias, C, op, "bias");
  if (!mean.empty()) check_numel(mean, N, op, "mean");
  if (!rstd.empty()) check_numel(rstd, N, op, "rstd");
  cpu::layernorm_forward(need_f32(out, op, "out"), opt_f32(mean, op, "mean"),
                         opt_f32(rstd, op, "rstd"), need_f32(inp, op, "inp"),
                         need_f32(weight, op, "weight"), opt_f32(bias, op, "bias"), N, C);
}

void CpuBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                                    const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                    const Tensor& rstd) {
  const char* op = "layernorm_backward";
  const int64_t C = last_dim(inp), N = rows_of(inp, C, op, "inp");
  check_numel(dout, N * C, op, "dout");
  check_numel(weight, C, op, "weight");
  check_numel(mean, N, op, "mean");
  check_numel(rstd, N, op, "rstd");
  if (!dinp.empty()) check_numel(dinp, N * C, op, "dinp");
  if (!dweight.empty()) check_numel(dweight, C, op, "dweight");
  if (!dbias.empty()) check_numel(dbias, C, op, "dbias");
  cpu::layernorm_backward(opt_f32(dinp, op, "dinp"), opt_f32(dweight, op, "dweight"),
                          opt_f32(dbias, op, "dbias"), need_f32(dout, op, "dout"),
                          need_f32(inp, op, "inp"), need_f32(weight, op, "weight"),
                          need_f32(mean, op, "mean"), need_f32(rstd, op, "rstd"), N, C);
}

void CpuBackend::gelu_forward(Tensor out, const Tensor& inp) {
  check_numel(out, inp.numel(), "gelu_forward", "out");
  cpu::gelu_forward(need_f32(out, "gelu_forward", "out"), need_f32(inp, "gelu_forward", "inp"),
                    inp.numel());
}

void CpuBackend::gelu_backward(Tensor dinp, const Tensor& inp, const Tensor& dout) {
  const char* op = "gelu_backward";
  check_numel(dinp, inp.numel(), op, "dinp");
  check_numel(dout, inp.numel(), op, "dout");
  cpu::gelu_backward(need_f32(dinp, op, "dinp"), need_f32(inp, op, "inp"),
                     need_f32(dout, op, "dout"), inp.numel());
}

void CpuBackend::attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head) {
  const char* op = "attention_forward";
  int64_t B, T, C;
  attention_dims(qkv, n_head, B, T, C, op);
  check_numel(out, B * T * C, op, "out");
  check_numel(att, B * n_head * T * T, op, "att");
  cpu::attention_forward(need_f32(out, op, "out"), need_f32(att, op, "att"),
                         need_f32(qkv, op, "qkv"), B, T, C, int64_t{n_head});
}

void CpuBackend::attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                                    const Tensor& att, int n_head) {
  const char* op = "attention_backward";
  int64_t B, T, C;
  attention_dims(qkv, n_head, B, T, C, op);
  check_numel(dqkv, B * T * 3 * C, op, "dqkv");
  check_numel(dout, B * T * C, op, "dout");
  check_numel(att, B * n_head * T * T, op, "att");
  cpu::attention_backward(need_f32(dqkv, op, "dqkv"), need_f32(dout, op, "dout"),
                          need_f32(qkv, op, "qkv"), need_f32(att, op, "att"), B, T, C,
                          int64_t{n_head});
}

void CpuBackend::embedding_forward(Tensor out, const Tensor& tokens, const Tensor& wte,
                                   const Tensor& wpe, int64_t pos_offset) {
  const char* op = "embedding_forward";
  int64_t B, T, V, C;
  batch_and_seq(tokens, out, B, T, op);
  weight_dims(wte, V, C, op);
  check_numel(out, B * T * C, op, "out");
  if (!wpe.empty()) check_positions(wpe, pos_offset, T, C, op);
  const int32_t* tok = need_i32(tokens, op, "tokens");
  check_tokens(tok, B * T, V, op, "tokens", false);
  cpu::embedding_forward(need_f32(out, op, "out"), tok, need_f32(wte, op, "wte"),
                         opt_f32(wpe, op, "wpe"), pos_offset, B, T, C);
}

void CpuBackend::embedding_backward(Tensor dwte, Tensor dwpe, const Tensor& dout,
                                    const Tensor& tokens, int64_t pos_offset) {
  const char* op = "embedding_backward";
  int64_t B, T;
  batch_and_seq(tokens, dout, B, T, op);
  const int64_t C = last_dim(dout);
  check_numel(dout, B * T * C, op, "dout");
  const int32_t* tok = need_i32(tokens, op, "tokens");
  if (!dwte.empty()) {
    TRAINER_CHECK(dwte.shape.rank == 2 && dwte.shape[1] == C,
                  op << ": dwte " << dwte.shape.str() << " must be [V, " << C << "]");
    check_tokens(tok, B * T, dwte.shape[0], op, "tokens", false);
  }
  if (!dwpe.empty()) check_positions(dwpe, pos_offset, T, C, op);
  cpu::embedding_backward(opt_f32(dwte, op, "dwte"), opt_f32(dwpe, op, "dwpe"),
                          need_f32(dout, op, "dout"), tok, pos_offset, B, T, C);
}

void CpuBackend::softmax_cross_entropy(Tensor logits, Tensor losses, const Tensor& targets,
                                       float dloss_scale) {
  const char* op = "softmax_cross_entropy";
  const int64_t V = last_dim(logits), N = rows_of(logits, V, op, "logits");
  check_numel(losses, N, op, "losses");
  check_numel(targets, N, op, "targets");
  const int32_t* tgt = need_i32(targets, op, "targets");
  check_tokens(tgt, N, V, op, "targets", true);
  cpu::softmax_cross_entropy(need_f32(logits, op, "logits"), need_f32(losses, op, "losses"), tgt, N,
                             V, dloss_scale);
}

}  // namespace trainer::cpu
